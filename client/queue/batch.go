package queue

import (
	"context"
	"sync"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// batcher gathers the outcomes of attempts and sends them as Complete and
// Fail calls: at once when size are waiting, else interval after the first
// one. A claim stays held (heartbeaten) until its outcome is answered.
type batcher struct {
	w        *Worker
	size     int
	interval time.Duration

	mu        sync.Mutex
	completes []*claim
	fails     []failItem
	timer     clock.Timer
	armed     bool
	closed    bool
	inflight  sync.WaitGroup // Add only under mu, and not after close
}

type failItem struct {
	cl        *claim
	msg       string
	retryable bool
}

// addComplete queues cl's completion (with its job's result).
func (b *batcher) addComplete(cl *claim) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.completes = append(b.completes, cl)
	if len(b.completes) >= b.size {
		b.sendLocked(b.completes, nil)
		b.completes = nil
	}
	b.armLocked()
}

// addFail queues cl's failure.
func (b *batcher) addFail(cl *claim, msg string, retryable bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = append(b.fails, failItem{cl, coorderr.Truncate(msg, maxErrorText), retryable})
	if len(b.fails) >= b.size {
		b.sendLocked(nil, b.fails)
		b.fails = nil
	}
	b.armLocked()
}

// armLocked runs the flush timer while anything waits.
func (b *batcher) armLocked() {
	pending := len(b.completes)+len(b.fails) > 0
	switch {
	case pending && !b.armed && !b.closed:
		b.armed = true
		if b.timer == nil {
			b.timer = b.w.clk.AfterFunc(b.interval, b.flush)
		} else {
			b.timer.Reset(b.interval)
		}
	case !pending && b.armed:
		b.armed = false
		b.timer.Stop()
	}
}

// flush sends whatever waits.
func (b *batcher) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
	b.sendLocked(b.completes, b.fails)
	b.completes, b.fails = nil, nil
}

// close sends whatever waits and returns once every send has ended.
func (b *batcher) close() {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.armed = false
	b.sendLocked(b.completes, b.fails)
	b.completes, b.fails = nil, nil
	b.closed = true
	b.mu.Unlock()
	b.inflight.Wait()
}

func (b *batcher) sendLocked(cs []*claim, fs []failItem) {
	if b.closed {
		return
	}
	if len(cs) > 0 {
		b.inflight.Add(1)
		go b.sendCompletes(cs)
	}
	if len(fs) > 0 {
		b.inflight.Add(1)
		go b.sendFails(fs)
	}
}

// callContext bounds an outcome call: worth retrying (no leader, a lost
// connection) until the last local deadline of its claims, after which
// they are gone anyway.
func (b *batcher) callContext(cls []*claim) (context.Context, context.CancelFunc) {
	var last time.Time
	b.w.mu.Lock()
	for _, cl := range cls {
		if cl.deadline.At.After(last) {
			last = cl.deadline.At
		}
	}
	b.w.mu.Unlock()
	return context.WithTimeout(b.w.ctx, max(last.Sub(b.w.clk.Now()), time.Second))
}

func (b *batcher) sendCompletes(cs []*claim) {
	defer b.inflight.Done()
	req := &coordv1.QueueCompleteRequest{WorkerId: b.w.o.id, Completions: make([]*coordv1.JobCompletion, len(cs))}
	for i, cl := range cs {
		req.Completions[i] = &coordv1.JobCompletion{JobId: cl.ref.id, Attempt: cl.ref.attempt, Result: cl.job.result,
			Traceparent: cl.traceparent}
	}
	sendOutcomes(b, cs, func(ctx context.Context) ([]*coordv1.CompleteResult, error) {
		resp, err := b.w.q.Complete(ctx, req)
		return resp.GetResults(), err
	}, completeLog)
}

func (b *batcher) sendFails(fs []failItem) {
	defer b.inflight.Done()
	req := &coordv1.QueueFailRequest{WorkerId: b.w.o.id, Failures: make([]*coordv1.JobFailure, len(fs))}
	cls := make([]*claim, len(fs))
	for i, f := range fs {
		cls[i] = f.cl
		req.Failures[i] = &coordv1.JobFailure{JobId: f.cl.ref.id, Attempt: f.cl.ref.attempt, Error: f.msg, Retryable: f.retryable,
			Traceparent: f.cl.traceparent}
	}
	sendOutcomes(b, cls, func(ctx context.Context) ([]*coordv1.FailResult, error) {
		resp, err := b.w.q.Fail(ctx, req)
		return resp.GetResults(), err
	}, failLog)
}

// outcomeLog is what a worker logs of an outcome it sent that was not
// recorded: the call failed, its answer left the item out (not logged
// when unanswered is ""), or refused it.
type outcomeLog struct{ failed, unanswered, refused string }

var (
	completeLog = outcomeLog{
		failed:     "job completion not recorded: the job will run again",
		unanswered: "job completion not answered: the job may run again",
		refused:    "job completion refused: the job will run again",
	}
	failLog = outcomeLog{
		failed:  "job failure not recorded: the attempt will lapse",
		refused: "job failure refused",
	}
)

// sendOutcomes makes one outcome call (Complete or Fail, answered item by
// item in the order of cls) and ends the claims.
func sendOutcomes[R interface{ GetError() *coordv1.JobItemError }](b *batcher, cls []*claim, call func(context.Context) ([]R, error), log outcomeLog) {
	ctx, cancel := b.callContext(cls)
	defer cancel()
	res, err := call(ctx)
	for i, cl := range cls {
		b.w.finish(cl)
		switch {
		case err != nil:
			b.w.log.Warn(log.failed, "job_id", cl.ref.id, "attempt", cl.ref.attempt, "err", err)
		case i >= len(res):
			if log.unanswered != "" {
				b.w.log.Warn(log.unanswered, "job_id", cl.ref.id, "attempt", cl.ref.attempt)
			}
		case res[i].GetError() != nil:
			b.w.log.Warn(log.refused, "job_id", cl.ref.id, "attempt", cl.ref.attempt, "err", client.ItemError(res[i].GetError()))
		}
	}
}
