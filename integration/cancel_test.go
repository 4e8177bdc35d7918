package integration

import (
	"context"
	"errors"
	"fmt"
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
// with ErrClaimLost wrapping client.ErrJobCancelled. The watch is served
// by a follower; the same holds after the node serving it is stopped (the
// stream breaks and resumes on another node) and after the leader is
// stopped: each job was fetched before the stop and is cancelled through
// the leader after it.
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

	// watching is the node that serves the worker's one watch.
	watching := func() *testcluster.Node {
		t.Helper()
		var on *testcluster.Node
		c.Eventually("the worker's watch on one node", 10*time.Second, func() bool {
			on = nil
			n := 0
			for _, nd := range c.Running() {
				if k := nd.Node.Watchers(); k > 0 {
					on, n = nd, n+k
				}
			}
			return n == 1
		})
		return on
	}
	// stopThenCancel stops node n while a job runs, then cancels the job
	// through the leader the client finds.
	stopThenCancel := func(n *testcluster.Node, what string) {
		t.Helper()
		r := submitAndStart()
		c.Stop(n)
		leader := c.WaitLeader()
		if _, err := q.Get(ctx, r.id); err != nil { // the client has found the leader
			t.Fatal(err)
		}
		if r.ctx.Err() != nil {
			t.Fatalf("%s: handler cancelled by the stop: %v", what, context.Cause(r.ctx))
		}
		cancelAndMeasure(r, fmt.Sprintf("%s %s stopped (leader %s)", what, n.ID, leader.ID))
	}

	first := watching()
	if first == c.WaitLeader() {
		t.Errorf("the watch is on the leader %s, not a follower", first.ID)
	}
	cancelAndMeasure(submitAndStart(), "steady, watch on "+first.ID)
	stopThenCancel(first, "the watch's node") // the stream breaks: it resumes on another node
	c.Restart(first)
	c.WaitConverged()
	stopThenCancel(c.WaitLeader(), "the leader")
}
