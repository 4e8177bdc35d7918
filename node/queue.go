package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/leader"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The job queue on the leader (fsm/DESIGN.md "Jobs queue"). The FSM keeps
// the indexes and applies what a command's calendar stamp made due or
// lapsed; the leader makes sure a command comes when it should:
//
//   - the dispatcher (node/leader/dispatch.go) sleeps until the FSM's
//     NextJobDue (calendar time) and proposes a Tick then, so due jobs
//     become available and lapsed claims end on time even when nothing
//     else is proposed; no scan of the jobs;
//   - long-polling Fetch calls wait here, in arrival order, and the fetch
//     pump (node/leader/fetchpump.go, serving with serveFetches) proposes
//     their fetches when the queues they wait on have available jobs
//     (after a Submit, a Retry, a lapse, a due time: any committed command
//     may have changed the queue, and wakes it);
//   - a Fail's retry jitter is drawn here and stamped into the command, so
//     the FSM stays deterministic.

// queueChanged tells the dispatcher and the fetch pump to look again.
func (n *Node) queueChanged() {
	n.dispatcher.Poke()
	n.fetchPump.Poke()
}

// fetchQueue holds the Fetch calls waiting on this leader, in arrival
// order.
type fetchQueue struct {
	mu      sync.Mutex
	waiters []*fetchWaiter
}

// fetchWaiter is one waiting Fetch call.
type fetchWaiter struct {
	cmd    *fsmv1.FetchJobs
	queues []string // deduplicated
	done   chan fetchOutcome
	// Guarded by fetchQueue.mu.
	inflight  bool // the pump proposed a fetch for it
	gone      bool // the caller stopped waiting; the fetch in flight is its last
	abandoned bool // the caller left for good (its context ended)
	delivered bool // an outcome is in done
}

type fetchOutcome struct {
	res *fsm.FetchResult
	err error
}

// waitingOn reports whether a waiter is queued for any of queues.
func (q *fetchQueue) waitingOn(queues []string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.waiters {
		if w.gone {
			continue
		}
		for _, a := range w.queues {
			for _, b := range queues {
				if a == b {
					return true
				}
			}
		}
	}
	return false
}

func (q *fetchQueue) removeLocked(w *fetchWaiter) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i:i], q.waiters[i+1:]...)
			return
		}
	}
}

// deliverLocked ends w with an outcome.
func (q *fetchQueue) deliverLocked(w *fetchWaiter, o fetchOutcome) {
	q.removeLocked(w)
	w.delivered = true
	w.done <- o
}

func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		dup := false
		for _, t := range out {
			dup = dup || s == t
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// fetchMargin is how long before the caller's deadline a long poll gives
// up, so its (empty) answer arrives in time: a tenth of what is left, at
// most this much.
const fetchMargin = 250 * time.Millisecond

// Fetch hands up to cmd.Max available jobs of cmd.Queues to one worker, in
// one log entry (fsm FetchJobs; the caller validated it and set its
// identity). With wait, a call that finds nothing waits on the leader for
// up to wait — and not past its context's deadline, less a margin — for
// jobs to become available, and returns as soon as a fetch hands it at
// least one; else an empty result. Waiting calls are served in arrival
// order: when jobs become available the pump proposes the fetches of the
// earliest waiters whose queues have them, in that order, so the first to
// wait gets the first pick. A call that finds jobs and no earlier waiter
// on its queues fetches at once. Without wait, a call that finds nothing
// available answers at once without a log entry.
func (n *Node) Fetch(ctx context.Context, cmd *fsmv1.FetchJobs, wait time.Duration) (*fsm.FetchResult, error) {
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		wait = min(wait, left-min(left/10, fetchMargin))
	}
	queues := dedupe(cmd.GetQueues())
	q := &ls.fetches
	if n.fsm.JobsReady(queues, ls.clock.calendar()) && (wait <= 0 || !q.waitingOn(queues)) {
		r, err := fetchResult(n.proposeAs(ctx, ls, cmd))
		if err != nil || len(r.Jobs) > 0 || wait <= 0 {
			return r, err
		}
	} else if wait <= 0 {
		return &fsm.FetchResult{}, nil
	}

	w := &fetchWaiter{cmd: cmd, queues: queues, done: make(chan fetchOutcome, 1)}
	q.mu.Lock()
	q.waiters = append(q.waiters, w)
	q.mu.Unlock()
	n.fetchPump.Poke()
	n.metrics.fetchWaiters.Inc()
	defer n.metrics.fetchWaiters.Dec()
	timer := n.clock.NewTimer(wait)
	defer timer.Stop()
	select {
	case o := <-w.done:
		return o.res, o.err
	case <-timer.C():
		return n.stopWaiting(ctx, ls, w)
	case <-ctx.Done():
		q.mu.Lock()
		delivered := w.delivered
		if w.inflight {
			w.gone, w.abandoned = true, true
		} else if !delivered {
			q.removeLocked(w)
		}
		q.mu.Unlock()
		if delivered {
			o := <-w.done
			return o.res, o.err
		}
		return nil, ctx.Err()
	case <-ls.ctx.Done():
		q.mu.Lock()
		q.removeLocked(w)
		q.mu.Unlock()
		if n.ctx.Err() != nil {
			return nil, ErrShutdown
		}
		return nil, n.notLeader()
	}
}

// stopWaiting ends a long poll whose wait is over: empty, unless a fetch
// for it is in flight, whose outcome it then waits for (its jobs are
// claimed for this worker).
func (n *Node) stopWaiting(ctx context.Context, ls *leaderState, w *fetchWaiter) (*fsm.FetchResult, error) {
	q := &ls.fetches
	q.mu.Lock()
	switch {
	case w.delivered:
	case w.inflight:
		w.gone = true
	default:
		q.removeLocked(w)
		q.mu.Unlock()
		return &fsm.FetchResult{}, nil
	}
	q.mu.Unlock()
	select {
	case o := <-w.done:
		return o.res, o.err
	case <-ctx.Done():
		q.mu.Lock()
		w.abandoned = true
		q.mu.Unlock()
		return nil, ctx.Err()
	}
}

// serveFetches proposes the fetches of the waiters pickWaiters picks, in
// arrival order, so they apply in that order: the fetch pump's work on
// leadership l (always this node's *leaderState).
func (n *Node) serveFetches(_ context.Context, l leader.Leadership) {
	ls := l.(*leaderState)
	for _, w := range n.pickWaiters(ls, nil) {
		wait, err := n.proposeStart(ls.ctx, ls, w.cmd)
		if err != nil {
			n.fetchDone(ls, w, nil, err)
			continue
		}
		n.awaitFetch(ls, w, wait)
	}
}

// pickWaiters walks the waiters in arrival order and picks each whose
// queues still have available jobs (plus extra: jobs about to be), counting
// down what earlier waiters will take, so a job submitted to a hundred
// waiters costs one fetch, not a hundred. Picked waiters are in flight
// until fetchDone. A fetch that comes back empty (another call took the
// jobs first) leaves its waiter where it was in the line.
func (n *Node) pickWaiters(ls *leaderState, extra map[string]uint64) []*fetchWaiter {
	q := &ls.fetches
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) == 0 {
		return nil
	}
	cal := ls.clock.calendar()
	avail := map[string]uint64{}
	var picked []*fetchWaiter
	for _, w := range q.waiters {
		if w.inflight || w.gone {
			continue
		}
		want, have := uint64(w.cmd.GetMax()), uint64(0)
		for _, name := range w.queues {
			a, ok := avail[name]
			if !ok {
				a = n.availableJobs(name, cal) + extra[name]
			}
			take := min(a, want-have)
			avail[name] = a - take
			if have += take; have == want {
				break
			}
		}
		if have > 0 {
			w.inflight = true
			picked = append(picked, w)
		}
	}
	return picked
}

// awaitFetch hands a waiter's fetch outcome to fetchDone when it comes.
func (n *Node) awaitFetch(ls *leaderState, w *fetchWaiter, wait func(context.Context) (any, error)) {
	n.wg.Go(func() {
		r, err := fetchResult(wait(ls.ctx))
		n.fetchDone(ls, w, r, err)
	})
}

// submit proposes a SubmitJobs and, in the same entry right after it, the
// fetches of the long polls waiting for the jobs it makes available at
// once: a waiting worker gets a submitted job one commit after the submit
// instead of two.
func (n *Node) submitJobs(ctx context.Context, ls *leaderState, cmd *fsmv1.SubmitJobs) (any, error) {
	cal := ls.clock.calendar()
	var due map[string]uint64
	for _, j := range cmd.GetJobs() {
		if j.GetRunAtMs() <= cal {
			if due == nil {
				due = map[string]uint64{}
			}
			due[j.GetQueue()]++
		}
	}
	var picked []*fetchWaiter
	if due != nil {
		picked = n.pickWaiters(ls, due)
	}
	bodies := []any{cmd}
	for _, w := range picked {
		bodies = append(bodies, w.cmd)
	}
	waits, err := n.proposeGroup(ctx, ls, bodies...)
	if err != nil {
		for _, w := range picked {
			n.fetchDone(ls, w, nil, err)
		}
		return nil, err
	}
	for i, w := range picked {
		n.awaitFetch(ls, w, waits[i+1])
	}
	return waits[0](ctx)
}

// availableJobs is the number of available jobs in a queue.
func (n *Node) availableJobs(queue string, cal int64) uint64 {
	st := n.fsm.QueueStats(queue, cal)
	if len(st) == 0 {
		return 0
	}
	return st[0].Available
}

// fetchDone takes the outcome of a waiter's fetch: jobs or an error end
// the wait; nothing leaves the waiter in line (unless it stopped waiting).
func (n *Node) fetchDone(ls *leaderState, w *fetchWaiter, r *fsm.FetchResult, err error) {
	q := &ls.fetches
	q.mu.Lock()
	w.inflight = false
	if err != nil || len(r.Jobs) > 0 || w.gone {
		if w.abandoned && r != nil && len(r.Jobs) > 0 {
			n.log.Warn("a long-polling fetch's caller left while its fetch was applied; its jobs return when their visibility timeout passes",
				"worker_id", w.cmd.GetWorkerId(), "jobs", len(r.Jobs))
		}
		if r == nil && err == nil {
			r = &fsm.FetchResult{}
		}
		q.deliverLocked(w, fetchOutcome{res: r, err: err})
	}
	q.mu.Unlock()
	n.fetchPump.Poke() // the queue changed while this fetch was in flight
}

// fetchResult types the outcome of a FetchJobs.
func fetchResult(res any, err error) (*fsm.FetchResult, error) {
	if err != nil {
		return nil, err
	}
	r, ok := res.(*fsm.FetchResult)
	if !ok {
		return nil, fmt.Errorf("fetch answered with %T", res)
	}
	return r, nil
}

// jitter draws the retry jitter of each failure (fsm.Backoff: up to 25 %
// longer), so workers failing together do not retry together; stamped
// into the command, it replays the same on every replica.
func jitter(cmd *fsmv1.FailJobs) {
	for _, f := range cmd.GetFailures() {
		f.JitterPpm = rand.Uint32N(1_000_000)
	}
}
