package leader

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Tick proposes once at the start of a term, then only when nothing was
// proposed for its interval (it looks every half interval).
func TestTickOnlyWhenIdle(t *testing.T) {
	l := newFakeLeadership()
	running(t, &Tick{Clock: l.clk, Log: quiet(), Interval: 250 * time.Millisecond}, l)
	if _, ok := l.next(t, "the first tick").(*fsmv1.Tick); !ok {
		t.Fatal("the first proposal is not a Tick")
	}
	l.armed(t, 125*time.Millisecond)
	l.clk.Advance(125 * time.Millisecond)
	l.ticked(t)
	l.none(t, "125 ms after the last stamp")
	l.clk.Advance(125 * time.Millisecond)
	if _, ok := l.next(t, "a tick after 250 ms idle").(*fsmv1.Tick); !ok {
		t.Fatal("not a Tick")
	}
	// Something else proposed: no tick until the log is idle again.
	l.armed(t, 125*time.Millisecond)
	l.clk.Advance(100 * time.Millisecond)
	_, _ = l.Propose(context.Background(), &fsmv1.Prune{})
	<-l.proposed
	l.clk.Advance(25 * time.Millisecond)
	l.ticked(t)
	l.clk.Advance(125 * time.Millisecond)
	l.ticked(t)
	l.none(t, "150 ms after another command")
	l.clk.Advance(125 * time.Millisecond)
	l.next(t, "a tick once idle again")
}

// Prune proposes every interval with the lease-time and calendar cutoffs.
func TestPruneCutoffs(t *testing.T) {
	l := newFakeLeadership()
	var answered atomic.Int32
	l.setAnswer(func(any) (any, error) { answered.Add(1); return &fsm.PruneResult{Windows: 1}, nil })
	running(t, &Prune{Clock: l.clk, Log: quiet(), Interval: time.Minute, Retention: time.Hour,
		JobRetention: 2 * time.Hour, MaxFinishedJobs: 7}, l)
	l.armed(t, time.Minute)
	l.none(t, "before the first interval")
	l.clk.Advance(time.Minute)
	p, ok := l.next(t, "the prune").(*fsmv1.Prune)
	if !ok {
		t.Fatal("not a Prune")
	}
	if want := l.LeaseTime() - time.Hour.Milliseconds(); p.GetCutoffMs() != want {
		t.Fatalf("cutoff %d, want %d (lease time − retention)", p.GetCutoffMs(), want)
	}
	if want := l.CalendarTime() - 2*time.Hour.Milliseconds(); p.GetJobsCutoffMs() != want {
		t.Fatalf("jobs cutoff %d, want %d (calendar time − job retention)", p.GetJobsCutoffMs(), want)
	}
	if p.GetMaxFinishedJobs() != 7 {
		t.Fatalf("max finished %d", p.GetMaxFinishedJobs())
	}
}

// Dispatch ticks when calendar time reaches NextDue, looks again on Poke,
// and retries a failed tick after Retry.
func TestDispatchTicksAtNextDue(t *testing.T) {
	l := newFakeLeadership()
	var due atomic.Int64
	due.Store(-1)
	next := func() (int64, bool) { d := due.Load(); return d, d >= 0 }
	d := &Dispatch{Clock: l.clk, Log: quiet(), NextDue: next, Retry: 250 * time.Millisecond}
	running(t, d, l)
	// Nothing due: it sleeps until poked.
	if !l.clk.WaitTimers(0, time.Second) {
		t.Fatal("unreachable")
	}
	due.Store(l.CalendarTime() + 1000)
	d.Poke()
	l.armed(t, time.Second)
	l.clk.Advance(999 * time.Millisecond)
	l.armed(t, time.Millisecond)
	l.none(t, "1 ms before the due time")
	answered := make(chan struct{}, 1)
	l.setAnswer(func(any) (any, error) { due.Store(-1); answered <- struct{}{}; return nil, nil })
	l.clk.Advance(time.Millisecond)
	if _, ok := l.next(t, "the tick at the due time").(*fsmv1.Tick); !ok {
		t.Fatal("not a Tick")
	}
	// The tick's answer (nothing due any more) is in before the test makes
	// a job due again.
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("the tick not answered")
	}
	// A failed tick is tried again after Retry.
	var fails atomic.Int32
	l.setAnswer(func(any) (any, error) {
		if fails.Add(1) == 1 {
			return nil, errors.New("not now")
		}
		due.Store(-1)
		return nil, nil
	})
	due.Store(l.CalendarTime())
	d.Poke()
	l.next(t, "the tick of a job due now")
	l.armed(t, 250*time.Millisecond)
	l.none(t, "before the retry")
	l.clk.Advance(250 * time.Millisecond)
	l.next(t, "the retried tick")
}

// The fetch pump serves the waiters on each Poke, on the leadership it
// runs on.
func TestFetchPumpServesOnPoke(t *testing.T) {
	l := newFakeLeadership()
	served := make(chan Leadership, 10)
	p := &FetchPump{Serve: func(_ context.Context, got Leadership) { served <- got }}
	running(t, p, l)
	p.Poke()
	select {
	case got := <-served:
		if got != Leadership(l) {
			t.Fatal("served another leadership")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a poke served nothing")
	}
}

// Materialise proposes one MaterialiseSchedules per round, counts it,
// sleeps until the next due time, and backs off after a failure.
func TestMaterialiseRoundsAndBackoff(t *testing.T) {
	l := newFakeLeadership()
	var due atomic.Int64 // calendar ms of the next due schedule
	due.Store(l.CalendarTime())
	var rounds, counted atomic.Int32
	round := func(now int64) ([]*fsmv1.ScheduleMaterialisation, bool) {
		rounds.Add(1)
		if now < due.Load() {
			return nil, false
		}
		return []*fsmv1.ScheduleMaterialisation{{Name: "s", ThroughMs: now}}, false
	}
	var fail atomic.Bool
	l.setAnswer(func(any) (any, error) {
		if fail.Load() {
			return nil, errors.New("lost")
		}
		due.Store(l.CalendarTime() + 30_000)
		return &fsm.MaterialiseResult{}, nil
	})
	m := &Materialise{Clock: l.clk, Log: quiet(), Rounds: func() RoundFunc { return round },
		NextDue: func() (int64, bool) { return due.Load(), true },
		Done:    func([]*fsmv1.ScheduleMaterialisation, *fsm.MaterialiseResult, int64) { counted.Add(1) }}
	running(t, m, l)
	if _, ok := l.next(t, "the due schedule").(*fsmv1.MaterialiseSchedules); !ok {
		t.Fatal("not a MaterialiseSchedules")
	}
	// Next due in 30 s: it sleeps at most MaterialiseIdle.
	l.armed(t, MaterialiseIdle)
	if counted.Load() != 1 {
		t.Fatalf("Done called %d times", counted.Load())
	}
	// Made due now and poked (a put on this leader), but the proposal fails:
	// the retry waits 40-50 ms (materialiseBackoff), then 80-100 ms.
	fail.Store(true)
	due.Store(l.CalendarTime())
	m.Poke()
	l.next(t, "the poked round")
	if !l.clk.WaitTimers(1, 5*time.Second) {
		t.Fatal("no backoff timer")
	}
	l.clk.Advance(39 * time.Millisecond)
	l.none(t, "before the backoff")
	l.clk.Advance(11 * time.Millisecond)
	l.next(t, "the first retry")
	if !l.clk.WaitTimers(1, 5*time.Second) {
		t.Fatal("no second backoff timer")
	}
	l.clk.Advance(79 * time.Millisecond)
	l.none(t, "before the doubled backoff")
	fail.Store(false)
	l.clk.Advance(21 * time.Millisecond)
	l.next(t, "the second retry")
	l.armed(t, MaterialiseIdle)
	if counted.Load() != 2 {
		t.Fatalf("Done called %d times, want 2", counted.Load())
	}
}

// The clock moves on while a round runs (a test's Advance, a slow round):
// a schedule that came due meanwhile gets the next round at once, not
// after MaterialiseIdle. The sleep is reckoned from the calendar time the
// round saw; reckoned from a later reading, the schedule looked due with
// nothing made, which reads as a schedule that does not compile here.
func TestMaterialiseClockMovesDuringARound(t *testing.T) {
	l := newFakeLeadership()
	due := l.CalendarTime() + 10_000
	var rounds atomic.Int32
	round := func(now int64) ([]*fsmv1.ScheduleMaterialisation, bool) {
		if rounds.Add(1) == 1 {
			l.clk.Advance(10 * time.Second) // due now, after this round looked
		}
		if now < due {
			return nil, false
		}
		return []*fsmv1.ScheduleMaterialisation{{Name: "s", ThroughMs: now}}, false
	}
	l.setAnswer(func(any) (any, error) { due += 60_000; return &fsm.MaterialiseResult{}, nil })
	m := &Materialise{Clock: l.clk, Log: quiet(), Rounds: func() RoundFunc { return round },
		NextDue: func() (int64, bool) { return due, true }}
	running(t, m, l)
	if _, ok := l.next(t, "the schedule due during the first round").(*fsmv1.MaterialiseSchedules); !ok {
		t.Fatal("not a MaterialiseSchedules")
	}
	if got := rounds.Load(); got != 2 {
		t.Fatalf("%d rounds", got)
	}
}
