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

// cancelProbe is an SDK worker of one queue whose "long" handler waits for
// its context, and a client that submits and cancels its jobs.
type cancelProbe struct {
	t       *testing.T
	ctx     context.Context
	queue   string
	q       *queue.Client
	started chan probeRun
}

// probeRun is a handler that started.
type probeRun struct {
	id  uint64
	ctx context.Context
}

func startCancelProbe(t *testing.T, worker, submitter *client.Client, queueName string) *cancelProbe {
	t.Helper()
	p := &cancelProbe{t: t, ctx: ctxT(t), queue: queueName, q: queue.New(submitter), started: make(chan probeRun, 4)}
	w := queue.NewWorker(worker, queue.WithQueue(queueName, 4), queue.WithPollWait(time.Second))
	w.Handle("long", func(ctx context.Context, j *queue.Job) error {
		p.started <- probeRun{j.ID, ctx}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	return p
}

// submitAndStart submits a job with a visibility timeout of 30 s (a
// heartbeat every 10 s) and waits for its handler to start.
func (p *cancelProbe) submitAndStart() probeRun {
	p.t.Helper()
	sub, err := p.q.Submit(p.ctx, "long", nil, queue.Queue(p.queue), queue.VisibilityTimeout(30*time.Second))
	if err != nil {
		p.t.Fatal(err)
	}
	select {
	case r := <-p.started:
		if r.id != sub.GetId() {
			p.t.Fatalf("started job %d, submitted %d", r.id, sub.GetId())
		}
		return r
	case <-time.After(20 * time.Second):
		p.t.Fatalf("job %d not started", sub.GetId())
		return probeRun{}
	}
}

// cancelAndMeasure cancels r's job and checks that its handler's context
// is done within 1.5 s of the Cancel's send, cause ErrClaimLost wrapping
// client.ErrJobCancelled.
func (p *cancelProbe) cancelAndMeasure(r probeRun, what string) {
	p.t.Helper()
	sent := time.Now()
	if _, err := p.q.Cancel(p.ctx, r.id); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-r.ctx.Done():
	case <-time.After(15 * time.Second):
		p.t.Fatalf("%s: handler of job %d not cancelled", what, r.id)
	}
	lat := time.Since(sent)
	cause := context.Cause(r.ctx)
	if !errors.Is(cause, queue.ErrClaimLost) || !errors.Is(cause, client.ErrJobCancelled) {
		p.t.Fatalf("%s: cause %v", what, cause)
	}
	p.t.Logf("%s: cancel to handler context done: %s", what, lat.Round(time.Millisecond))
	if lat > 1500*time.Millisecond {
		p.t.Errorf("%s: cancel took %s to reach the handler (a heartbeat would take up to 10 s)", what, lat)
	}
}

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
	p := startCancelProbe(t, cl, cl, "it-cancel")
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
		r := p.submitAndStart()
		c.Stop(n)
		leader := c.WaitLeader()
		if _, err := p.q.Get(p.ctx, r.id); err != nil { // the client has found the leader
			t.Fatal(err)
		}
		if r.ctx.Err() != nil {
			t.Fatalf("%s: handler cancelled by the stop: %v", what, context.Cause(r.ctx))
		}
		p.cancelAndMeasure(r, fmt.Sprintf("%s %s stopped (leader %s)", what, n.ID, leader.ID))
	}

	first := watching()
	if first == c.WaitLeader() {
		t.Errorf("the watch is on the leader %s, not a follower", first.ID)
	}
	p.cancelAndMeasure(p.submitAndStart(), "steady, watch on "+first.ID)
	stopThenCancel(first, "the watch's node") // the stream breaks: it resumes on another node
	c.Restart(first)
	c.WaitConverged()
	stopThenCancel(c.WaitLeader(), "the leader")
}

// Under an ACL, a worker whose identity may only work its queue (ops
// [work], the documented worker rule) still hears of cancellations at once:
// a watch of queued jobs only is authorized by work.
func TestWorkerCancelUnderWorkOnlyACL(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, `
rules:
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
  - name: producer
    identities: [api]
    ops: [job, read]
    prefixes: [it-sec]
  - name: worker
    identities: [wrk]
    ops: [work]
    prefixes: [it-sec]
`)
	p := startCancelProbe(t, sdkAs(t, c, certs, "wrk"), sdkAs(t, c, certs, "api"), "it-sec")
	p.cancelAndMeasure(p.submitAndStart(), "work-only identity")
}
