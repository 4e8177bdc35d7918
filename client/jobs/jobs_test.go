package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/coordd/coordd/schedule"
)

func noop(context.Context, *Run) error { return nil }

func mustCompile(t *testing.T, j Job) *compiled {
	t.Helper()
	if j.Run == nil {
		j.Run = noop
	}
	c, err := j.compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestValidation(t *testing.T) {
	for _, j := range []Job{
		{Schedule: Cron("@daily", "UTC"), Run: noop},
		{Name: "x", Schedule: Cron("@daily", "UTC")},
		{Name: "x", Schedule: Cron("bad", "UTC"), Run: noop},
		{Name: "x", Schedule: Cron("@daily", "No/Such_Zone"), Run: noop},
	} {
		if _, err := j.compile(); err == nil {
			t.Errorf("%+v compiled", j)
		}
	}
}

// The daily job at 00:05 America/Sao_Paulo closes the previous business
// day: the window comes from the occurrence, not from when it runs.
func TestWindowOfOccurrence(t *testing.T) {
	c := mustCompile(t, Job{Name: "daily-close", Schedule: Cron("5 0 * * *", "America/Sao_Paulo"),
		Window: schedule.Window{ShiftDays: -1}})
	sp := c.sched.Location()
	occ := c.sched.Next(time.Date(2026, 9, 25, 23, 0, 0, 0, sp))
	if k := c.windowKey(occ); k != "2026-09-25" {
		t.Fatalf("window %s for occurrence %s", k, occ)
	}
	// A replica whose clock is 2 minutes behind fires at 00:07 by the real
	// clock; the occurrence (and so the window) is the same.
	late := time.Date(2026, 9, 26, 0, 7, 0, 0, sp)
	if k := c.windowKey(c.sched.Next(late.Add(-2 * time.Minute).Add(-time.Minute))); k != "2026-09-25" {
		t.Fatalf("late replica's window %s", k)
	}
	if c.leaseName("2026-09-25") != "daily-close" {
		t.Fatal("forbid shares one lease")
	}
	allow := mustCompile(t, Job{Name: "report", Schedule: Every(time.Minute), Concurrency: Allow})
	if allow.leaseName("2026-09-25T10:00") != "report/2026-09-25T10:00" {
		t.Fatal("allow takes a lease per window")
	}
}

// Catch-up: incomplete windows inside the horizon, oldest first, with no
// cliff at many missed occurrences (Kubernetes stops at 100).
func TestCatchUpHorizon(t *testing.T) {
	now := time.Date(2026, 9, 25, 12, 0, 30, 0, time.UTC)
	c := mustCompile(t, Job{Name: "j", Schedule: Every(time.Minute), CatchUp: 3 * time.Hour})
	occs := c.catchUp(now)
	if len(occs) != 180 || !occs[0].Before(occs[1]) || !occs[179].Equal(time.Date(2026, 9, 25, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("%d occurrences, first %v, last %v", len(occs), occs[0], occs[len(occs)-1])
	}
	// Default horizon: the starting deadline, else one interval.
	d := mustCompile(t, Job{Name: "j", Schedule: Every(time.Minute)})
	if got := d.catchUp(now); len(got) != 1 {
		t.Fatalf("default catch-up %v", got)
	}
	sd := mustCompile(t, Job{Name: "j", Schedule: Every(time.Minute), StartingDeadline: 5 * time.Minute})
	if got := sd.catchUp(now); len(got) != 5 {
		t.Fatalf("deadline catch-up %v", got)
	}
}

func TestStartingDeadline(t *testing.T) {
	c := mustCompile(t, Job{Name: "j", Schedule: Cron("0 * * * *", "UTC"), StartingDeadline: 10 * time.Minute})
	occ := time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC)
	if !c.startable(occ, occ.Add(10*time.Minute)) || c.startable(occ, occ.Add(10*time.Minute+time.Nanosecond)) {
		t.Fatal("deadline boundary")
	}
	if !c.giveUp(occ).Equal(occ.Add(time.Hour)) {
		t.Fatalf("give up at %v", c.giveUp(occ))
	}
	none := mustCompile(t, Job{Name: "j", Schedule: Cron("0 * * * *", "UTC")})
	if !none.startable(occ, occ.Add(100*time.Hour)) {
		t.Fatal("no deadline means always startable")
	}
}

func TestIdempotencyKey(t *testing.T) {
	r := &Run{Job: "daily-close", Window: "2026-09-25"}
	if k := r.IdempotencyKey("store-42"); k != "daily-close-2026-09-25-store-42" {
		t.Fatal(k)
	}
}

// Across a DST change in the job's zone the runner's windows stay one per
// day (New York, 2026).
func TestRunnerWindowsAcrossDST(t *testing.T) {
	c := mustCompile(t, Job{Name: "j", Schedule: Cron("30 1 * * *", "America/New_York"), CatchUp: 72 * time.Hour})
	ny := c.sched.Location()
	for _, now := range []time.Time{time.Date(2026, 3, 9, 12, 0, 0, 0, ny), time.Date(2026, 11, 2, 12, 0, 0, 0, ny)} {
		keys := map[string]int{}
		for _, occ := range c.catchUp(now) {
			keys[c.windowKey(occ)]++
		}
		if len(keys) != 3 {
			t.Fatalf("at %s: windows %v", now, keys)
		}
	}
}

// jobs.At never starts before the requested time: a time 712 ms past the
// second is kept (it was cut to the second and ran 712 ms early), and a
// sub-millisecond remainder rounds up to coordd's millisecond.
func TestAtNeverEarly(t *testing.T) {
	base := time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ at, want time.Time }{
		{base.Add(712 * time.Millisecond), base.Add(712 * time.Millisecond)},
		{base.Add(712*time.Millisecond + time.Nanosecond), base.Add(713 * time.Millisecond)},
		{base, base},
		{base.In(time.FixedZone("x", -3*3600)).Add(999_999_999), base.Add(time.Second)},
	} {
		c := mustCompile(t, Job{Name: "once", Schedule: At(tc.at)})
		occ := c.sched.Next(tc.at.Add(-time.Hour))
		if !occ.Equal(tc.want) || occ.Before(tc.at) {
			t.Errorf("At(%s): occurrence %s, want %s", tc.at.Format(time.RFC3339Nano), occ.Format(time.RFC3339Nano), tc.want.Format(time.RFC3339Nano))
		}
		if !c.sched.Next(occ).IsZero() || c.windowKey(occ) != schedule.OnceWindow {
			t.Errorf("At(%s): not one shot", tc.at)
		}
	}
}
