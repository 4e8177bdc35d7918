// Package schedule turns a schedule into occurrences and window keys. It is
// pure and deterministic: the caller gives the calendar time (the leader's
// calendar clock, Unix ms); nothing here reads a clock.
//
// Two views of the same engine:
//   - Schedule (expression + zone) with time.Time methods, used by the
//     code-defined runner (client/periodic) and the leader's absence monitor;
//   - Calendar (Schedule + window layout) with Unix-ms methods — Next, Prev,
//     Due, Trigger — for the leader that materialises schedule objects.
//
// A window key is taken from the occurrence the schedule intended, in the
// schedule's time zone — never from the time a run started — so both sides
// agree on it. DESIGN.md says what happens at DST changes, how catch-up,
// the starting deadline and skipped records work, and the keys of
// triggered occurrences.
package schedule

import (
	"fmt"
	"strings"
	"time"
)

// OncePrefix marks a one-shot schedule: "@once 2026-09-25T10:00:00Z"
// (fractional seconds allowed).
const OncePrefix = "@once "

// OnceWindow is the window key of a one-shot job.
const OnceWindow = "once"

type kind uint8

const (
	kindCron  kind = iota
	kindEvery      // @every: multiples of a whole number of seconds since the Unix epoch
	kindOnce
)

// Schedule is a parsed schedule in its time zone. It is immutable and safe
// for concurrent use.
type Schedule struct {
	expr     string
	loc      *time.Location
	z        zone
	kind     kind
	spec     cronSpec
	every    int64 // seconds
	once     time.Time
	onceMs   int64 // once, rounded up to the millisecond: never before the requested time
	interval time.Duration
	// cadence: a cron expression follows the clock at DST changes
	// (DSTCadence, resolved from the policy), instead of running each wall
	// time once.
	cadence bool
}

// Parse reads a cron expression (5 fields; "@seconds" and 6 fields for a
// seconds field first), a descriptor (@daily, @hourly, @every 30s, …) or
// "@once <RFC3339>", in the IANA zone tz (empty means UTC; "Local" is
// refused), with the default DST policy (DSTAuto). Errors wrap ErrInvalid.
func Parse(expr, tz string) (*Schedule, error) { return parse(expr, tz, DSTAuto) }

func parse(expr, tz string, dst DSTPolicy) (*Schedule, error) {
	loc := time.UTC
	if tz == "Local" { // time.LoadLocation's name for this process's own zone: each leader's TZ
		return nil, invalid("time_zone", `"Local" is each leader's own zone setting: give an IANA zone name or UTC`)
	}
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, invalid("time_zone", fmt.Sprintf("unknown time zone %q", tz))
		}
		loc = l
	}
	s := &Schedule{expr: strings.TrimSpace(expr), loc: loc, z: newZone(loc)}
	if s.expr == "" {
		return nil, invalid("schedule", "empty")
	}
	if rest, ok := strings.CutPrefix(s.expr, OncePrefix); ok {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(rest))
		if err != nil {
			return nil, invalid("schedule", fmt.Sprintf("one-shot %q: want \"@once <RFC3339 time>\"", s.expr))
		}
		s.kind, s.once = kindOnce, t.In(loc)
		s.onceMs = t.UnixMilli()
		if t.Nanosecond()%int(time.Millisecond) != 0 {
			s.onceMs++
		}
		return s, nil
	}
	if strings.HasPrefix(s.expr, "CRON_TZ=") || strings.HasPrefix(s.expr, "TZ=") {
		return nil, invalid("schedule", fmt.Sprintf("%q: give the time zone separately", s.expr))
	}
	if rest, ok := strings.CutPrefix(s.expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, invalid("schedule", fmt.Sprintf("%q: @every needs a whole number of seconds, at least 1s", s.expr))
		}
		s.kind, s.every, s.interval = kindEvery, int64(d/time.Second), d
		return s, nil
	}
	spec, err := parseCron(s.expr)
	if err != nil {
		return nil, invalid("schedule", fmt.Sprintf("%q: %v", s.expr, err))
	}
	s.kind, s.spec = kindCron, spec
	s.cadence = dst == DSTCadence || (dst == DSTAuto && spec.wildcard)
	s.interval = s.measureInterval()
	if s.interval <= 0 {
		return nil, invalid("schedule", fmt.Sprintf("%q never fires", s.expr))
	}
	return s, nil
}

// measureInterval is the shortest gap between slots over a sample of 400,
// on the wall clock (so that a DST change cannot make a daily job look
// hourly): it sets the window's granularity.
func (s *Schedule) measureInterval() time.Duration {
	w := dayNumber(2025, 1, 1) * daySecs
	prev, ok := s.spec.nextSlot(w)
	if !ok {
		return 0
	}
	best := int64(-1)
	for i := 0; i < 400; i++ {
		next, ok := s.spec.nextSlot(prev + 1)
		if !ok {
			break
		}
		if d := next - prev; best < 0 || d < best {
			best = d
		}
		prev = next
	}
	if best < 0 { // a single slot in 8 years: call it a year
		best = 366 * daySecs
	}
	return time.Duration(best) * time.Second
}

// String is the expression.
func (s *Schedule) String() string { return s.expr }

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// OneShot reports whether the schedule fires once.
func (s *Schedule) OneShot() bool { return s.kind == kindOnce }

// DST is the DST policy the schedule follows: DSTWallTime or DSTCadence
// for a cron expression (DSTAuto resolved), DSTAuto for @every and @once
// (real time: no policy applies).
func (s *Schedule) DST() DSTPolicy {
	switch {
	case s.kind != kindCron:
		return DSTAuto
	case s.cadence:
		return DSTCadence
	}
	return DSTWallTime
}

// Interval is the shortest gap between occurrences (0 for one-shot).
func (s *Schedule) Interval() time.Duration { return s.interval }

// Next returns the first occurrence strictly after t (zero if none), in
// the schedule's zone.
func (s *Schedule) Next(t time.Time) time.Time {
	o, ok := s.nextAfter(t.UnixMilli())
	if !ok {
		return time.Time{}
	}
	return time.UnixMilli(o.at).In(s.loc)
}

// Between returns the occurrences in (from, to], oldest first, at most max
// (the newest max when there are more). Its work is bounded by max.
func (s *Schedule) Between(from, to time.Time, max int) []time.Time {
	lo, hi := from.UnixMilli(), to.UnixMilli()
	var rev []time.Time
	for len(rev) < max {
		o, ok := s.atOrBefore(hi)
		if !ok || o.at <= lo || o.at > hi {
			break
		}
		rev = append(rev, time.UnixMilli(o.at).In(s.loc))
		hi = o.at - 1
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// Window says how an occurrence becomes a window key: the occurrence's
// wall-clock time in the schedule's zone, shifted by ShiftDays calendar
// days, formatted with Layout (a Go time layout). An empty Layout follows
// the schedule's granularity: month, day, hour, minute or second.
type Window struct {
	Layout    string
	ShiftDays int
}

// ManualMark separates a triggered occurrence's window key from the
// scheduled window it falls in (see Calendar.Trigger).
const ManualMark = "/manual-"

// MaxShiftDays bounds Window.ShiftDays.
const MaxShiftDays = 366

func (w Window) validate() error {
	if len(w.Layout) > 64 {
		return invalid("window_layout", "longer than 64 bytes")
	}
	if strings.Contains(w.Layout, ManualMark) {
		return invalid("window_layout", fmt.Sprintf("contains %q, reserved for triggered occurrences", ManualMark))
	}
	if w.ShiftDays < -MaxShiftDays || w.ShiftDays > MaxShiftDays {
		return invalid("window_shift_days", fmt.Sprintf("%d is outside [-%d, %d]", w.ShiftDays, MaxShiftDays, MaxShiftDays))
	}
	return nil
}

// DefaultLayout is the layout for a schedule of the given interval.
func DefaultLayout(interval time.Duration) string {
	switch {
	case interval >= 28*24*time.Hour:
		return "2006-01"
	case interval >= 24*time.Hour-time.Hour: // a day, also across DST
		return "2006-01-02"
	case interval >= time.Hour:
		return "2006-01-02T15"
	case interval >= time.Minute:
		return "2006-01-02T15:04"
	default:
		return "2006-01-02T15:04:05"
	}
}

// Key returns the window key of occurrence occ (an instant returned by
// Next or Between). The key is the occurrence's scheduled wall-clock time
// in the zone, so an occurrence moved by a DST gap keeps the key of the
// wall time it was scheduled for (02:30 on the spring-forward day runs at
// 03:00 and keeps "…T02:30" in a minute layout).
func (s *Schedule) Key(at time.Time, w Window) string {
	return s.keyOf(s.occAt(floorDiv(at.UnixMilli(), 1000)), w)
}

// occAt is the occurrence a schedule would have at instant t (seconds).
func (s *Schedule) occAt(t int64) occ {
	return occ{at: t * 1000, wall: s.wallOf(t), second: s.secondPass(t)}
}

// secondPass reports whether a cadence occurrence at instant t (seconds)
// is in the second pass of a repeated interval.
func (s *Schedule) secondPass(t int64) bool {
	if s.kind != kindCron || !s.cadence {
		return false
	}
	_, _, ok := s.z.repeat(t)
	return ok
}

// wallOf is the scheduled wall time of an occurrence at instant t
// (seconds): its wall reading, except at the end of a DST gap, where the
// occurrence stands for a slot inside the gap (DSTWallTime).
func (s *Schedule) wallOf(t int64) int64 {
	if s.kind == kindCron && !s.cadence {
		if g, ok := s.z.gapAt(t); ok {
			if rep, moved := s.gapRep(g); moved {
				return rep
			}
		}
	}
	return s.z.wall(t)
}

// keyOf formats the window key of an occurrence: its scheduled wall time,
// shifted by whole civil days. An unshifted @every occurrence is formatted
// at its instant, so a layout with the offset tells the two passes of a
// repeated hour apart.
func (s *Schedule) keyOf(o occ, win Window) string {
	if s.kind == kindOnce {
		return OnceWindow
	}
	layout := win.Layout
	if layout == "" {
		layout = DefaultLayout(s.interval)
	}
	var t time.Time
	if s.kind == kindEvery && win.ShiftDays == 0 {
		t = time.Unix(o.at/1000, 0).In(s.loc)
	} else {
		t = s.z.timeOf(o.wall + int64(win.ShiftDays)*daySecs)
	}
	var buf [64]byte
	key := t.AppendFormat(buf[:0], layout)
	if o.second {
		// The second pass of a repeated wall time (DSTCadence): formatted
		// at its instant when the layout tells the passes apart (it has
		// the offset), else with the offset appended.
		at := time.Unix(o.at/1000, 0).In(s.loc)
		var alt [64]byte
		if k2 := at.AppendFormat(alt[:0], layout); win.ShiftDays == 0 && string(k2) != string(key) {
			return string(k2)
		}
		key = at.AppendFormat(key, "Z07:00")
	}
	return string(key)
}
