package node

import (
	"context"
	"fmt"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Acquire is the one entry point for acquiring a lease. On the ready
// leader it answers from committed state whatever the FSM would answer
// without a write (fsm.CheckAcquire: held by another request, this
// request's own live grant, a completed window, a claim too early), so
// contention costs no fsync; otherwise it proposes the Acquire. With wait,
// a lease held by another request queues the call until a release hands it
// over or the holder's TTL runs out (waiters.go). The caller sets the
// command's identity and live-lease limit; nothing above the node repeats
// an FSM decision.
func (n *Node) Acquire(ctx context.Context, cmd *fsmv1.Acquire, wait bool) (*fsm.AcquireResult, error) {
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return nil, err
	}
	if wait {
		return n.acquireWaiting(ctx, ls, cmd)
	}
	if answer, ok := n.fsm.CheckAcquire(ls.clock.leaseTime(), ls.clock.calendarTime(), cmd); ok {
		return acquireResult(answer, nil)
	}
	return acquireResult(n.proposeAs(ctx, ls, cmd))
}

// acquireResult types the outcome of an Acquire.
func acquireResult(res any, err error) (*fsm.AcquireResult, error) {
	if err != nil {
		return nil, err
	}
	switch r := res.(type) {
	case *fsm.AcquireResult:
		return r, nil
	case *fsm.Rejection:
		return nil, r
	default:
		return nil, fmt.Errorf("acquire answered with %T", res)
	}
}

// heldByAnother reports whether an answer of CheckAcquire is "the lease is
// live and held by another request" (what a waiting acquire waits for).
func heldByAnother(answer any) (*fsm.AcquireResult, bool) {
	r, ok := answer.(*fsm.AcquireResult)
	return r, ok && !r.Acquired && r.Claim == nil
}

// acquireWaiting is Acquire with wait: while the lease is held by another
// request, queue until a release hands it over, the holder's TTL runs out,
// the call's context ends or leadership is lost. The caller joins the
// queue before looking at the lease, so no release is missed. Only the
// first waiter proposes, and only when the lease is free: one proposal per
// hand-over.
func (n *Node) acquireWaiting(ctx context.Context, ls *leaderState, cmd *fsmv1.Acquire) (*fsm.AcquireResult, error) {
	name := cmd.GetName()
	me := n.waiters.push(cmd)
	n.metrics.waiters.Inc()
	defer func() {
		n.waiters.remove(me)
		n.metrics.waiters.Dec()
	}()
	for {
		if ls.ctx.Err() != nil {
			return nil, n.notLeader()
		}
		select {
		case r := <-me.Done():
			return r, nil
		default:
		}
		// A holder's expiry is waited for until an instant of the clock
		// read before the lease time: a clock that moves between the two
		// makes the look early (it finds the lease still held and waits
		// again), never late.
		base := n.clock.Now()
		now := ls.clock.leaseTime()
		answer, answered := n.fsm.CheckAcquire(now, ls.clock.calendarTime(), cmd)
		held, isHeld := heldByAnother(answer)
		var expiry clock.Timer // nil: wait for a wake-up only
		switch {
		case answered && !isHeld:
			return acquireResult(answer, nil) // this request's grant, a completed window, too early
		case !answered && n.waiters.first(name) == me:
			r, err := acquireResult(n.proposeAs(ctx, ls, cmd))
			if err != nil || r.Acquired || r.Claim != nil {
				return r, err
			}
			continue // taken by a caller that did not wait: wait for it
		case !answered:
			// Free, and the first waiter is taking it; its removal from the
			// queue wakes us if it is our turn next.
		default:
			expiry = clock.NewTimerAt(n.clock, base.Add(time.Duration(held.Lease.ExpiresAt-now+1)*time.Millisecond)) // the holder's TTL
		}
		var expired <-chan time.Time
		if expiry != nil {
			expired = expiry.C()
		}
		var (
			res *fsm.AcquireResult
			err error
		)
		select {
		case res = <-me.Done():
		case <-me.Woken():
		case <-expired:
		case <-ctx.Done():
			err = ctx.Err()
		case <-ls.ctx.Done(): // leadership lost, or shutting down: the call goes elsewhere now
			err = n.notLeader()
			if n.ctx.Err() != nil {
				err = ErrShutdown
			}
		}
		if expiry != nil {
			expiry.Stop()
		}
		if res != nil || err != nil {
			return res, err
		}
	}
}

// Propose stamps body (an fsm command body such as *fsmv1.Renew) with the
// lease time on the ready leader, commits it, and returns the FSM's
// typed result (see fsm/results.go); a rejection is the error, as
// *fsm.Rejection. An Acquire goes through Acquire (without wait), a
// FetchJobs through Fetch (without wait); a Release carries the first
// waiter's Acquire as its handoff; a release wakes the lease's waiters; a
// FailJobs gets the leader's retry jitter; a SubmitJobs takes the fetches
// of the long polls it feeds into its entry. The API reaches it only
// through the typed commands (commands.go), which type its result.
func (n *Node) Propose(ctx context.Context, body any) (any, error) {
	if a, ok := body.(*fsmv1.Acquire); ok {
		r, err := n.Acquire(ctx, a, false)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return r, nil
	}
	if f, ok := body.(*fsmv1.FetchJobs); ok {
		r, err := n.Fetch(ctx, f, 0)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return nil, err
	}
	switch b := body.(type) {
	case *fsmv1.FailJobs:
		jitter(b)
		return n.proposeAs(ctx, ls, b)
	case *fsmv1.SubmitJobs:
		return n.submitJobs(ctx, ls, b)
	case *fsmv1.Release:
		return n.release(ctx, ls, b)
	case *fsmv1.CompleteWindow:
		res, err := n.proposeAs(ctx, ls, b)
		if r, ok := res.(*fsm.WindowResult); ok && r.Released {
			n.waiters.wakeAll(b.GetLeaseName())
		}
		return res, err
	case *fsmv1.PutSchedule, *fsmv1.PauseSchedule:
		res, err := n.proposeAs(ctx, ls, b)
		if err == nil {
			n.wakeMaterialiser() // due at once: its next occurrence is computed now
		}
		return res, err
	default:
		return n.proposeAs(ctx, ls, body)
	}
}

// release proposes a Release with the first waiter's Acquire as its
// handoff and delivers the handoff's outcome.
func (n *Node) release(ctx context.Context, ls *leaderState, cmd *fsmv1.Release) (any, error) {
	deliver := func(any) {}
	if cmd.GetHandoff() == nil {
		cmd.Handoff, deliver = n.waiters.handoffFor(cmd.GetName())
	}
	res, err := n.proposeAs(ctx, ls, cmd)
	if err != nil {
		return nil, err
	}
	r, ok := res.(*fsm.ReleaseResult)
	switch {
	case !ok:
		return nil, fmt.Errorf("release answered with %T", res)
	case r.Handoff != nil:
		deliver(r.Handoff)
	case r.Released:
		n.waiters.wakeAll(cmd.GetName())
	}
	return r, nil
}
