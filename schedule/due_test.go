package schedule

import (
	"errors"
	"testing"
	"time"
)

// A 3-day outage of an every-second schedule with a 1-day horizon: the two
// days beyond the horizon are one HORIZON record; the day inside it is
// created, at most max per call, in calls that resume where the last one
// stopped, until every occurrence was created exactly once.
func TestDueOutageCatchUp(t *testing.T) {
	last := utc("2026-09-22T10:00:00Z")
	now := last + 3*86400_000
	for _, tc := range []struct{ expr, tz, firstKey string }{
		{"@every 1s", "UTC", "2026-09-22T10:00:01"},
		{"@seconds * * * * * *", "UTC", "2026-09-22T10:00:01"},
		{"@seconds * * * * * *", "Europe/Berlin", "2026-09-22T12:00:01"},
	} {
		c := mustCal(t, tc.expr, tc.tz, Window{})
		d, err := c.Due(last, now, 24*time.Hour, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		want := Skipped{Reason: SkipHorizon, First: last + 1000, Last: now - 86400_000 - 1000, Count: 2*86400 - 1,
			FirstWindow: tc.firstKey, LastWindow: c.Key(now - 86400_000 - 1000)}
		if len(d.Skipped) != 1 || d.Skipped[0] != want {
			t.Fatalf("%s: skipped %+v, want %+v", tc.expr, d.Skipped, want)
		}
		created, calls, next := 0, 1, now-86400_000
		for {
			if len(d.Create) > 1000 {
				t.Fatalf("%d created in one call", len(d.Create))
			}
			for _, o := range d.Create {
				if o.At != next {
					t.Fatalf("%s: created %s, want %s", tc.expr, fmtMs(o.At), fmtMs(next))
				}
				next += 1000
				created++
			}
			if !d.More {
				break
			}
			if d.Through != d.Create[len(d.Create)-1].At {
				t.Fatalf("through %d", d.Through)
			}
			if d, err = c.Due(d.Through, now, 24*time.Hour, 0, 1000); err != nil {
				t.Fatal(err)
			}
			calls++
			if len(d.Skipped) != 0 {
				t.Fatalf("skipped again: %+v", d.Skipped)
			}
		}
		if created != 86401 || calls != 87 || d.Through != now {
			t.Fatalf("%s: created %d in %d calls, through %s", tc.expr, created, calls, fmtMs(d.Through))
		}
	}
}

// The starting deadline skips what is inside the horizon but too late to
// start: one DEADLINE record, then the occurrences still startable.
func TestDueStartingDeadline(t *testing.T) {
	last := utc("2026-09-22T10:00:00Z")
	now := last + 3*86400_000
	c := mustCal(t, "@every 1s", "UTC", Window{})
	d, err := c.Due(last, now, 24*time.Hour, 10*time.Second, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Skipped) != 2 || d.Skipped[0].Reason != SkipHorizon || d.Skipped[0].Count != 172799 ||
		d.Skipped[1] != (Skipped{Reason: SkipDeadline, First: now - 86400_000, Last: now - 11_000, Count: 86390,
			FirstWindow: "2026-09-24T10:00:00", LastWindow: "2026-09-25T09:59:49"}) {
		t.Fatalf("skipped %+v", d.Skipped)
	}
	if len(d.Create) != 11 || d.Create[0].At != now-10_000 || d.More || d.Through != now {
		t.Fatalf("created %d from %s", len(d.Create), fmtMs(d.Create[0].At))
	}
}

// Boundaries: an occurrence exactly at now − horizon is created, one a
// millisecond older is not; now − occurrence == deadline still starts.
func TestDueBoundaries(t *testing.T) {
	c := mustCal(t, "0 * * * *", "UTC", Window{})
	occ := utc("2026-09-22T10:00:00Z")
	for _, tc := range []struct {
		now               int64
		horizon, deadline time.Duration
		reason            Reason // 0: created
	}{
		{occ + 3600_000, time.Hour, 0, 0},
		{occ + 3600_001, time.Hour, 0, SkipHorizon},
		{occ + 600_000, time.Hour, 10 * time.Minute, 0},
		{occ + 600_001, time.Hour, 10 * time.Minute, SkipDeadline},
		{occ, 0, 0, 0}, // horizon 0: only what is due exactly now
	} {
		d, err := c.Due(occ-1, tc.now, tc.horizon, tc.deadline, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got Reason = 255
		if len(d.Create) > 0 && d.Create[0].At == occ {
			got = 0
		} else if len(d.Skipped) > 0 && d.Skipped[0].First == occ {
			got = d.Skipped[0].Reason
		}
		if got != tc.reason {
			t.Errorf("now %s horizon %s deadline %s: %+v", fmtMs(tc.now), tc.horizon, tc.deadline, d)
		}
	}
	if d, _ := c.Due(occ, occ, time.Hour, 0, 10); d.Through != occ || len(d.Create)+len(d.Skipped) != 0 {
		t.Fatalf("nothing new: %+v", d)
	}
	if d, _ := c.Due(occ+5, occ, time.Hour, 0, 10); d.Through != occ+5 {
		t.Fatalf("now before the mark: %+v", d)
	}
}

// No cliff at 100 missed occurrences (Kubernetes CronJob's "Cannot
// determine if job needs to be started"): 150 missed minutes inside the
// horizon are all created.
func TestDueNoCliff(t *testing.T) {
	c := mustCal(t, "* * * * *", "UTC", Window{})
	last := utc("2026-09-22T10:00:00Z")
	d, err := c.Due(last, last+150*60_000, 3*time.Hour, 0, 1000)
	if err != nil || len(d.Create) != 150 || len(d.Skipped) != 0 {
		t.Fatalf("%v: created %d, skipped %+v", err, len(d.Create), d.Skipped)
	}
}

// Ten years of an every-second expression in Berlin are counted without
// listing them: every real second is an occurrence (the default policy
// follows the clock: a wildcard expression), or with DSTWallTime every
// real second except those of each repeated hour (wall times run once) —
// 10 fall-backs × 3,600.
func TestDueTenYearsIsBounded(t *testing.T) {
	for dst, repeatedRun := range map[DSTPolicy]bool{DSTAuto: true, DSTCadence: true, DSTWallTime: false} {
		c := mustCalDST(t, "@seconds * * * * * *", "Europe/Berlin", Window{}, dst)
		last, now := utc("2016-01-01T00:00:00Z"), utc("2026-01-01T00:00:00Z")
		d, err := c.Due(last, now, time.Hour, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var horizon, gaps int64
		for _, s := range d.Skipped {
			switch s.Reason {
			case SkipHorizon:
				horizon += s.Count
			case SkipDSTGap:
				gaps++
				if s.Count != 3600 {
					t.Fatalf("gap record %+v", s)
				}
			}
		}
		want := (now-last)/1000 - 3601 // seconds in the horizon band: (last, now-1h)
		if !repeatedRun {
			want -= 10 * 3600
		}
		if horizon != want || gaps != 10 || len(d.Create) != 10 || !d.More {
			t.Fatalf("%s: horizon count %d (want %d), %d gap records, created %d", dst, horizon, want, gaps, len(d.Create))
		}
	}
}

func TestDueOneShot(t *testing.T) {
	c := mustCal(t, "@once 2026-09-25T10:00:00.712Z", "UTC", Window{})
	at := utc("2026-09-25T10:00:00Z") + 712
	d, err := c.Due(at-1, at, time.Hour, 0, 10)
	if err != nil || len(d.Create) != 1 || d.Create[0] != (Occurrence{At: at, Window: OnceWindow}) {
		t.Fatalf("%v %+v", err, d)
	}
	if d, _ := c.Due(at, at+86400_000, time.Hour, 0, 10); len(d.Create)+len(d.Skipped) != 0 {
		t.Fatalf("once is once: %+v", d)
	}
	if got := c.Next(at-1000, 5); len(got) != 1 || got[0].At != at {
		t.Fatalf("next %+v", got)
	}
	// Sub-millisecond times round up: never before the requested time.
	sub := mustCal(t, "@once 2026-09-25T10:00:00.7120001Z", "UTC", Window{})
	if got := sub.Next(0, 1); got[0].At != at+1 {
		t.Fatalf("rounded to %d", got[0].At-at)
	}
}

// A triggered occurrence has its own window: the business day it falls in
// (shifted like the scheduled ones), the manual mark and the instant.
func TestTrigger(t *testing.T) {
	c := mustCal(t, "5 0 * * *", "America/Sao_Paulo", Window{ShiftDays: -1})
	at := utc("2026-09-25T15:04:05Z") + 123
	o := c.Trigger(at)
	if o.Window != "2026-09-24/manual-1790348645123" || !o.Manual || o.At != at {
		t.Fatalf("%+v", o)
	}
	for _, s := range c.Next(at-7*86400_000, 14) {
		if s.Window == o.Window {
			t.Fatal("a trigger's window equals a scheduled one")
		}
	}
	if k := mustCal(t, "@every 1m", "UTC", Window{}).Trigger(at).Window; k != "2026-09-25T15:04/manual-1790348645123" {
		t.Fatal(k)
	}
}

func TestNextPrev(t *testing.T) {
	c := mustCal(t, "*/15 9-10 * * MON-FRI", "Europe/Berlin", Window{})
	from := utc("2026-09-25T08:50:00Z") // Friday 10:50 CEST
	next := c.Next(from, 3)
	if len(next) != 3 || next[0].Window != "2026-09-28T09:00" || next[2].Window != "2026-09-28T09:30" {
		t.Fatalf("next %+v", next)
	}
	prev := c.Prev(from, 3)
	if len(prev) != 3 || prev[0].Window != "2026-09-25T10:45" || prev[2].Window != "2026-09-25T10:15" {
		t.Fatalf("prev %+v", prev)
	}
	if len(c.Next(from, MaxList+5)) != MaxList || len(c.Next(from, 0)) != 0 || len(c.Prev(from, -1)) != 0 {
		t.Fatal("n bounds")
	}
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		spec  Spec
		field string
	}{
		{Spec{Expr: ""}, "schedule"},
		{Spec{Expr: "nonsense"}, "schedule"},
		{Spec{Expr: "61 * * * *"}, "schedule"},
		{Spec{Expr: "0 0 30 2 *"}, "schedule"}, // never fires
		{Spec{Expr: "CRON_TZ=UTC 0 * * * *"}, "schedule"},
		{Spec{Expr: "@every 500ms"}, "schedule"},
		{Spec{Expr: "@every 1500ms"}, "schedule"},
		{Spec{Expr: "@once yesterday"}, "schedule"},
		{Spec{Expr: "@daily", TimeZone: "Mars/Olympus"}, "time_zone"},
		{Spec{Expr: "@daily", Window: Window{Layout: "2006-01-02/manual-x"}}, "window_layout"},
		{Spec{Expr: "@daily", Window: Window{ShiftDays: 400}}, "window_shift_days"},
	} {
		_, err := Compile(tc.spec)
		var ie *InvalidError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v: %v", tc.spec, err)
		}
	}
	c := mustCal(t, "@daily", "UTC", Window{})
	for field, call := range map[string]func() error{
		"horizon":           func() error { _, err := c.Due(0, 1, -time.Second, 0, 1); return err },
		"starting_deadline": func() error { _, err := c.Due(0, 1, 0, -time.Second, 1); return err },
		"max":               func() error { _, err := c.Due(0, 1, 0, 0, 0); return err },
	} {
		var ie *InvalidError
		if err := call(); !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
}
