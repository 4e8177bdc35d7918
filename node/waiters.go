package server

import (
	"context"
	"sync"
	"time"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Waiting acquires (AcquireRequest.wait). The leader keeps, per lease name,
// the callers waiting for it in arrival order. A Release on the leader
// carries the first waiter's Acquire as its handoff, so the lease passes to
// the waiter in the release's own log entry (one commit per hand-over
// instead of two, and no polling). A waiter also re-checks the lease when
// the holder's TTL runs out (a holder that crashed never releases).
//
// Queues live in memory on the leader: a leader change fails the waiting
// calls with UNAVAILABLE and clients retry on the new leader (with the same
// request id, so a grant made just before is not lost).

type waiter struct {
	cmd   *fsmv1.Acquire
	grant chan *fsm.AcquireResult // buffered: a handoff never blocks the releaser
	wake  chan struct{}           // buffered 1: the lease may have become free
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
		select {
		case x.wake <- struct{}{}:
		default:
		}
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
				select {
				case q[0].wake <- struct{}{}:
				default:
				}
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

// acquireWaiting is Acquire with wait on the leader: while the lease is
// held, queue until a release hands it over, the holder's TTL runs out,
// the call's context ends or leadership is lost. The caller joins the
// queue before looking at the lease, so no release is missed.
func (s *Server) acquireWaiting(ctx context.Context, cmd *fsmv1.Acquire) (*fsm.AcquireResult, error) {
	done, err := s.limits.startWait(cmd.GetIdentity())
	if err != nil {
		s.metrics.limited.WithLabelValues("waiting_acquires").Inc()
		return nil, err
	}
	defer done()
	name := cmd.GetName()
	me := &waiter{cmd: cmd, grant: make(chan *fsm.AcquireResult, 1), wake: make(chan struct{}, 1)}
	s.waiters.push(name, me)
	s.metrics.waiters.Inc()
	defer func() {
		s.waiters.remove(name, me)
		s.metrics.waiters.Dec()
	}()
	for {
		ls, err := s.readyLeader(ctx)
		if err != nil {
			return nil, err
		}
		select {
		case r := <-me.grant:
			return r, nil
		default:
		}
		l, _, ok := s.fsm.Lease(name)
		now := ls.clock.current()
		// Free, or already this request's grant (a retry after a lost reply).
		mine := cmd.GetRequestId() != "" && l.RequestID == cmd.GetRequestId() && l.Owner == cmd.GetOwner()
		free := !ok || !l.Live(now) || mine
		var timer *time.Timer // nil: wait for a wake-up only
		var expiry <-chan time.Time
		switch {
		case free && s.waiters.first(name) == me:
			res, err := s.propose(ctx, cmd)
			if err != nil {
				return nil, err
			}
			if r := res.(*fsm.AcquireResult); r.Acquired || r.Claim != nil {
				return r, nil
			}
			continue // taken by a caller that did not wait: wait for it
		case free:
			// The first waiter is taking it; its removal from the queue
			// wakes us if it is our turn next.
		default:
			timer = time.NewTimer(time.Duration(l.ExpiresAt-now+1) * time.Millisecond) // the holder's TTL
			expiry = timer.C
		}
		var res *fsm.AcquireResult
		select {
		case res = <-me.grant:
		case <-me.wake:
		case <-expiry:
		case <-ctx.Done():
			err = ctx.Err()
		case <-ls.ctx.Done():
			err = s.notLeader()
		case <-s.stop: // shutting down: let the call go elsewhere now, not at the grace timeout
			err = errShutdown
		}
		if timer != nil {
			timer.Stop()
		}
		if res != nil || err != nil {
			return res, err
		}
	}
}

// handoffFor returns the Acquire of the first waiter for name, to ride on
// a Release, and a function that delivers the outcome to it.
func (s *Server) handoffFor(name string) (*fsmv1.Acquire, func(any)) {
	w := s.waiters.first(name)
	if w == nil {
		return nil, func(any) {}
	}
	return w.cmd, func(out any) {
		r, ok := out.(*fsm.AcquireResult)
		if !ok || (!r.Acquired && r.Claim == nil) {
			s.waiters.wakeAll(name) // refused: the waiters look again
			return
		}
		s.waiters.remove(name, w)
		w.grant <- r
	}
}
