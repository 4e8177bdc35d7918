package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/leader"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The materialiser in virtual time: a node on a fake Raft whose fake clock
// is both its lease and its calendar clock.

func putSchedule(t *testing.T, n *testNode, name, expr, tz string, overlap fsmv1.ScheduleOverlap, mods ...func(*fsmv1.ScheduleSpec)) fsm.Schedule {
	t.Helper()
	job := &fsmv1.QueueJobSpec{Queue: "q", Kind: name, VisibilityTimeoutMs: 3_600_000}
	fsm.FillJobDefaults(job)
	sp := &fsmv1.ScheduleSpec{Expr: expr, TimeZone: tz, Job: job, CompleteWithinMs: 3_600_000, Overlap: overlap}
	for _, m := range mods {
		m(sp)
	}
	res, err := n.Propose(bg(), &fsmv1.PutSchedule{Name: name, Spec: sp, Identity: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return res.(*fsm.ScheduleResult).Schedule
}

// settle waits until the materialiser has made everything due at the
// node's calendar time.
func (n *testNode) settle(t *testing.T) {
	t.Helper()
	eventually(t, "due schedules materialised", func() bool { return len(n.fsm.DueSchedules(n.CalendarTime(), 1)) == 0 })
	// ... and the loop asleep until the next due time (at most its idle
	// period), so the test's next Advance wakes it.
	at := n.clock.Now().Add(leader.MaterialiseIdle)
	if next, ok := n.fsm.NextScheduleDue(); ok && next < at.UnixMilli() {
		at = time.UnixMilli(next)
	}
	if !n.clock.WaitArmed(at, 10*time.Second) {
		t.Fatalf("the materialiser is not asleep until %s", at)
	}
}

// run advances virtual time by d in steps, letting the materialiser catch
// up after each.
func (n *testNode) run(t *testing.T, d, step time.Duration) {
	t.Helper()
	n.settle(t)
	for moved := time.Duration(0); moved < d; moved += step {
		n.clock.Advance(step)
		n.settle(t)
	}
}

type madeJob struct {
	window string
	runAt  time.Time
	dstGap bool
}

// made lists the jobs a schedule made, from its history (oldest first),
// and fails on skipped entries unless allowed.
func made(t *testing.T, n *testNode, name string) (jobs []madeJob, skipped []fsm.HistoryEntry) {
	t.Helper()
	sc, ok := n.fsm.Schedule(name)
	if !ok {
		t.Fatalf("schedule %s missing", name)
	}
	for _, e := range sc.History {
		if e.Skipped != fsm.SkipNone {
			skipped = append(skipped, e)
			continue
		}
		j, ok := n.fsm.QueueJob(e.JobID)
		if !ok || e.Duplicate {
			t.Fatalf("entry %+v: job %v, duplicate %t", e, ok, e.Duplicate)
		}
		jobs = append(jobs, madeJob{e.Window, time.UnixMilli(j.RunAt).UTC(), e.DSTGap})
	}
	return jobs, skipped
}

// A daily 02:30 in Europe/Berlin across both DST changes: one job per
// business day, none twice, none skipped; the spring-forward day's runs at
// 03:00 CEST (the end of the gap) and is marked DSTGap.
func TestMaterialiserDSTEuropeBerlin(t *testing.T) {
	for _, c := range []struct {
		name  string
		epoch time.Time
		want  []madeJob
	}{
		{"spring forward", time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC), []madeJob{
			{"2026-03-28", time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC), false}, // 02:30 CET
			{"2026-03-29", time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), true},   // 02:30 does not exist: 03:00 CEST
			{"2026-03-30", time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC), false}, // 02:30 CEST
			{"2026-03-31", time.Date(2026, 3, 31, 0, 30, 0, 0, time.UTC), false},
		}},
		{"fall back", time.Date(2026, 10, 23, 12, 0, 0, 0, time.UTC), []madeJob{
			{"2026-10-24", time.Date(2026, 10, 24, 0, 30, 0, 0, time.UTC), false}, // 02:30 CEST
			{"2026-10-25", time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), false}, // the first 02:30 only
			{"2026-10-26", time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC), false}, // 02:30 CET
			{"2026-10-27", time.Date(2026, 10, 27, 1, 30, 0, 0, time.UTC), false},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newTestNodeAt(t, c.epoch)
			putSchedule(t, n, "close", "30 2 * * *", "Europe/Berlin", fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)
			n.run(t, 4*24*time.Hour, 20*time.Minute)
			jobs, skipped := made(t, n, "close")
			if !slices.Equal(jobs, c.want) || len(skipped) != 0 {
				t.Fatalf("jobs %v, skipped %+v\nwant %v", jobs, skipped, c.want)
			}
			if got := n.fsm.QueueJobCount(); got != len(c.want) {
				t.Fatalf("%d jobs in the queue, want %d", got, len(c.want))
			}
		})
	}
}

// The DST policy comes from the spec in the log: an hourly "0 * * * *"
// across Berlin's fall-back runs every real hour under the default
// (stored 0: cronie's rule, a cadence) and under CADENCE, with the second
// 02:00's window carrying the offset; under WALL_TIME the repeated 02:00
// runs once (a two-hour gap).
func TestMaterialiserDSTPolicyFromTheLog(t *testing.T) {
	epoch := time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC) // 01:30 CEST
	cadence := []madeJob{
		{"2026-10-25T02", time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), false},       // 02:00 CEST
		{"2026-10-25T02+01:00", time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC), false}, // 02:00 CET
		{"2026-10-25T03", time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC), false},
	}
	for _, c := range []struct {
		policy fsmv1.ScheduleDstPolicy
		want   []madeJob
	}{
		{fsmv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_UNSPECIFIED, cadence},
		{fsmv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE, cadence},
		{fsmv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_WALL_TIME, []madeJob{cadence[0], cadence[2]}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			n := newTestNodeAt(t, epoch)
			putSchedule(t, n, "hourly", "0 * * * *", "Europe/Berlin", fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW,
				func(sp *fsmv1.ScheduleSpec) { sp.DstPolicy = c.policy })
			n.run(t, 3*time.Hour, 10*time.Minute)
			jobs, skipped := made(t, n, "hourly")
			if !slices.Equal(jobs, c.want) || len(skipped) != 0 {
				t.Fatalf("jobs %v, skipped %+v\nwant %v", jobs, skipped, c.want)
			}
		})
	}
}

// A three-day outage (no leader) of an every-minute schedule with a
// one-day catch-up horizon: when a leader is back, one job per occurrence
// inside the horizon (made in rounds of at most 1,000), everything older
// recorded as one HORIZON range, nothing lost in between, nothing twice.
func TestMaterialiserCatchUpAfterAnOutage(t *testing.T) {
	n := newTestNodeAt(t, time.Date(2026, 9, 24, 12, 0, 0, 0, time.UTC))
	putSchedule(t, n, "tick", "* * * * *", "UTC", fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW,
		func(s *fsmv1.ScheduleSpec) { s.CatchUpMs = (24 * time.Hour).Milliseconds() })
	n.run(t, 10*time.Minute, time.Minute)
	before := n.fsm.QueueJobCount()
	if before != 10 {
		t.Fatalf("%d jobs in 10 minutes", before)
	}
	mark, _ := n.fsm.Schedule("tick")
	// The leader goes away for three days.
	n.notifyCh <- false
	eventually(t, "leadership lost", func() bool { return !n.IsLeader() })
	n.clock.Advance(72 * time.Hour)
	n.lead(t)
	n.settle(t)
	sc, _ := n.fsm.Schedule("tick")
	total := int64(72 * 60)
	var horizon int64
	for _, e := range sc.Skips { // the history holds the last 32 jobs
		if e.Skipped == fsm.SkipHorizon {
			horizon += e.Count
		}
	}
	made := int64(n.fsm.QueueJobCount() - before)
	if made != 24*60+1 || horizon != total-made || int64(sc.SkipCount) != horizon {
		t.Fatalf("after the outage: %d made, %d skipped (HORIZON %d), want %d made and %d skipped", made, sc.SkipCount, horizon, 24*60+1, total-24*60-1)
	}
	// Every occurrence inside the horizon has its job, once: minutes
	// [now-24h, now].
	now := n.CalendarTime()
	for at := now - 24*3_600_000; at <= now; at += 60_000 {
		w := time.UnixMilli(at).UTC().Format("2006-01-02T15:04")
		if ls, _ := n.fsm.ListQueueJobs(fsm.JobFilter{Label: &fsm.Label{Key: fsm.LabelWindow, Value: w}}, 0, 10); len(ls) != 1 {
			t.Fatalf("window %s has %d jobs", w, len(ls))
		}
	}
	if sc.Mark != now || sc.NextDue != now+60_000 || sc.Mark < mark.Mark {
		t.Fatalf("mark %d next %d, now %d", sc.Mark, sc.NextDue, now)
	}
}

// Pause and resume: nothing is made while paused, and the resume makes no
// burst: the missed occurrences are one PAUSED record.
func TestMaterialiserPauseResumeWithoutABurst(t *testing.T) {
	n := newTestNodeAt(t, time.Date(2026, 9, 24, 12, 0, 0, 0, time.UTC))
	putSchedule(t, n, "tick", "@every 1m", "", fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)
	n.run(t, 5*time.Minute, time.Minute)
	if _, err := n.Propose(bg(), &fsmv1.PauseSchedule{Name: "tick", Paused: true}); err != nil {
		t.Fatal(err)
	}
	n.run(t, time.Hour, 10*time.Minute)
	if got := n.fsm.QueueJobCount(); got != 5 {
		t.Fatalf("%d jobs after an hour paused", got)
	}
	if _, err := n.Propose(bg(), &fsmv1.PauseSchedule{Name: "tick", Paused: false}); err != nil {
		t.Fatal(err)
	}
	n.settle(t)
	if got := n.fsm.QueueJobCount(); got != 5 {
		t.Fatalf("resume made %d jobs at once", got-5)
	}
	n.run(t, 3*time.Minute, time.Minute)
	jobs, skipped := made(t, n, "tick")
	if len(jobs) != 8 || len(skipped) != 1 || skipped[0].Skipped != fsm.SkipPaused || skipped[0].Count != 60 {
		t.Fatalf("jobs %v, skipped %+v", jobs, skipped)
	}
}

// A put on the leader wakes the materialiser: the first occurrence is
// planned at once, and each occurrence is made within a round of its time.
func TestMaterialiserMakesEachOccurrenceOnTime(t *testing.T) {
	n := newTestNodeAt(t, time.Date(2026, 9, 24, 12, 0, 0, 500_000_000, time.UTC))
	putSchedule(t, n, "sec", "@every 1s", "", fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)
	n.settle(t)
	sc, _ := n.fsm.Schedule("sec")
	if sc.NextDue != time.Date(2026, 9, 24, 12, 0, 1, 0, time.UTC).UnixMilli() {
		t.Fatalf("next due %d", sc.NextDue)
	}
	entries := n.raft.count()
	n.run(t, 10*time.Second, 250*time.Millisecond)
	jobs, _ := made(t, n, "sec")
	if len(jobs) != 10 {
		t.Fatalf("%d jobs in 10 s: %v", len(jobs), jobs)
	}
	for i, j := range jobs {
		if want := fmt.Sprintf("2026-09-24T12:00:%02d", i+1); j.window != want {
			t.Fatalf("job %d window %s, want %s", i, j.window, want)
		}
	}
	// One entry per occurrence (the loop sleeps until the next one).
	if got := n.raft.count() - entries; got > 12 {
		t.Fatalf("%d entries for 10 occurrences", got)
	}
}

// periodic.At(now): a one-shot put just after its time is made at once (its
// mark is just before it); one far behind the horizon is recorded as
// skipped, not lost silently.
func TestMaterialiserOneShotPutAfterItsTime(t *testing.T) {
	n := newTestNodeAt(t, time.Date(2026, 9, 24, 12, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		name string
		ago  time.Duration
	}{{"just-now", 2 * time.Second}, {"long-ago", 3 * time.Hour}} {
		at := n.clock.Now().Add(-c.ago)
		job := &fsmv1.QueueJobSpec{Queue: "q", Kind: c.name}
		fsm.FillJobDefaults(job)
		if _, err := n.Propose(bg(), &fsmv1.PutSchedule{Name: c.name, Spec: &fsmv1.ScheduleSpec{Expr: "@once " + at.Format(time.RFC3339Nano),
			Job: job, CatchUpMs: time.Hour.Milliseconds(), CompleteWithinMs: 1000, Overlap: fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID},
			MarkMs: at.UnixMilli() - 1}); err != nil {
			t.Fatal(err)
		}
	}
	n.settle(t)
	jobs, skipped := made(t, n, "just-now")
	if len(jobs) != 1 || jobs[0].window != "once" || len(skipped) != 0 {
		t.Fatalf("just-now: %v %v", jobs, skipped)
	}
	jobs, skipped = made(t, n, "long-ago")
	if len(jobs) != 0 || len(skipped) != 1 || skipped[0].Skipped != fsm.SkipHorizon {
		t.Fatalf("long-ago: %v %+v", jobs, skipped)
	}
	if sc, _ := n.fsm.Schedule("just-now"); sc.NextDue != 0 {
		t.Fatalf("a one-shot is never due again: %+v", sc)
	}
}
