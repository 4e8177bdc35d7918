package queue

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// watchStartWait bounds how long a queue's first Fetch waits for its
// cancellation watch to start (a cluster that does not answer the watch
// does not hold the worker up).
const watchStartWait = time.Second

// watchCancels keeps one watch per queue on the jobs cancelled during an
// attempt handed to this worker (the server sends nothing else: the
// filter job_states CANCELLED and job_worker_id), and ends those claims at
// once: a Cancel reaches the handler's context within about a second
// instead of at the next heartbeat (VT/3). Any node serves the watch and
// it resumes where it stopped when its stream breaks, so a leader change
// loses nothing; when it cannot go on (refused, or away so long that no
// node holds what it missed), the heartbeats still end those claims, which
// the server answers with JOB_CANCELLED. s.watching closes once the watch
// has started or given up.
func (w *Worker) watchCancels(s *slots) {
	defer w.background.Done()
	started := sync.OnceFunc(func() { close(s.watching) })
	defer started()
	for {
		wr := w.c.Watch(w.ctx, s.name+"/", 0, client.WatchFamilies(coordv1.WatchFamily_WATCH_FAMILY_QUEUE_JOB),
			client.WatchJobs(w.o.id, coordv1.JobState_JOB_STATE_CANCELLED), client.WatchOnFollower())
		for resp := range wr.Responses() {
			started()
			for _, e := range resp.Events {
				w.cancelled(s.name, e.GetQueueJob())
			}
		}
		err := wr.Err()
		if w.ctx.Err() != nil {
			return
		}
		started()
		if !errors.Is(err, client.ErrWatchCompacted) {
			w.log.Warn("job cancellation watch ended: cancellations reach handlers at their next heartbeat",
				"queue", s.name, "err", err)
			return
		}
		// Away longer than the nodes' rings reach: what was cancelled
		// meanwhile ends at its next heartbeat; watch again from now.
		w.log.Info("job cancellation watch restarts from now", "queue", s.name, "err", err)
	}
}

// cancelled ends the claim on the attempt of j (a job of queue) that a
// cancellation ended, if this worker holds it. The watch filters on the
// server; this checks again (a server before the filter sends every job
// change of the queue).
func (w *Worker) cancelled(queue string, j *coordv1.QueueJob) {
	log := j.GetAttemptLog()
	if j.GetQueue() != queue || j.GetState() != coordv1.JobState_JOB_STATE_CANCELLED || len(log) == 0 {
		return
	}
	a := log[len(log)-1]
	if a.GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED || a.GetWorkerId() != w.o.id {
		return
	}
	w.mu.Lock()
	cl := w.claims[ref{j.GetId(), a.GetNumber()}]
	w.mu.Unlock()
	if cl != nil {
		w.lose(cl, fmt.Errorf("%w: job %d attempt %d: %w (%s)", ErrClaimLost, j.GetId(), a.GetNumber(), client.ErrJobCancelled, a.GetError()))
	}
}

// awaitWatch holds a queue's first Fetch until its cancellation watch has
// started (at most watchStartWait), so that every attempt fetched is
// watched from before it was handed out; false when Stop began.
func (w *Worker) awaitWatch(s *slots) bool {
	t := w.clk.NewTimer(watchStartWait)
	defer t.Stop()
	select {
	case <-s.watching:
	case <-t.C():
	case <-w.fetchCtx.Done():
		return false
	}
	return true
}
