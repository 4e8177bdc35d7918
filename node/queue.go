package node

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/internal/waitq"
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

// queueChanged tells the dispatcher and the fetch pump to look again when
// an applied command changed the queue (fsm.QueueEpoch): a lease, window or
// fence command that left it as it was wakes neither.
func (n *Node) queueChanged() {
	if e := n.fsm.QueueEpoch(); e != n.queueSeen.Swap(e) {
		n.dispatcher.Poke()
		n.fetchPump.Poke()
	}
}

// fetchQueue is the line of Fetch calls waiting on this leader, in
// arrival order (waitq: the FIFO the waiting acquires share). A waiter is
// claimed while the pump's fetch for it is in flight.
type fetchQueue = waitq.Queue[fetchWait, fetchOutcome]

// fetchWaiter is one waiting Fetch call.
type fetchWaiter = waitq.Waiter[fetchWait, fetchOutcome]

// fetchWait is what a waiting Fetch call waits for.
type fetchWait struct {
	cmd    *fsmv1.FetchJobs
	queues []string // deduplicated
}

type fetchOutcome struct {
	res *fsm.FetchResult
	err error
}

// waitingOn reports whether a caller waits for any of queues.
func waitingOn(q *fetchQueue, queues []string) bool {
	return q.Any(func(w fetchWait) bool {
		for _, a := range w.queues {
			for _, b := range queues {
				if a == b {
					return true
				}
			}
		}
		return false
	})
}

// fetchQueues are the queues a fetch waits on: its own, or the delivery
// lane (fsm.DeliveryLane) for a targeted fetch.
func fetchQueues(cmd *fsmv1.FetchJobs) []string {
	if cmd.GetTargeted() {
		return []string{fsm.DeliveryLane}
	}
	return dedupe(cmd.GetQueues())
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
	queues := fetchQueues(cmd)
	q := &ls.fetches
	if n.fsm.JobsReady(queues, ls.clock.calendarTime()) && (wait <= 0 || !waitingOn(q, queues)) {
		r, err := fetchResult(n.proposeAs(ctx, ls, cmd))
		if err != nil || len(r.Jobs) > 0 || wait <= 0 {
			return r, err
		}
	} else if wait <= 0 {
		return &fsm.FetchResult{}, nil
	}

	w := q.Push(fetchWait{cmd: cmd, queues: queues})
	n.fetchPump.Poke()
	n.metrics.fetchWaiters.Inc()
	defer n.metrics.fetchWaiters.Dec()
	timer := n.clock.NewTimer(wait)
	defer timer.Stop()
	select {
	case o := <-w.Done():
		return o.res, o.err
	case <-timer.C():
		return n.stopWaiting(ctx, w)
	case <-ctx.Done():
		if w.Abandon() == waitq.Delivered {
			o := <-w.Done()
			return o.res, o.err
		}
		return nil, ctx.Err()
	case <-ls.ctx.Done():
		w.Leave()
		if n.ctx.Err() != nil {
			return nil, ErrShutdown
		}
		return nil, n.notLeader()
	}
}

// stopWaiting ends a long poll whose wait is over: empty, unless a fetch
// for it is in flight, whose outcome it then waits for (its jobs are
// claimed for this worker).
func (n *Node) stopWaiting(ctx context.Context, w *fetchWaiter) (*fsm.FetchResult, error) {
	if w.Leave() == waitq.Removed {
		return &fsm.FetchResult{}, nil
	}
	select {
	case o := <-w.Done():
		return o.res, o.err
	case <-ctx.Done():
		w.Abandon()
		return nil, ctx.Err()
	}
}

// serveFetches proposes the fetches of the waiters pickWaiters picks, in
// arrival order, so they apply in that order: the fetch pump's work on
// leadership l (always this node's *leaderState).
func (n *Node) serveFetches(_ context.Context, l leader.Leadership) {
	ls := l.(*leaderState)
	for _, w := range n.pickWaiters(ls, nil) {
		wait, err := n.proposeStart(ls.ctx, ls, w.Value.cmd)
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
	if ls.fetches.Len() == 0 {
		return nil
	}
	cal := ls.clock.calendarTime()
	avail := map[string]uint64{}
	return ls.fetches.Claim(func(w fetchWait) bool {
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
		return have > 0
	})
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
	cal := ls.clock.calendarTime()
	var due map[string]uint64
	for _, j := range cmd.GetJobs() {
		if j.GetRunAtMs() <= cal {
			if due == nil {
				due = map[string]uint64{}
			}
			if n.fsm.QueuePaused(j.GetQueue()) {
				continue // nothing is handed out of a paused queue
			}
			if j.GetTarget() != nil {
				due[fsm.DeliveryLane]++
			} else {
				due[j.GetQueue()]++
			}
		}
	}
	var picked []*fetchWaiter
	if due != nil {
		picked = n.pickWaiters(ls, due)
	}
	bodies := []any{cmd}
	for _, w := range picked {
		bodies = append(bodies, w.Value.cmd)
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

// availableJobs is the number of available jobs in a queue (without a
// target), or in the delivery lane.
func (n *Node) availableJobs(queue string, cal int64) uint64 {
	if queue == fsm.DeliveryLane {
		return uint64(n.fsm.DeliveriesAvailable())
	}
	return n.fsm.Fetchable(queue, cal, math.MaxUint64) // what the queue's limits allow
}

// fetchDone takes the outcome of a waiter's fetch: jobs or an error end
// the wait; nothing leaves the waiter in line (unless it stopped waiting).
func (n *Node) fetchDone(ls *leaderState, w *fetchWaiter, r *fsm.FetchResult, err error) {
	if r == nil && err == nil {
		r = &fsm.FetchResult{}
	}
	if _, abandoned := w.Unclaim(fetchOutcome{res: r, err: err}, err != nil || len(r.Jobs) > 0); abandoned && r != nil && len(r.Jobs) > 0 {
		n.log.Warn("a long-polling fetch's caller left while its fetch was applied; its jobs return when their visibility timeout passes",
			"worker_id", w.Value.cmd.GetWorkerId(), "jobs", len(r.Jobs))
	}
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
