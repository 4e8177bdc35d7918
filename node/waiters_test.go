package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Waiting acquires in virtual time: a fake clock drives the holders' TTLs,
// and every log entry is counted.

type acquired struct {
	r   *fsm.AcquireResult
	err error
}

// waitFor starts a waiting Acquire and returns once it is queued.
func (n *testNode) waitFor(t *testing.T, ctx context.Context, cmd *fsmv1.Acquire) <-chan acquired {
	t.Helper()
	queued := n.waiting(cmd.GetName())
	out := make(chan acquired, 1)
	go func() {
		r, err := n.Acquire(ctx, cmd, true)
		out <- acquired{r, err}
	}()
	eventually(t, cmd.GetOwner()+" queued", func() bool { return n.waiting(cmd.GetName()) == queued+1 })
	return out
}

func (n *testNode) hold(t *testing.T, cmd *fsmv1.Acquire) fsm.Lease {
	t.Helper()
	r, err := n.Acquire(bg(), cmd, false)
	if err != nil || !r.Acquired {
		t.Fatalf("acquire %v: %+v %v", cmd, r, err)
	}
	return r.Lease
}

func (n *testNode) release(t *testing.T, l fsm.Lease) *fsm.ReleaseResult {
	t.Helper()
	res, err := n.Propose(bg(), &fsmv1.Release{Name: l.Name, Owner: l.Owner, Generation: l.Generation, Identity: l.Identity})
	if err != nil {
		t.Fatalf("release %+v: %v", l, err)
	}
	return res.(*fsm.ReleaseResult)
}

func granted(t *testing.T, ch <-chan acquired, owner string) fsm.Lease {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil || !a.r.Acquired || a.r.Lease.Owner != owner {
			t.Fatalf("waiter %s: %+v %v", owner, a.r, a.err)
		}
		return a.r.Lease
	case <-time.After(10 * time.Second):
		t.Fatalf("waiter %s was not granted", owner)
	}
	return fsm.Lease{}
}

func pending(t *testing.T, ch <-chan acquired, who string) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s answered out of turn: %+v %v", who, a.r, a.err)
	default:
	}
}

// Waiters are served in arrival order, each by its predecessor's release:
// one log entry per hand-over (the release carries the next acquire).
func TestWaitersFIFOOneEntryPerHandOver(t *testing.T) {
	n := newTestNode(t)
	holder := n.hold(t, &fsmv1.Acquire{Name: "L", Owner: "h", TtlMs: 10_000})
	w1 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w1", TtlMs: 10_000, RequestId: "r1"})
	w2 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w2", TtlMs: 10_000, RequestId: "r2"})
	w3 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w3", TtlMs: 10_000, RequestId: "r3"})
	base := n.raft.count()
	for i, next := range []struct {
		ch    <-chan acquired
		owner string
	}{{w1, "w1"}, {w2, "w2"}, {w3, "w3"}} {
		if r := n.release(t, holder); r.Handoff == nil {
			t.Fatalf("release %d carried no handoff", i)
		}
		holder = granted(t, next.ch, next.owner)
		if holder.Generation != uint64(i+2) {
			t.Fatalf("%s got generation %d", next.owner, holder.Generation)
		}
		if got := n.raft.count() - base; got != i+1 {
			t.Fatalf("after %d hand-overs: %d entries", i+1, got)
		}
	}
	for _, ch := range []<-chan acquired{w2, w3} {
		pending(t, ch, "a served waiter")
	}
	if n.waiting("L") != 0 {
		t.Fatalf("%d waiters left", n.waiting("L"))
	}
}

// A holder that never releases: the first waiter wakes at its expiry on the
// node's clock and proposes once.
func TestWaiterWakesAtExpiry(t *testing.T) {
	n := newTestNode(t)
	holder := n.hold(t, &fsmv1.Acquire{Name: "L", Owner: "h", TtlMs: 5_000})
	w1 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w1", TtlMs: 10_000})
	w2 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w2", TtlMs: 10_000})
	base := n.raft.count()
	expiry := start.Add(time.Duration(holder.ExpiresAt-holder.AcquiredAt+1) * time.Millisecond)
	if !n.clock.WaitArmed(expiry, 5*time.Second) {
		t.Fatal("the waiter armed no timer at the holder's expiry")
	}
	n.clock.Advance(4 * time.Second)
	pending(t, w1, "w1 before the expiry")
	n.clock.Advance(time.Second + time.Millisecond)
	l := granted(t, w1, "w1")
	if got := n.raft.count() - base; got != 1 {
		t.Fatalf("%d entries for one hand-over at expiry", got)
	}
	pending(t, w2, "w2")
	// w2 now waits for w1's lease, to its expiry.
	if !n.clock.WaitArmed(start.Add(time.Duration(l.ExpiresAt-holder.AcquiredAt+1)*time.Millisecond), 5*time.Second) {
		t.Fatal("w2 armed no timer at w1's expiry")
	}
}

// A release without a handoff (CompleteWindow with release) wakes the
// waiters; the first proposes once.
func TestWaiterWakesOnReleaseWithoutHandoff(t *testing.T) {
	n := newTestNode(t)
	holder := n.hold(t, &fsmv1.Acquire{Name: "L", Owner: "h", TtlMs: 10_000, ClaimJob: "j", ClaimWindow: "w"})
	w1 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w1", TtlMs: 10_000})
	base := n.raft.count()
	res, err := n.Propose(bg(), &fsmv1.CompleteWindow{Job: "j", Window: "w", LeaseName: "L", Owner: "h",
		Generation: holder.Generation, Release: true})
	if err != nil || !res.(*fsm.WindowResult).Released {
		t.Fatalf("complete with release: %+v %v", res, err)
	}
	granted(t, w1, "w1")
	if got := n.raft.count() - base; got != 2 {
		t.Fatalf("%d entries for a completion and a grant", got)
	}
}

// The loop: with identities (TLS on), a waiting Acquire from
// another identity that sends the holder's owner and request id is not
// the holder's retry. It waits like any other caller: no proposal while
// the lease is held, one per hand-over (the old waiter skipped the identity
// check, proposed, was refused by the FSM, and proposed again: 266 entries
// in 1 s).
func TestForeignWaiterWithTheHoldersRequestIDProposesOncePerHandOver(t *testing.T) {
	for _, handOver := range []string{"release", "expiry"} {
		t.Run(handOver, func(t *testing.T) {
			n := newTestNode(t)
			holder := n.hold(t, &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5_000, RequestId: "r1", Identity: "id-a"})
			base := n.raft.count()
			ctx, cancel := context.WithCancel(bg())
			defer cancel()
			w := n.waitFor(t, ctx, &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5_000, RequestId: "r1", Identity: "id-b"})
			expiry := start.Add(time.Duration(holder.ExpiresAt-holder.AcquiredAt+1) * time.Millisecond)
			idle := n.clock.WaitArmed(expiry, 2*time.Second)
			if got := n.raft.count() - base; !idle || got != 0 {
				cancel()
				t.Fatalf("while the lease is held: %d entries, waiting for its expiry: %v", got, idle)
			}
			pending(t, w, "the foreign waiter")
			switch handOver {
			case "release":
				n.release(t, holder)
			case "expiry":
				n.clock.Advance(5*time.Second + time.Millisecond)
			}
			l := granted(t, w, "o")
			if l.Identity != "id-b" || l.Generation != 2 {
				t.Fatalf("granted %+v", l)
			}
			if got := n.raft.count() - base; got != 1 {
				t.Fatalf("%d entries for one hand-over by %s", got, handOver)
			}
		})
	}
}

// The holder's own retry with wait is answered from state: no entry.
func TestWaiterOwnGrantAnsweredFromState(t *testing.T) {
	n := newTestNode(t)
	cmd := &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5_000, RequestId: "r1", Identity: "id-a"}
	l := n.hold(t, cmd)
	base := n.raft.count()
	r, err := n.Acquire(bg(), cmd, true)
	if err != nil || !r.Acquired || r.Lease.Generation != l.Generation || n.raft.count() != base {
		t.Fatalf("retry: %+v %v, %d entries", r, err, n.raft.count()-base)
	}
	if n.waiting("L") != 0 {
		t.Fatal("the retry stayed queued")
	}
}

// A waiter that gives up leaves the queue, and the next in line is first.
func TestWaiterCancelAndLeadershipLoss(t *testing.T) {
	n := newTestNode(t)
	holder := n.hold(t, &fsmv1.Acquire{Name: "L", Owner: "h", TtlMs: 10_000})
	ctx, cancel := context.WithCancel(bg())
	w1 := n.waitFor(t, ctx, &fsmv1.Acquire{Name: "L", Owner: "w1", TtlMs: 10_000})
	w2 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w2", TtlMs: 10_000})
	cancel()
	if a := <-w1; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v", a)
	}
	eventually(t, "w1 gone", func() bool { return n.waiting("L") == 1 })
	n.release(t, holder)
	holder = granted(t, w2, "w2")

	// Leadership lost: waiting calls end at once, pointing at the leader.
	w3 := n.waitFor(t, bg(), &fsmv1.Acquire{Name: "L", Owner: "w3", TtlMs: 10_000})
	n.raft.mu.Lock()
	n.raft.leader = "n2"
	n.raft.mu.Unlock()
	n.notifyCh <- false
	var nl interface{ NotLeader() (string, string) }
	if a := <-w3; !errors.As(a.err, &nl) {
		t.Fatalf("after leadership loss: %+v", a)
	}
	if id, _ := nl.NotLeader(); id != "n2" {
		t.Fatalf("not-leader error names %q", id)
	}
}
