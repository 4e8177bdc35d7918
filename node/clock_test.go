package node

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Calendar stamps follow the leader's wall clock and never go back, even
// when the wall clock does; lease stamps ignore the wall clock.
func TestCalendarStampsNeverGoBack(t *testing.T) {
	fake := clock.NewFake(start)
	clk := &clock.Stepped{Base: fake}
	c := newLeaderClock(clk, 5000, 0)
	s := c.stamp()
	if s.calendarMs != start.UnixMilli() || s.leaseMs != 5000 {
		t.Fatalf("first stamp %+v, want calendar %d", s, start.UnixMilli())
	}
	fake.Advance(time.Second)
	if s := c.stamp(); s.calendarMs != start.UnixMilli()+1000 || s.leaseMs != 6000 {
		t.Fatalf("after 1 s: %+v", s)
	}
	// NTP steps the wall clock forward a minute: calendar time jumps with
	// it, lease time does not.
	clk.Step(time.Minute)
	if s := c.stamp(); s.calendarMs != start.UnixMilli()+61_000 || s.leaseMs != 6000 {
		t.Fatalf("after a step forward: %+v", s)
	}
	// And back two minutes: calendar time holds at the last stamp until
	// the wall clock passes it; lease time goes on.
	clk.Step(-2 * time.Minute)
	held := start.UnixMilli() + 61_000
	for i := 0; i < 3; i++ {
		fake.Advance(10 * time.Second)
		if s := c.stamp(); s.calendarMs != held || c.calendarTime() != held {
			t.Fatalf("%d s after a step back: calendar %d, want it held at %d", 10*(i+1), s.calendarMs, held)
		}
	}
	if got := c.leaseTime(); got != 36_000 {
		t.Fatalf("lease time %d after 31 s, want 36000", got)
	}
	fake.Advance(2 * time.Minute) // wall = start + 1 s + 60 s - 120 s + 150 s = start + 91 s
	if s := c.stamp(); s.calendarMs != start.UnixMilli()+91_000 {
		t.Fatalf("once the wall clock passed the last stamp: %+v, want %d", s, start.UnixMilli()+91_000)
	}
	// A leadership starts no lower than the FSM's calendar time.
	late := newLeaderClock(clk, 0, start.UnixMilli()+200_000)
	if s := late.stamp(); s.calendarMs != start.UnixMilli()+200_000 {
		t.Fatalf("a leader behind the FSM stamped %d", s.calendarMs)
	}
}

// steppedNode is a test node whose wall clock can be stepped.
func steppedNode(t *testing.T) (*testNode, *clock.Stepped) {
	var st *clock.Stepped
	n := newTestNode(t, func(c *Config) {
		st = &clock.Stepped{Base: c.Clock}
		c.Clock = st
	})
	return n, st
}

// On the node: commands carry the leader's wall clock as calendar time;
// a step forward moves it at once; a step back holds it (no command is
// stamped earlier than the last); Calendar reports what would be stamped.
func TestLeaderStampsCalendarTime(t *testing.T) {
	n, wall := steppedNode(t)
	first := n.raft.entry(t, 0)
	if first.GetCalendarMs() != start.UnixMilli() || n.fsm.CalendarTime() != start.UnixMilli() {
		t.Fatalf("first tick's calendar %d, FSM %d, want %d", first.GetCalendarMs(), n.fsm.CalendarTime(), start.UnixMilli())
	}
	propose := func() *fsmv1.Command {
		t.Helper()
		i := n.raft.count()
		if _, err := n.Propose(bg(), &fsmv1.Tick{}); err != nil {
			t.Fatal(err)
		}
		return n.raft.entry(t, i)
	}
	n.clock.Advance(2 * time.Second)
	if c := propose(); c.GetCalendarMs() != start.UnixMilli()+2000 || c.GetNowMs() != start.UnixMilli()+2000 {
		t.Fatalf("after 2 s: calendar %d lease %d", c.GetCalendarMs(), c.GetNowMs())
	}
	wall.Step(time.Hour)
	if got := n.CalendarTime(); got != start.UnixMilli()+2000+3_600_000 {
		t.Fatalf("Calendar after a step forward: %d", got)
	}
	if c := propose(); c.GetCalendarMs() != start.UnixMilli()+2000+3_600_000 || c.GetNowMs() != start.UnixMilli()+2000 {
		t.Fatalf("after a step forward: calendar %d lease %d", c.GetCalendarMs(), c.GetNowMs())
	}
	wall.Step(-10 * time.Second) // now 10 s behind the last stamp
	last := start.UnixMilli() + 2000 + 3_600_000
	n.clock.Advance(5 * time.Second)
	if c := propose(); c.GetCalendarMs() != last || n.CalendarTime() != last || n.fsm.CalendarTime() != last {
		t.Fatalf("after a step back: calendar %d (CalendarTime %d, FSM %d), want it held at %d", c.GetCalendarMs(), n.CalendarTime(), n.fsm.CalendarTime(), last)
	}
	if c := n.raft.entry(t, n.raft.count()-1); c.GetNowMs() != start.UnixMilli()+7000 {
		t.Fatalf("lease time %d, want %d: a wall step moves no lease", c.GetNowMs(), start.UnixMilli()+7000)
	}
	n.clock.Advance(7 * time.Second) // the wall clock is 2 s past the last stamp
	if c := propose(); c.GetCalendarMs() != last+2000 {
		t.Fatalf("wall clock past the last stamp: calendar %d, want %d", c.GetCalendarMs(), last+2000)
	}
}

// A new leader whose wall clock is behind the FSM's calendar time (its
// predecessor's clock was ahead) holds at the FSM's calendar time until its
// own clock passes it; its lease time continues from the FSM's as ever.
func TestBehindLeaderHoldsCalendarTime(t *testing.T) {
	n, wall := steppedNode(t)
	wall.Step(10 * time.Second) // the "old leader" ran 10 s ahead
	if _, err := n.Propose(bg(), &fsmv1.Tick{}); err != nil {
		t.Fatal(err)
	}
	ahead := n.fsm.CalendarTime()
	if ahead != start.UnixMilli()+10_000 {
		t.Fatalf("calendar %d", ahead)
	}
	n.notifyCh <- false
	eventually(t, "leadership lost", func() bool { return !n.Leading() })
	if n.CalendarTime() != ahead {
		t.Fatalf("a follower's CalendarTime is its FSM's: %d, want %d", n.CalendarTime(), ahead)
	}
	wall.Step(-10 * time.Second) // the "new leader" is on time
	n.clock.Advance(3 * time.Second)
	i := n.raft.count()
	n.lead(t)
	if c := n.raft.entry(t, i); c.GetCalendarMs() != ahead {
		t.Fatalf("the new leader's first tick: calendar %d, want held at %d", c.GetCalendarMs(), ahead)
	}
	// The gate is on the held calendar: a claim due at the held time + 1 s
	// is too early until the wall clock passes it.
	claim := &fsmv1.Acquire{Name: "l", Owner: "o", TtlMs: 5000, ClaimJob: "j", ClaimWindow: "w", ClaimNotBeforeMs: ahead + 1000}
	_, err := n.Acquire(bg(), claim, false)
	var rej *fsm.Rejection
	if !errors.As(err, &rej) || rej.Reason != coorderr.TooEarly || rej.Metadata["wait_ms"] != strconv.Itoa(1000) {
		t.Fatalf("claim 1 s ahead of the held calendar: %v", err)
	}
	n.clock.Advance(7 * time.Second) // wall = start + 10 s: still at the held time
	if _, err := n.Acquire(bg(), claim, false); !errors.As(err, &rej) || rej.Reason != coorderr.TooEarly {
		t.Fatalf("claim while the calendar holds: %v", err)
	}
	n.clock.Advance(time.Second)
	r, err := n.Acquire(bg(), claim, false)
	if err != nil || !r.Claim.Claimed || r.Claim.Window.StartedAt != ahead+1000 {
		t.Fatalf("claim once the wall clock reached it: %+v %v", r, err)
	}
}

// The case: lease time lags the wall clock by a long outage, and a
// window due now on the wall clock starts now (the gate used lease time,
// and the job waited for the outage's length).
func TestClaimDueNowAfterAnOutage(t *testing.T) {
	n := newTestNode(t)
	n.notifyCh <- false
	eventually(t, "leadership lost", func() bool { return !n.Leading() })
	n.clock.Advance(46 * time.Second) // no leader for 46 s
	n.lead(t)
	now := n.clock.Now().UnixMilli()
	if lag := now - n.fsm.LeaseTime(); lag < 46_000 {
		t.Fatalf("lease time lags by %d ms, want the outage", lag)
	}
	r, err := n.Acquire(bg(), &fsmv1.Acquire{Name: "l", Owner: "o", TtlMs: 5000, ClaimJob: "j", ClaimWindow: "w", ClaimNotBeforeMs: now}, false)
	if err != nil || !r.Claim.Claimed {
		t.Fatalf("a window due now after an outage: %+v %v", r, err)
	}
}

// A node that has just become the leader is not ready until its Barrier
// has applied its predecessors' entries: Calendar is still the FSM's last
// stamp (an hour old here), and LeaderCalendarTime, which resolves a submit's
// delay_ms, waits for the ready leader's clock instead of answering with it.
func TestLeaderCalendarWaitsForTheReadyLeader(t *testing.T) {
	n, wall := steppedNode(t)
	stale := n.fsm.CalendarTime()
	n.notifyCh <- false
	eventually(t, "leadership lost", func() bool { return !n.Leading() })
	if _, err := n.LeaderCalendarTime(bg()); err == nil {
		t.Fatal("LeaderCalendarTime on a follower answered")
	}
	wall.Step(time.Hour)
	n.raft.mu.Lock()
	n.raft.barrier = make(chan struct{})
	n.raft.mu.Unlock()
	n.notifyCh <- true
	eventually(t, "leading, not ready", func() bool { return n.Leading() })
	got := make(chan int64, 1)
	go func() {
		cal, err := n.LeaderCalendarTime(bg())
		if err != nil {
			t.Error(err)
		}
		got <- cal
	}()
	if n.CalendarTime() != stale {
		t.Fatalf("CalendarTime before ready: %d, want the FSM's %d", n.CalendarTime(), stale)
	}
	select {
	case cal := <-got:
		t.Fatalf("LeaderCalendarTime answered %d before the leader was ready", cal)
	case <-time.After(50 * time.Millisecond): // it must not answer: nothing to await
	}
	close(n.raft.barrier)
	if cal, want := <-got, start.UnixMilli()+3_600_000; cal != want {
		t.Fatalf("LeaderCalendarTime once ready: %d, want the leader's wall clock %d", cal, want)
	}
}
