package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/internal/testcluster"
)

// A Cancel reaches the running handler of an SDK Worker within about a
// second, not at its next heartbeat: with a visibility timeout of 30 s the
// heartbeat would come 10 s after the fetch, and the handler's context is
// done within 1.5 s of the Cancel's send (the worker's cancellation watch),
// with ErrClaimLost wrapping client.ErrJobCancelled. Again after the
// leader is stopped (the watch resumes on another node): the second job
// was fetched before the kill and is cancelled through the new leader.
func TestWorkerCancelReachesHandlerPromptly(t *testing.T) {
	c := testcluster.New(t, 3)
	cl := newClient(t, c, "ops")
	ctx := ctxT(t)
	type run struct {
		id   uint64
		done <-chan struct{}
		ctx  context.Context
	}
	started := make(chan run, 4)
	w := queue.NewWorker(cl, queue.WithQueue("it-cancel", 4), queue.WithPollWait(time.Second))
	w.Handle("long", func(ctx context.Context, j *queue.Job) error {
		started <- run{j.ID, ctx.Done(), ctx}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	q := queue.New(cl)
	submitAndStart := func() run {
		t.Helper()
		sub, err := q.Submit(ctx, "long", nil, queue.Queue("it-cancel"), queue.VisibilityTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-started:
			if r.id != sub.GetId() {
				t.Fatalf("started job %d, submitted %d", r.id, sub.GetId())
			}
			return r
		case <-time.After(20 * time.Second):
			t.Fatalf("job %d not started", sub.GetId())
			return run{}
		}
	}
	cancelAndMeasure := func(r run, what string) time.Duration {
		t.Helper()
		sent := time.Now()
		if _, err := q.Cancel(ctx, r.id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: handler of job %d not cancelled", what, r.id)
		}
		lat := time.Since(sent)
		cause := context.Cause(r.ctx)
		if !errors.Is(cause, queue.ErrClaimLost) || !errors.Is(cause, client.ErrJobCancelled) {
			t.Fatalf("%s: cause %v", what, cause)
		}
		t.Logf("%s: cancel to handler context done: %s", what, lat.Round(time.Millisecond))
		if lat > 1500*time.Millisecond {
			t.Errorf("%s: cancel took %s to reach the handler (a heartbeat would take up to 10 s)", what, lat)
		}
		return lat
	}

	cancelAndMeasure(submitAndStart(), "steady")

	second := submitAndStart()
	old := c.WaitLeader()
	c.Stop(old)
	leader := c.WaitLeader()
	if _, err := q.Get(ctx, second.id); err != nil { // the client has found the new leader
		t.Fatal(err)
	}
	if second.ctx.Err() != nil {
		t.Fatalf("handler cancelled by the leader change: %v", context.Cause(second.ctx))
	}
	cancelAndMeasure(second, "after stopping leader "+old.ID+" (now "+leader.ID+")")
}
