package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/testutil"
	"github.com/coordd/coordd/node/leader"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// ticks counts the Tick commands among entries [from, count).
func (r *fakeRaft) ticks(t *testing.T, from int) int {
	n := 0
	for i := from; i < r.count(); i++ {
		if r.entry(t, i).GetType() == fsmv1.CommandType_COMMAND_TYPE_TICK {
			n++
		}
	}
	return n
}

// step advances the fake clock by d in steps of the tick ticker's period,
// letting the leader loop receive each tick.
func (n *testNode) step(t *testing.T, d, period time.Duration) {
	t.Helper()
	for moved := time.Duration(0); moved < d; moved += period {
		n.clock.Advance(period)
		if !n.clock.WaitTicksReceived(5 * time.Second) {
			t.Fatal("the leader loop did not take its tick")
		}
	}
}

// An idle leader appends a tick every TickInterval, on the node's clock; a
// leader that proposes appends none.
func TestLeaderTicksOnlyWhenIdle(t *testing.T) {
	const tick = 250 * time.Millisecond
	n := newTestNode(t, func(c *Config) { c.TickInterval = tick })
	if got := n.raft.ticks(t, 0); got != 1 {
		t.Fatalf("%d ticks at establishment, want 1 (moves the followers to this term's base)", got)
	}
	// Idle for 2 s: a tick at most every 250 ms (the ticker runs at half
	// that; the loop decides on lease time, which the test may move
	// on before the loop reads it, so a tick can come up to one step late).
	base := n.raft.count()
	n.step(t, 2*time.Second, tick/2)
	deadline := time.Now().Add(5 * time.Second)
	for n.raft.ticks(t, base) < 5 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := n.raft.ticks(t, base); got < 5 {
		for i := base; i < n.raft.count(); i++ {
			t.Logf("entry %d: %v at %d", i, n.raft.entry(t, i).GetType(), n.raft.entry(t, i).GetNowMs()-start.UnixMilli())
		}
		t.Fatalf("%d ticks in 2 s of idle log", got)
	}
	if got := n.raft.ticks(t, base); got > 8 {
		t.Fatalf("%d ticks in 2 s of idle log, want at most 8", got)
	}

	// Busy: a proposal every 200 ms leaves no room for a tick. (A tick the
	// idle phase decided late may still carry a stamp up to one step after
	// the first busy proposal: only later ones count.)
	var busyFrom int64
	for i := 0; i < 10; i++ {
		r, err := n.Acquire(bg(), &fsmv1.Acquire{Name: fmt.Sprintf("busy-%d", i), Owner: "o", TtlMs: 5000}, false)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			busyFrom = r.At
		}
		n.step(t, 200*time.Millisecond, 100*time.Millisecond)
	}
	for i := 0; i < n.raft.count(); i++ {
		if c := n.raft.entry(t, i); c.GetType() == fsmv1.CommandType_COMMAND_TYPE_TICK && c.GetNowMs() > busyFrom+tick.Milliseconds() {
			t.Fatalf("a tick at %d while the log was busy since %d", c.GetNowMs(), busyFrom)
		}
	}
	if c := n.fsm.LeaseTime(); c < start.Add(3800*time.Millisecond).UnixMilli() {
		t.Fatalf("FSM clock %d after 4 s of virtual time from %d", c, start.UnixMilli())
	}
}

// Retention: the leader proposes a prune every PruneInterval, with the
// cutoff on lease time.
func TestLeaderPrunes(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.PruneInterval = time.Minute; c.Retention = time.Hour })
	base := n.raft.count()
	n.clock.Advance(time.Minute)
	eventually(t, "a prune", func() bool { return n.raft.count() > base })
	cmd := n.raft.entry(t, base)
	if cmd.GetType() != fsmv1.CommandType_COMMAND_TYPE_PRUNE ||
		cmd.GetPrune().GetCutoffMs() != start.Add(time.Minute-time.Hour).UnixMilli() {
		t.Fatalf("entry %v cutoff %d", cmd.GetType(), cmd.GetPrune().GetCutoffMs())
	}
}

// G9: a new leader's lease time continues from the FSM's, whatever its
// wall clock says; only elapsed time on its clock moves it. A brand-new
// cluster starts at the first leader's wall clock, once.
func TestLeaseTimeContinuesFromTheFSM(t *testing.T) {
	n := newTestNode(t)
	if got := n.fsm.LeaseTime(); got != start.UnixMilli() {
		t.Fatalf("a new cluster's clock starts at %d, want the wall clock %d", got, start.UnixMilli())
	}
	n.clock.Advance(10 * time.Second)
	// Leadership lost and regained an hour later (by the wall clock): the
	// clock continues from the last applied stamp, not the wall.
	n.notifyCh <- false
	eventually(t, "leadership lost", func() bool { return !n.Leading() })
	applied := n.fsm.LeaseTime()
	n.clock.Advance(time.Hour)
	n.lead(t)
	if got := n.fsm.LeaseTime(); got != applied {
		t.Fatalf("after a failover the clock is %d, want it paused at %d", got, applied)
	}
	n.clock.Advance(1500 * time.Millisecond)
	r, err := n.Acquire(bg(), &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 1000}, false)
	if err != nil || r.Lease.AcquiredAt != applied+1500 {
		t.Fatalf("stamp %+v %v, want %d", r, err, applied+1500)
	}
}

func TestLeaderClockStampsNeverGoBack(t *testing.T) {
	clk := clock.NewFake(start)
	c := newLeaderClock(clk, 5000, 0)
	if s := c.stamp(); s.leaseMs != 5000 {
		t.Fatalf("first stamp %d", s.leaseMs)
	}
	clk.Advance(250 * time.Millisecond)
	if c.leaseTime() != 5250 || c.stamp().leaseMs != 5250 {
		t.Fatalf("after 250 ms: current %d", c.leaseTime())
	}
	// A stamp is never below the last, even if elapsed time says so.
	c.lastLease.Store(9000)
	if c.stamp().leaseMs != 9000 || c.leaseTime() != 9000 {
		t.Fatal("stamp went back")
	}
	// A skewed wall clock changes nothing: only elapsed time counts.
	sk := newLeaderClock(clock.Offset{Base: clk, Skew: -time.Hour}, 5000, 0)
	clk.Advance(time.Second)
	if sk.leaseTime() != 6000 {
		t.Fatalf("skewed: %d", sk.leaseTime())
	}
}

// hookService is a leader service for tests: it records its runs.
type hookService struct {
	runs, ended atomic.Int32
	lastNow     atomic.Int64
}

func (*hookService) Name() string { return "test-hook" }

func (h *hookService) Run(ctx context.Context, l leader.Leadership) error {
	h.runs.Add(1)
	h.lastNow.Store(l.LeaseTime())
	<-ctx.Done()
	h.ended.Add(1)
	return nil
}

// A service registered with RegisterLeaderServices runs on each ready
// leadership (at once on the current one), on the leader's clocks, and
// ends with it; runLeader returns only once it did.
func TestRegisteredLeaderServicesRunWhileLeading(t *testing.T) {
	n := newTestNode(t)
	h := &hookService{}
	n.RegisterLeaderServices(h)
	eventually(t, "the service runs on the current leadership", func() bool { return h.runs.Load() == 1 })
	if h.lastNow.Load() != n.fsm.LeaseTime() {
		t.Fatalf("service's lease time %d, FSM lease time %d", h.lastNow.Load(), n.fsm.LeaseTime())
	}
	if got, want := n.LeaderServices(), []string{"tick", "prune", "dispatch", "fetch-pump", "materialise", "bulk", "test-hook"}; !slices.Equal(got, want) {
		t.Fatalf("leader services %v, want %v", got, want)
	}
	n.notifyCh <- false
	eventually(t, "the service ends with leadership", func() bool { return h.ended.Load() == 1 })
	n.lead(t)
	eventually(t, "the service runs again", func() bool { return h.runs.Load() == 2 })
}

// Acquire answers from state whatever the FSM answers without a write.
func TestAcquireAnswersFromState(t *testing.T) {
	n := newTestNode(t)
	own := &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5000, RequestId: "r1", Identity: "id-a"}
	l := n.hold(t, own)
	if _, err := n.Propose(bg(), &fsmv1.ClaimWindow{Job: "j", Window: "w", LeaseName: "L", Owner: "o", Generation: 1, Identity: "id-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Propose(bg(), &fsmv1.CompleteWindow{Job: "j", Window: "w", LeaseName: "L", Owner: "o", Generation: 1, Identity: "id-a"}); err != nil {
		t.Fatal(err)
	}
	base := n.raft.count()
	for name, tc := range map[string]struct {
		cmd   *fsmv1.Acquire
		check func(*fsm.AcquireResult, error) bool
	}{
		"held": {&fsmv1.Acquire{Name: "L", Owner: "p", TtlMs: 5000},
			func(r *fsm.AcquireResult, err error) bool { return err == nil && !r.Acquired && r.Lease.Owner == "o" }},
		"retry": {own, func(r *fsm.AcquireResult, err error) bool { return err == nil && r.Acquired && r.Lease == l }},
		"completed window": {&fsmv1.Acquire{Name: "M", Owner: "p", TtlMs: 5000, ClaimJob: "j", ClaimWindow: "w"},
			func(r *fsm.AcquireResult, err error) bool { return err == nil && r.Claim != nil && !r.Claim.Claimed }},
		"too early": {&fsmv1.Acquire{Name: "M", Owner: "p", TtlMs: 5000, ClaimJob: "j", ClaimWindow: "w2", ClaimNotBeforeMs: l.AcquiredAt + 60_000},
			func(r *fsm.AcquireResult, err error) bool {
				var rej *fsm.Rejection
				return errors.As(err, &rej) && rej.Reason == coorderr.TooEarly
			}},
	} {
		for _, propose := range []bool{false, true} {
			var r *fsm.AcquireResult
			var err error
			if propose { // Propose routes an Acquire through the same entry point
				var res any
				if res, err = n.Propose(bg(), tc.cmd); err == nil {
					r = res.(*fsm.AcquireResult)
				}
			} else {
				r, err = n.Acquire(bg(), tc.cmd, false)
			}
			if !tc.check(r, err) {
				t.Errorf("%s (Propose %v): %+v %v", name, propose, r, err)
			}
		}
	}
	if got := n.raft.count() - base; got != 0 {
		t.Fatalf("%d entries for answers from state", got)
	}
	if _, err := n.Acquire(bg(), &fsmv1.Acquire{Name: "M", Owner: "p", TtlMs: 5000}, false); err != nil || n.raft.count() != base+1 {
		t.Fatalf("a free lease: %v, %d entries", err, n.raft.count()-base)
	}
}

func TestReadAndNotLeader(t *testing.T) {
	n := newTestNode(t)
	n.hold(t, &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5000})
	n.clock.Advance(time.Second)
	st, now, err := n.Read(bg(), false)
	if err != nil || now != n.fsm.LeaseTime()+1000 {
		t.Fatalf("linearizable read at %d (applied %d): %v", now, n.fsm.LeaseTime(), err)
	}
	if _, _, ok := st.Lease("L"); !ok {
		t.Fatal("read does not see the lease")
	}
	n.raft.mu.Lock()
	n.raft.leader = "n2"
	n.raft.mu.Unlock()
	n.notifyCh <- false
	eventually(t, "follower", func() bool { return !n.Leading() })
	if _, now, err := n.Read(bg(), true); err != nil || now != n.fsm.LeaseTime() {
		t.Fatalf("stale read on a follower: %d %v", now, err)
	}
	var nl interface{ NotLeader() (string, string) }
	if _, _, err := n.Read(bg(), false); !errors.As(err, &nl) {
		t.Fatalf("linearizable read on a follower: %v", err)
	}
	if _, err := n.Propose(bg(), &fsmv1.Tick{}); !errors.As(err, &nl) {
		t.Fatalf("propose on a follower: %v", err)
	}
}

// Raft's errors reach callers as the node's, by behaviour.
func TestTranslate(t *testing.T) {
	n := newTestNode(t)
	var ll interface{ LeadershipLost() bool }
	var sd interface{ ShuttingDown() bool }
	if err := n.translate(raft.ErrLeadershipLost); !errors.As(err, &ll) || !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatalf("leadership lost: %v", err)
	}
	if err := n.translate(raft.ErrRaftShutdown); !errors.As(err, &sd) {
		t.Fatalf("shutdown: %v", err)
	}
	if err := n.translate(raft.ErrEnqueueTimeout); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("enqueue timeout: %v", err)
	}
}

// Transferring leadership needs another voter.
func TestTransferLeadershipOnASingleNode(t *testing.T) {
	n := newTestNode(t)
	_, err := n.TransferLeadership(bg(), "")
	var fp interface{ FailedPrecondition() bool }
	if !errors.As(err, &fp) || !strings.Contains(err.Error(), "single-node cluster: no other voter to transfer leadership to") {
		t.Fatalf("single node: %v", err)
	}
	n.raft.servers = append(n.raft.servers, raft.Server{ID: "n2", Address: "127.0.0.1:2", Suffrage: raft.Voter})
	if _, err := n.TransferLeadership(bg(), "n1"); !errors.As(err, &fp) {
		t.Fatalf("to itself: %v", err)
	}
	var ia interface{ InvalidArgument() string }
	if _, err := n.TransferLeadership(bg(), "n9"); !errors.As(err, &ia) || ia.InvalidArgument() != "id" {
		t.Fatalf("to a stranger: %v", err)
	}
}

// Close waits for the goroutines blocked on Raft futures (await) that
// Raft answers, and names the count of those it never will.
func TestCloseAccountsForRaftFutures(t *testing.T) {
	var logs testutil.Buffer
	n := newTestNode(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	never := make(chan struct{})
	waited := make(chan error, 1)
	go func() { waited <- n.await(bg(), waitFuture(never)) }()
	eventually(t, "await blocks on the future", func() bool { return n.futures.Load() == 1 })
	_ = n.Close()
	if err := <-waited; !errors.Is(err, ErrShutdown) {
		t.Fatalf("await at shutdown: %v", err)
	}
	if !strings.Contains(logs.String(), "Raft futures left unanswered at shutdown") || !strings.Contains(logs.String(), "futures=1") {
		t.Fatalf("the unanswered future is not accounted for:\n%s", logs.String())
	}
	close(never)
	eventually(t, "the goroutine ends once Raft answers", func() bool { return n.futures.Load() == 0 })
}
