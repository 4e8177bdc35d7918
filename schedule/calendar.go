package schedule

import (
	"fmt"
	"strconv"
	"time"
)

// Spec is what the calendar needs to know about a schedule object.
type Spec struct {
	// Expr is a cron expression (5 fields; "@seconds" and 6 fields for a
	// seconds field first), a
	// descriptor (@daily, @hourly, @every 30s, …) or "@once <RFC3339>".
	Expr string
	// TimeZone is an IANA zone name; empty means UTC.
	TimeZone string
	// Window makes window keys (zero: the schedule's granularity, no shift).
	Window Window
	// DST is what a cron expression does when the clocks change (zero:
	// DSTAuto, cronie's rule). @every and @once ignore it.
	DST DSTPolicy
}

// DSTPolicy says what a cron expression does at DST changes (DESIGN.md,
// "Occurrences and DST"). The values are those of the wire enum
// ScheduleDstPolicy (UNSPECIFIED, WALL_TIME, CADENCE), so a stored policy
// converts by a cast.
type DSTPolicy uint8

const (
	// DSTAuto is cronie's rule: DSTCadence when the minute or hour field
	// starts with a wildcard ("*/15 * * * *", "0 * * * *", @hourly),
	// DSTWallTime otherwise ("30 1 * * *", @daily).
	DSTAuto DSTPolicy = iota
	// DSTWallTime: each wall-clock time runs once. A repeated one runs at
	// its first instant only; a skipped one runs when the gap ends.
	DSTWallTime
	// DSTCadence follows the clock: an instant runs when the zone's clock
	// shows a slot. A repeated wall time runs at both instants (the second
	// pass's window keys carry the offset); a skipped one does not run
	// (one DST_GAP record), as the clock never shows it.
	DSTCadence
)

func (p DSTPolicy) String() string {
	switch p {
	case DSTAuto:
		return "AUTO"
	case DSTWallTime:
		return "WALL_TIME"
	case DSTCadence:
		return "CADENCE"
	}
	return "UNKNOWN"
}

// Calendar is a schedule with its window layout, in Unix milliseconds of
// the calendar clock the caller provides: what the leader needs to list,
// materialise and trigger occurrences. It is immutable and safe for
// concurrent use; compile it once per schedule version and keep it.
type Calendar struct {
	s   *Schedule
	win Window
}

// Compile validates a schedule and its window. Errors wrap ErrInvalid and
// name the field (*InvalidError).
func Compile(spec Spec) (*Calendar, error) {
	if spec.DST > DSTCadence {
		return nil, invalid("dst_policy", fmt.Sprintf("unknown value %d", spec.DST))
	}
	s, err := parse(spec.Expr, spec.TimeZone, spec.DST)
	if err != nil {
		return nil, err
	}
	if err := spec.Window.validate(); err != nil {
		return nil, err
	}
	return &Calendar{s: s, win: spec.Window}, nil
}

// Schedule is the calendar's schedule.
func (c *Calendar) Schedule() *Schedule { return c.s }

// Window is the calendar's window layout.
func (c *Calendar) Window() Window { return c.win }

// Occurrence is one occurrence of a schedule.
type Occurrence struct {
	// At is when it is due: Unix ms on the calendar clock. It is the
	// scheduled wall-clock time in the schedule's zone, except for DSTGap.
	At int64
	// Window is its window key: the job's unique key is (schedule, Window).
	Window string
	// DSTGap: the scheduled wall-clock time did not exist (clocks jumped
	// over it); At is the instant the gap ends and Window still names the
	// scheduled time (DESIGN.md).
	DSTGap bool
	// Manual: made by Trigger, not by the schedule.
	Manual bool
}

// MaxList bounds n in Next and Prev.
const MaxList = 1000

func (c *Calendar) occurrence(o occ) Occurrence {
	return Occurrence{At: o.at, Window: c.s.keyOf(o, c.win), DSTGap: o.dstGap}
}

// Next returns the first n occurrences strictly after the instant after
// (Unix ms), oldest first; n is capped at MaxList.
func (c *Calendar) Next(after int64, n int) []Occurrence {
	n = min(n, MaxList)
	var out []Occurrence
	for len(out) < n {
		o, ok := c.s.nextAfter(after)
		if !ok || o.at <= after { // never trust a step to move forward
			break
		}
		out = append(out, c.occurrence(o))
		after = o.at
	}
	return out
}

// Prev returns the last n occurrences strictly before the instant before
// (Unix ms), newest first; n is capped at MaxList.
func (c *Calendar) Prev(before int64, n int) []Occurrence {
	n = min(n, MaxList)
	var out []Occurrence
	y := before - 1
	for len(out) < n {
		o, ok := c.s.atOrBefore(y)
		if !ok || o.at > y {
			break
		}
		out = append(out, c.occurrence(o))
		y = o.at - 1
	}
	return out
}

// Count is the number of occurrences in (after, through] (Unix ms), without
// listing them: its work grows with the days and zone transitions of the
// interval, not with the number of occurrences.
func (c *Calendar) Count(after, through int64) int64 { return c.s.count(after, through) }

// Key is the window key of an instant as a scheduled occurrence at that
// instant would have it.
func (c *Calendar) Key(at int64) string {
	return c.s.keyOf(c.s.occAt(floorDiv(at, 1000)), c.win)
}

// Trigger is a manual occurrence at instant at (Unix ms, stamped by the
// leader): an extra occurrence, beside the schedule's own, with a window
// key of its own — the window the instant falls in, ManualMark, and the
// instant in ms:
//
//	2026-09-25/manual-1790337600123
//
// The prefix groups a trigger with the business window it ran in (the day
// for a daily schedule, shifted like the scheduled ones); the suffix makes
// it distinct from every scheduled key (no layout may contain ManualMark)
// and from other triggers. Two triggers stamped with the same millisecond
// are one occurrence (a retried trigger, not a second run).
func (c *Calendar) Trigger(at int64) Occurrence {
	return Occurrence{At: at, Window: c.Key(at) + ManualMark + strconv.FormatInt(at, 10), Manual: true}
}

// Reason says why occurrences were not created.
type Reason uint8

const (
	// SkipHorizon: older than now − horizon (the catch-up horizon).
	SkipHorizon Reason = iota + 1
	// SkipDeadline: now − occurrence > the starting deadline.
	SkipDeadline
	// SkipDSTGap: scheduled wall-clock times inside a DST gap beyond the
	// one that runs at the gap's end (an every-minute expression does not
	// run 60 times at 03:00 on the spring-forward day).
	SkipDSTGap
	// SkipDSTRepeat: an @every occurrence in the repeated hour after the
	// clocks went back whose window key is that of an occurrence in the
	// first pass (a layout without the zone offset): that window was
	// already materialised.
	SkipDSTRepeat
)

func (r Reason) String() string {
	switch r {
	case SkipHorizon:
		return "HORIZON"
	case SkipDeadline:
		return "DEADLINE"
	case SkipDSTGap:
		return "DST_GAP"
	case SkipDSTRepeat:
		return "DST_REPEAT"
	}
	return "UNKNOWN"
}

// Skipped is a run of consecutive occurrences skipped for one reason, in
// one record however many they are.
type Skipped struct {
	Reason Reason
	// First and Last are the instants (Unix ms) of the first and last
	// skipped occurrence; for SkipDSTGap both are the gap's end, where the
	// skipped wall-clock times would have run.
	First, Last int64
	Count       int64
	// FirstWindow and LastWindow are their window keys.
	FirstWindow, LastWindow string
}

// Due is the answer of Calendar.Due.
type Due struct {
	// Create lists the occurrences to create, oldest first.
	Create []Occurrence
	// Skipped lists the skipped runs, oldest first.
	Skipped []Skipped
	// Through is the new "last materialised" mark: every occurrence in
	// (lastMaterialised, Through] is in Create or counted in Skipped. It is
	// now unless More.
	Through int64
	// More: max was reached; call again with Through as lastMaterialised.
	More bool
}

// Due decides the occurrences in (lastMaterialised, now] (Unix ms on the
// calendar clock): each is created, or skipped with a reason:
//   - SkipHorizon when older than now − horizon;
//   - SkipDeadline when now − occurrence > startingDeadline (0: none);
//   - SkipDSTGap / SkipDSTRepeat at DST changes (DESIGN.md).
//
// Skipped occurrences are counted, not listed, so the work does not grow
// with their number (a 3-day outage of an every-second schedule is one
// record); at most max occurrences are examined one by one (created or
// skipped as SkipDSTRepeat), and when more are due, More is set and
// Through says where to resume. Errors wrap ErrInvalid.
func (c *Calendar) Due(lastMaterialised, now int64, horizon, startingDeadline time.Duration, max int) (Due, error) {
	switch {
	case horizon < 0:
		return Due{}, invalid("horizon", "negative")
	case startingDeadline < 0:
		return Due{}, invalid("starting_deadline", "negative")
	case max < 1:
		return Due{}, invalid("max", "must be at least 1")
	}
	d := Due{Through: now}
	if now <= lastMaterialised {
		d.Through = lastMaterialised
		return d, nil
	}
	// Bands, oldest first: (last, hStart) HORIZON, [hStart, cStart)
	// DEADLINE, [cStart, now] create.
	hStart := now - horizon.Milliseconds()
	cStart := hStart
	if startingDeadline > 0 {
		cStart = max64(cStart, now-startingDeadline.Milliseconds())
	}
	c.skipRange(&d, SkipHorizon, lastMaterialised, hStart-1)
	c.skipRange(&d, SkipDeadline, max64(lastMaterialised, hStart-1), cStart-1)

	x := max64(lastMaterialised, cStart-1)
	for examined := 0; ; examined++ {
		o, ok := c.s.nextAfter(x)
		if !ok || o.at > now || o.at <= x {
			break
		}
		if examined == max {
			d.More, d.Through = true, x
			break
		}
		oc := c.occurrence(o)
		if c.repeated(o, oc.Window) {
			c.addSkip(&d, SkipDSTRepeat, oc)
		} else {
			d.Create = append(d.Create, oc)
		}
		x = o.at
	}

	if c.s.kind == kindCron {
		c.s.z.gaps(floorDiv(lastMaterialised, 1000), floorDiv(d.Through, 1000), func(g gap) {
			c.gapSkip(&d, g)
		})
	}
	sortSkipped(d.Skipped)
	return d, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// skipRange records the occurrences in (a, b] as skipped for reason r.
func (c *Calendar) skipRange(d *Due, r Reason, a, b int64) {
	if b <= a {
		return
	}
	n := c.s.count(a, b)
	if n == 0 {
		return
	}
	first, _ := c.s.nextAfter(a)
	last, _ := c.s.atOrBefore(b)
	d.Skipped = append(d.Skipped, Skipped{Reason: r, First: first.at, Last: last.at, Count: n,
		FirstWindow: c.s.keyOf(first, c.win), LastWindow: c.s.keyOf(last, c.win)})
}

// addSkip adds one occurrence to the last record when it has the same
// reason, or starts a record.
func (c *Calendar) addSkip(d *Due, r Reason, o Occurrence) {
	if n := len(d.Skipped); n > 0 && d.Skipped[n-1].Reason == r {
		k := &d.Skipped[n-1]
		k.Last, k.LastWindow = o.At, o.Window
		k.Count++
		return
	}
	d.Skipped = append(d.Skipped, Skipped{Reason: r, First: o.At, Last: o.At, Count: 1, FirstWindow: o.Window, LastWindow: o.Window})
}

// gapSkip records the slots of gap g that do not run on their own.
func (c *Calendar) gapSkip(d *Due, g gap) {
	n := c.s.absorbed(g)
	if n == 0 {
		return
	}
	first, _ := c.s.spec.nextSlot(g.from)
	last, _ := c.s.spec.prevSlot(g.to - 1)
	if rep, moved := c.s.gapRep(g); moved && !c.s.cadence { // the last slot runs; the one before is the last skipped
		last, _ = c.s.spec.prevSlot(rep - 1)
	}
	d.Skipped = append(d.Skipped, Skipped{Reason: SkipDSTGap, First: g.at * 1000, Last: g.at * 1000, Count: n,
		FirstWindow: c.s.keyOf(occ{wall: first}, c.win), LastWindow: c.s.keyOf(occ{wall: last}, c.win)})
}

// repeated reports whether @every occurrence o, in the second pass of a
// repeated interval, has the window key of an occurrence of the first pass.
func (c *Calendar) repeated(o occ, key string) bool {
	if c.s.kind != kindEvery {
		return false
	}
	back, st, ok := c.s.z.repeat(o.at / 1000)
	if !ok {
		return false
	}
	// The first pass is [st-back, st); its occurrences nearest to the same
	// wall reading (the twin instant) are the only ones with the same key
	// when the layout has no offset.
	lo, hi := (st-back)*1000, st*1000
	twin := o.at - back*1000
	if p, ok := c.s.atOrBefore(twin); ok && p.at >= lo && p.at < hi && c.s.keyOf(p, c.win) == key {
		return true
	}
	if n, ok := c.s.nextAfter(twin - 1); ok && n.at >= lo && n.at < hi && c.s.keyOf(n, c.win) == key {
		return true
	}
	return false
}

// sortSkipped orders records by First (a handful: insertion sort, no
// allocation).
func sortSkipped(s []Skipped) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].First < s[j-1].First; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
