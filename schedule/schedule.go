// Package schedule turns a job's schedule into occurrences and window keys.
// The runner (client/jobs) and the server's monitor use the same code, so a
// window key means the same thing on both sides: it is taken from the
// occurrence the schedule intended, in the job's time zone — never from the
// time a run started.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser accepts 5 fields, an optional leading seconds field, and
// descriptors (@daily, @hourly, @every 30s, …).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// OncePrefix marks a one-shot schedule: "@once 2026-09-25T10:00:00Z".
const OncePrefix = "@once "

// OnceWindow is the window key of a one-shot job.
const OnceWindow = "once"

// Schedule is a parsed schedule in its time zone.
type Schedule struct {
	expr     string
	loc      *time.Location
	cron     cron.Schedule // nil for one-shot
	once     time.Time
	interval time.Duration
}

// Parse reads a cron expression, a descriptor or "@once <RFC3339>", in the
// IANA zone tz (empty means UTC).
func Parse(expr, tz string) (*Schedule, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: %w", tz, err)
		}
		loc = l
	}
	s := &Schedule{expr: strings.TrimSpace(expr), loc: loc}
	if s.expr == "" {
		return nil, errors.New("schedule is empty")
	}
	if strings.HasPrefix(s.expr, OncePrefix) {
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(strings.TrimPrefix(s.expr, OncePrefix)))
		if err != nil {
			return nil, fmt.Errorf("one-shot schedule %q: %w", s.expr, err)
		}
		s.once = t.In(loc)
		return s, nil
	}
	if strings.HasPrefix(s.expr, "CRON_TZ=") || strings.HasPrefix(s.expr, "TZ=") {
		return nil, fmt.Errorf("schedule %q: give the time zone separately", s.expr)
	}
	var c cron.Schedule
	if rest, ok := strings.CutPrefix(s.expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("schedule %q: @every needs a whole number of seconds, at least 1s", s.expr)
		}
		c = every(d)
	} else {
		var err error
		if c, err = parser.Parse(s.expr); err != nil {
			return nil, fmt.Errorf("schedule %q: %w", s.expr, err)
		}
	}
	s.cron = c
	s.interval = s.measureInterval()
	if s.interval <= 0 {
		return nil, fmt.Errorf("schedule %q never fires", s.expr)
	}
	return s, nil
}

// measureInterval is the shortest gap between occurrences over a sample
// year, measured in UTC so that a DST change cannot make a daily job look
// hourly: it sets the window's granularity.
func (s *Schedule) measureInterval() time.Duration {
	t := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := s.cron.Next(t)
	if prev.IsZero() {
		return 0
	}
	best := time.Duration(1<<63 - 1)
	for i := 0; i < 400; i++ {
		next := s.cron.Next(prev)
		if next.IsZero() {
			break
		}
		if d := next.Sub(prev); d < best && d > 0 {
			best = d
		}
		prev = next
	}
	return best
}

// every fires at the multiples of d since the Unix epoch. (robfig/cron's
// @every counts from the time it is asked, so two replicas would disagree
// on the occurrences; here every replica computes the same ones.)
type every time.Duration

func (e every) Next(t time.Time) time.Time {
	d := int64(e)
	n := t.UnixNano()
	next := (n/d + 1) * d
	if n < 0 && n%d != 0 {
		next = (n / d) * d
	}
	return time.Unix(0, next).In(t.Location())
}

// String is the expression.
func (s *Schedule) String() string { return s.expr }

// Location is the job's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// OneShot reports whether the schedule fires once.
func (s *Schedule) OneShot() bool { return s.cron == nil }

// Interval is the shortest gap between occurrences (0 for one-shot).
func (s *Schedule) Interval() time.Duration { return s.interval }

// Next returns the first occurrence strictly after t (zero if none).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.cron == nil {
		if s.once.After(t) {
			return s.once
		}
		return time.Time{}
	}
	return s.cron.Next(t.In(s.loc))
}

// Between returns the occurrences in (from, to], oldest first, at most max
// (the newest max when there are more).
func (s *Schedule) Between(from, to time.Time, max int) []time.Time {
	var out []time.Time
	for t := s.Next(from); !t.IsZero() && !t.After(to); t = s.Next(t) {
		out = append(out, t)
		if len(out) > max {
			out = out[1:]
		}
	}
	return out
}

// Window says how an occurrence becomes a window key: the occurrence,
// shifted by ShiftDays calendar days in the job's zone, formatted with
// Layout (a Go time layout). An empty Layout follows the schedule's
// granularity: month, day, hour, minute or second.
type Window struct {
	Layout    string
	ShiftDays int
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

// Key returns the window key of occurrence occ.
func (s *Schedule) Key(occ time.Time, w Window) string {
	if s.cron == nil {
		return OnceWindow
	}
	t := occ.In(s.loc)
	if w.ShiftDays != 0 {
		t = t.AddDate(0, 0, w.ShiftDays)
	}
	layout := w.Layout
	if layout == "" {
		layout = DefaultLayout(s.interval)
	}
	return t.Format(layout)
}
