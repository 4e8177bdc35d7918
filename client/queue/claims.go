package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/internal/due"
	"github.com/coordd/coordd/clock"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// claim is a running attempt held by the worker: its heartbeat schedule
// and local deadline, the handler's context. Fields after cancel are
// guarded by Worker.mu.
type claim struct {
	w      *Worker
	ref    ref
	job    *Job
	slots  *slots
	vt     time.Duration
	margin time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc

	state claimState
	// traceparent is the attempt's span (set before its outcome is
	// queued), the parent of the server's span of the outcome; "": none.
	traceparent string
	deadline    due.Deadline // local: send time of the last acknowledged heartbeat (or the fetch) + vt - margin
	nextHB      time.Time
	runEnd      time.Time // max_run: the local deadline never passes it (zero: no bound)
	due.Slot              // in Worker.due; not while a heartbeat is in flight or after the claim ended
	gone        bool

	notifyMu   sync.Mutex      // serializes onDeadline calls, so that they come in order
	onDeadline func(time.Time) // Job.OnDeadline; guarded by Worker.mu
}

type claimState int

const (
	stateRunning    claimState = iota // the handler runs
	stateReporting                    // the handler returned; its outcome is queued or being sent
	stateHandedBack                   // Stop failed it as "worker shutdown"
	stateLost                         // refused or past its local deadline
)

func (cl *claim) localDeadline() time.Time {
	cl.w.mu.Lock()
	defer cl.w.mu.Unlock()
	return cl.deadline.At
}

// Due is when cl's next heartbeat is: Worker.due orders claims by it.
func (cl *claim) Due() time.Time { return cl.nextHB }

// pushLocked schedules cl's next heartbeat at cl.nextHB.
func (w *Worker) pushLocked(cl *claim) {
	if cl.gone || cl.Queued() {
		return
	}
	w.due.Push(cl)
	if w.due.Peek() == cl {
		select {
		case w.hbWake <- struct{}{}:
		default:
		}
	}
}

// forgetLocked ends the worker's hold of cl: no more heartbeats, no local
// deadline.
func (w *Worker) forgetLocked(cl *claim) {
	if cl.gone {
		return
	}
	cl.gone = true
	w.due.Remove(cl)
	cl.deadline.Timer.Stop()
	delete(w.claims, cl.ref)
}

// lose ends cl because its claim is gone (cause wraps ErrClaimLost) and
// cancels its handler's context.
func (w *Worker) lose(cl *claim, cause error) {
	w.mu.Lock()
	if cl.gone || cl.state == stateLost {
		w.mu.Unlock()
		return
	}
	was := cl.state
	cl.state = stateLost
	w.forgetLocked(cl)
	w.mu.Unlock()
	cl.cancel(cause)
	if was == stateRunning {
		w.log.Warn("job claim lost", "job_id", cl.ref.id, "attempt", cl.ref.attempt, "err", cause)
	}
}

// finish ends cl once its outcome was recorded or refused.
func (w *Worker) finish(cl *claim) {
	w.mu.Lock()
	w.forgetLocked(cl)
	w.mu.Unlock()
}

func (w *Worker) deadlinePassed(cl *claim) {
	w.mu.Lock()
	d, gone := cl.deadline.At, cl.gone
	w.mu.Unlock()
	if gone {
		return
	}
	if now := w.clk.Now(); now.Before(d) { // moved by an acknowledgement meanwhile
		return
	}
	if !cl.runEnd.IsZero() && !d.Before(cl.runEnd) {
		w.lose(cl, fmt.Errorf("%w: job %d attempt %d: %w: the attempt ends at %s", ErrClaimLost, cl.ref.id, cl.ref.attempt,
			ErrMaxRunExceeded, d.Format(time.RFC3339Nano)))
		return
	}
	w.lose(cl, fmt.Errorf("%w: job %d attempt %d: no heartbeat acknowledged before the local deadline %s",
		ErrClaimLost, cl.ref.id, cl.ref.attempt, d.Format(time.RFC3339Nano)))
}

// bounded caps a local deadline at the attempt's max_run.
func (cl *claim) bounded(at time.Time) time.Time {
	if !cl.runEnd.IsZero() && cl.runEnd.Before(at) {
		return cl.runEnd
	}
	return at
}

// ErrMaxRunExceeded is wrapped in the cause of a handler's context
// cancelled because the attempt reached its max_run (the server ends it
// then, heartbeats or not).
var ErrMaxRunExceeded = errors.New("max_run exceeded")

// acked records the heartbeats of cls sent at sent and acknowledged: each
// local deadline moves to sent + vt - margin (the server extended the claim
// to at least sent + vt), the next heartbeat is due at sent + vt/3. One
// call's claims are queued again under one lock, so the heartbeat loop
// never sees part of a batch: what went out together stays together.
func (w *Worker) acked(cls []*claim, sent time.Time) {
	w.mu.Lock()
	live := cls[:0:0]
	for _, cl := range cls {
		if cl.gone {
			continue
		}
		cl.deadline.Extend(cl.bounded(sent.Add(cl.vt - cl.margin)))
		cl.nextHB = sent.Add(cl.vt / 3)
		w.pushLocked(cl)
		live = append(live, cl)
	}
	w.mu.Unlock()
	for _, cl := range live {
		cl.notifyDeadline()
	}
}

// notifyDeadline calls the job's OnDeadline function with the current
// local deadline.
func (cl *claim) notifyDeadline() {
	cl.notifyMu.Lock()
	defer cl.notifyMu.Unlock()
	cl.w.mu.Lock()
	f, at := cl.onDeadline, cl.deadline.At
	cl.w.mu.Unlock()
	if f != nil {
		f(at)
	}
}

// retryHeartbeat schedules cl's heartbeat again soon after a call that
// failed as a whole; its local deadline runs on meanwhile.
func (w *Worker) retryHeartbeat(cl *claim) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cl.nextHB = w.clk.Now().Add(min(cl.vt/10, 250*time.Millisecond))
	w.pushLocked(cl)
}

// heartbeatSlack: a claim due this soon after the earliest goes with it, so
// heartbeats due at about the same time share a call (and a log entry).
func heartbeatSlack(vt time.Duration) time.Duration { return min(vt/60, 50*time.Millisecond) }

// heartbeats sends every claim's heartbeat at its due time, those due
// together in one call (up to MaxBatch attempts each), until the worker
// ends.
func (w *Worker) heartbeats() {
	defer w.background.Done()
	timer := w.clk.NewTimer(time.Hour)
	timer.Stop()
	for {
		now := w.clk.Now()
		var batch []*claim
		var next time.Time
		w.mu.Lock()
		for w.due.Len() > 0 && !w.due.Peek().nextHB.After(now.Add(heartbeatSlack(w.due.Peek().vt))) {
			batch = append(batch, w.due.Pop())
		}
		if w.due.Len() > 0 {
			next = w.due.Peek().nextHB
		}
		w.mu.Unlock()
		for len(batch) > 0 {
			n := min(len(batch), MaxBatch)
			go w.sendHeartbeats(batch[:n], now)
			batch = batch[n:]
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			if !next.After(w.clk.Now()) {
				continue
			}
			clock.ResetAt(w.clk, timer, next)
			fire = timer.C()
		}
		select {
		case <-fire:
		case <-w.hbWake:
			timer.Stop()
		case <-w.ctx.Done():
			timer.Stop()
			return
		}
	}
}

// sendHeartbeats sends one Heartbeat call for batch, sent at sent.
func (w *Worker) sendHeartbeats(batch []*claim, sent time.Time) {
	refs := make([]*coordv1.JobAttemptRef, len(batch))
	var last time.Time
	w.mu.Lock()
	for i, cl := range batch {
		refs[i] = &coordv1.JobAttemptRef{JobId: cl.ref.id, Attempt: cl.ref.attempt}
		if cl.deadline.At.After(last) {
			last = cl.deadline.At
		}
	}
	w.mu.Unlock()
	// Worth retrying (no leader, a lost connection) until the last of the
	// local deadlines: after it every claim of the batch is gone anyway.
	ctx, cancel := context.WithTimeout(w.ctx, max(last.Sub(w.clk.Now()), time.Second))
	defer cancel()
	resp, err := w.q.Heartbeat(ctx, &coordv1.QueueHeartbeatRequest{WorkerId: w.o.id, Attempts: refs})
	if w.ctx.Err() != nil {
		return
	}
	if err != nil {
		if refused(err) {
			for _, cl := range batch {
				w.lose(cl, fmt.Errorf("%w: job %d attempt %d: heartbeat refused: %w", ErrClaimLost, cl.ref.id, cl.ref.attempt, err))
			}
			return
		}
		w.log.Warn("job heartbeat failed", "attempts", len(batch), "err", err)
		for _, cl := range batch {
			w.retryHeartbeat(cl)
		}
		return
	}
	res := resp.GetResults()
	var ok []*claim
	for i, cl := range batch {
		if i >= len(res) || res[i].GetJobId() != cl.ref.id || res[i].GetAttempt() != cl.ref.attempt {
			w.retryHeartbeat(cl)
			continue
		}
		if e := res[i].GetError(); e != nil {
			w.lose(cl, fmt.Errorf("%w: job %d attempt %d: heartbeat refused: %w", ErrClaimLost, cl.ref.id, cl.ref.attempt, client.ItemError(e)))
			continue
		}
		ok = append(ok, cl)
	}
	w.acked(ok, sent)
}

// refused reports whether a whole call was refused in a way a repeat
// cannot fix (bad input, permission), as opposed to not answered.
func refused(err error) bool {
	return errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrPermissionDenied) ||
		errors.Is(err, client.ErrUnauthenticated)
}
