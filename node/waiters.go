package node

import (
	"sync"

	"github.com/coordd/coordd/fsm"
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
// Queues live in memory on the leader: a leader change fails the waiting
// calls with UNAVAILABLE and clients retry on the new leader (with the same
// request id, so a grant made just before is not lost).

type waiter struct {
	cmd   *fsmv1.Acquire
	grant chan *fsm.AcquireResult // buffered: a handoff never blocks the releaser
	wake  chan struct{}           // buffered 1: the lease may have become free
}

func newWaiter(cmd *fsmv1.Acquire) *waiter {
	return &waiter{cmd: cmd, grant: make(chan *fsm.AcquireResult, 1), wake: make(chan struct{}, 1)}
}

func (x *waiter) poke() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

type waitQueues struct {
	mu sync.Mutex
	q  map[string][]*waiter
}

// wakeAll tells the waiters for name to look again (a release without a
// handoff, a refused handoff).
func (w *waitQueues) wakeAll(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.q[name] {
		x.poke()
	}
}

func (w *waitQueues) push(name string, x *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.q == nil {
		w.q = map[string][]*waiter{}
	}
	w.q[name] = append(w.q[name], x)
}

// remove takes x out of name's queue; when x was first, the new first
// is woken: it may be its turn now.
func (w *waitQueues) remove(name string, x *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[name]
	for i, y := range q {
		if y == x {
			q = append(q[:i:i], q[i+1:]...)
			if i == 0 && len(q) > 0 {
				q[0].poke()
			}
			break
		}
	}
	if len(q) == 0 {
		delete(w.q, name)
	} else {
		w.q[name] = q
	}
}

// first returns the longest-waiting caller for name, or nil.
func (w *waitQueues) first(name string) *waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.q[name]; len(q) > 0 {
		return q[0]
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
	return x.cmd, func(out any) {
		r, ok := out.(*fsm.AcquireResult)
		if !ok || (!r.Acquired && r.Claim == nil) {
			w.wakeAll(name) // refused: the waiters look again
			return
		}
		w.remove(name, x)
		x.grant <- r
	}
}
