package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// proposeAsync proposes body in a goroutine; the result arrives on the
// returned channel.
func proposeAsync(ctx context.Context, n *testNode, body any) <-chan result {
	out := make(chan result, 1)
	go func() {
		r, err := n.Propose(ctx, body)
		out <- result{r, err}
	}()
	return out
}

type result struct {
	res any
	err error
}

func acquireCmd(name string) *fsmv1.Acquire {
	return &fsmv1.Acquire{Name: name, Owner: "o", TtlMs: 10_000}
}

// firstInFlight makes n's Raft hold its entries and proposes lease "first",
// which goes out at once as entry base and stays in flight.
func firstInFlight(t *testing.T, n *testNode) (base int, first <-chan result) {
	t.Helper()
	base = n.raft.count()
	n.raft.holdEntries()
	first = proposeAsync(bg(), n, acquireCmd("first"))
	eventually(t, "the first entry", func() bool { return n.raft.count() == base+1 })
	return base, first
}

// proposeLeases proposes leases l0 … l<k-1>, each from its own goroutine.
func proposeLeases(n *testNode, k int) []<-chan result {
	var chs []<-chan result
	for i := 0; i < k; i++ {
		chs = append(chs, proposeAsync(bg(), n, acquireCmd(fmt.Sprintf("l%d", i))))
	}
	return chs
}

// Group commit: a lone command goes at once as a plain entry; the commands
// proposed while it is in flight leave together as one Batch entry, and
// each gets its own result.
func TestProposerGroupsCommandsInFlight(t *testing.T) {
	n := newTestNode(t)
	base, first := firstInFlight(t, n)
	if c := n.raft.entry(t, base); c.GetType() != fsmv1.CommandType_COMMAND_TYPE_ACQUIRE {
		t.Fatalf("a lone command went as %v", c.GetType())
	}
	rest := proposeLeases(n, 5)
	// All five are with the proposer (one taken, the others queued) while
	// the first entry is still in flight.
	eventually(t, "five proposals queued", func() bool { return n.queued.Load() == 5 })
	if n.raft.count() != base+1 {
		t.Fatalf("%d entries while one was in flight, want 1", n.raft.count()-base)
	}
	n.raft.release(nil)
	if r := <-first; r.err != nil || !r.res.(*fsm.AcquireResult).Acquired {
		t.Fatalf("first: %+v", r)
	}
	for i, ch := range rest {
		r := <-ch
		a, ok := r.res.(*fsm.AcquireResult)
		if r.err != nil || !ok || !a.Acquired || a.Lease.Name != fmt.Sprintf("l%d", i) {
			t.Fatalf("proposal %d: %+v", i, r)
		}
	}
	if got := n.raft.count() - base; got != 2 {
		t.Fatalf("%d entries for 6 commands, want 2", got)
	}
	batch := n.raft.entry(t, base+1)
	if batch.GetType() != fsmv1.CommandType_COMMAND_TYPE_BATCH || len(batch.GetBatch().GetCommands()) != 5 {
		t.Fatalf("second entry: %v with %d commands", batch.GetType(), len(batch.GetBatch().GetCommands()))
	}
}

// The next entry leaves as soon as Raft has answered the one in flight,
// not after the callers of that one have been handed their results: a
// caller slow to take its result holds nothing back.
func TestProposerNextEntryBeforeResults(t *testing.T) {
	n := newTestNode(t)
	base := n.raft.count()
	n.raft.holdEntries()
	// A proposal whose result nobody takes yet (its channel has no room):
	// the committer blocks handing it over.
	slow := &proposal{cmd: fsm.EnvelopeAt(1, 1, acquireCmd("slow")), done: make(chan proposalResult)}
	if _, err := n.enqueueGroup(bg(), slow); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first entry", func() bool { return n.raft.count() == base+1 })
	n.raft.release(nil)
	next := proposeAsync(bg(), n, acquireCmd("next"))
	eventually(t, "the next entry while the first one's result waits", func() bool { return n.raft.count() == base+2 })
	if c := n.raft.entry(t, base+1); c.GetAcquire().GetName() != "next" {
		t.Fatalf("second entry: %v", c)
	}
	if r := <-slow.done; r.err != nil || !r.resp.(*fsm.AcquireResult).Acquired {
		t.Fatalf("slow: %+v", r)
	}
	if r := <-next; r.err != nil || !r.res.(*fsm.AcquireResult).Acquired {
		t.Fatalf("next: %+v", r)
	}
}

// A failed entry fails every command in it, with the node's error (here:
// leadership lost, outcome unknown).
func TestProposerFailurePropagatesToTheBatch(t *testing.T) {
	n := newTestNode(t)
	base, first := firstInFlight(t, n)
	rest := proposeLeases(n, 3)
	eventually(t, "three proposals queued", func() bool { return n.queued.Load() == 3 })
	n.raft.mu.Lock()
	n.raft.failAll = raft.ErrLeadershipLost // the batch entry fails at once
	n.raft.mu.Unlock()
	n.raft.release(raft.ErrLeadershipLost)
	for i, ch := range append([]<-chan result{first}, rest...) {
		r := <-ch
		var ll interface{ LeadershipLost() bool }
		if !errors.As(r.err, &ll) || r.res != nil {
			t.Fatalf("proposal %d: %+v, want leadership lost", i, r)
		}
	}
	if got := n.raft.count() - base; got != 2 {
		t.Fatalf("%d entries, want 2", got)
	}
	if _, _, ok := n.fsm.Lease("l0"); ok {
		t.Fatal("a failed entry was applied")
	}
}

// A caller whose context ends stops waiting (the outcome is unknown to
// it); the others in the same entry get their results.
func TestProposerContextCancel(t *testing.T) {
	n := newTestNode(t)
	base := n.raft.count()
	n.raft.holdEntries()
	ctx, cancel := context.WithCancel(bg())
	mine := proposeAsync(ctx, n, acquireCmd("mine"))
	other := proposeAsync(bg(), n, acquireCmd("other"))
	eventually(t, "an entry in flight", func() bool { return n.raft.count() == base+1 })
	cancel()
	if r := <-mine; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled caller: %+v", r)
	}
	n.raft.release(nil) // and what follows applies at once
	if r := <-other; r.err != nil {
		t.Fatalf("other caller: %+v", r)
	}
	// An already cancelled context proposes nothing (on a quiet node: the
	// command cancelled above may or may not have gone out).
	quiet := newTestNode(t)
	before := quiet.raft.count()
	if _, err := quiet.Propose(ctx, acquireCmd("late")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before proposing: %v", err)
	}
	if quiet.raft.count() != before {
		t.Fatal("a cancelled caller's command was proposed")
	}
}

// At shutdown, queued and in-flight proposals end with ErrShutdown.
func TestProposerShutdown(t *testing.T) {
	n := newTestNode(t)
	n.raft.holdEntries()
	r := proposeAsync(bg(), n, acquireCmd("x"))
	eventually(t, "entry in flight", func() bool { n.raft.mu.Lock(); defer n.raft.mu.Unlock(); return len(n.raft.held) == 1 })
	go func() { _ = n.Close() }()
	var sd interface{ ShuttingDown() bool }
	if got := <-r; !errors.As(got.err, &sd) {
		t.Fatalf("at shutdown: %+v", got)
	}
	n.raft.release(raft.ErrRaftShutdown)
}
