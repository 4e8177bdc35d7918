package node

import (
	"sync"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/internal/waitq"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Waiting acquires (AcquireRequest.wait). The leader keeps, per lease name,
// the callers waiting for it in arrival order. A Release on the leader
// carries the first waiter's Acquire as its handoff, so the lease passes to
// the waiter in the release's own log entry (one commit per hand-over
// instead of two, and no polling). A waiter also looks again when the
// holder's TTL runs out (a holder that crashed never releases), on the
// node's clock. What a waiter sees is decided by fsm.CheckAcquire, the
// predicate the apply uses: a lease held by another request (whatever
// owner and request id it claims) is waited for, never proposed for.
//
// Each lease's line is a waitq.Queue (the FIFO pattern the long polls
// share). Queues live in memory on the leader: a leader change fails the waiting
// calls with UNAVAILABLE and clients retry on the new leader (with the same
// request id, so a grant made just before is not lost).

// waiter is one waiting Acquire; its outcome is the handoff's grant.
type waiter = waitq.Waiter[*fsmv1.Acquire, *fsm.AcquireResult]

// waitQueues holds one line per lease name, dropped when it empties.
type waitQueues struct {
	mu sync.Mutex
	q  map[string]*waitq.Queue[*fsmv1.Acquire, *fsm.AcquireResult]
}

func (w *waitQueues) line(name string) *waitq.Queue[*fsmv1.Acquire, *fsm.AcquireResult] {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.q[name]
}

// wakeAll tells the waiters for name to look again (a release without a
// handoff, a refused handoff).
func (w *waitQueues) wakeAll(name string) {
	if q := w.line(name); q != nil {
		q.WakeAll()
	}
}

// push puts cmd at the end of its lease's line.
func (w *waitQueues) push(cmd *fsmv1.Acquire) *waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.q == nil {
		w.q = map[string]*waitq.Queue[*fsmv1.Acquire, *fsm.AcquireResult]{}
	}
	q := w.q[cmd.GetName()]
	if q == nil {
		q = &waitq.Queue[*fsmv1.Acquire, *fsm.AcquireResult]{}
		w.q[cmd.GetName()] = q
	}
	return q.Push(cmd)
}

// remove takes x out of its line (when x was first, the new first is
// woken: it may be its turn now).
func (w *waitQueues) remove(x *waiter) {
	x.Leave()
	w.dropIfEmpty(x.Value.GetName())
}

// dropIfEmpty forgets name's line once nobody waits in it (push and this
// hold w.mu, so nobody joins a dropped line).
func (w *waitQueues) dropIfEmpty(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.q[name]; q != nil && q.Len() == 0 {
		delete(w.q, name)
	}
}

// first returns the longest-waiting caller for name, or nil.
func (w *waitQueues) first(name string) *waiter {
	if q := w.line(name); q != nil {
		return q.First()
	}
	return nil
}

// handoffFor returns the Acquire of the first waiter for name, to ride on
// a Release, and a function that delivers the handoff's outcome to it.
func (w *waitQueues) handoffFor(name string) (*fsmv1.Acquire, func(any)) {
	x := w.first(name)
	if x == nil {
		return nil, func(any) {}
	}
	return x.Value, func(out any) {
		r, ok := out.(*fsm.AcquireResult)
		if !ok || (!r.Acquired && r.Claim == nil) {
			w.wakeAll(name) // refused: the waiters look again
			return
		}
		x.Deliver(r)
		w.dropIfEmpty(name)
	}
}
