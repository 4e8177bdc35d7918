package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/internal/pbtime"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// max_run on a real cluster: an attempt that heartbeats every 200 ms ends
// at its start + max_run (1.5 s), with nothing else proposed; its next
// heartbeat, its completion and its fenced write are refused; the attempt
// says why and the job is retried after its backoff.
func TestQueueMaxRunEndsHeartbeatingAttempt(t *testing.T) {
	c := testcluster.New(t, 3)
	q := queueOf(c, c.WaitLeader())
	cc := c.Coord(c.Followers()[0])
	id := submitJobs(t, q, &coordv1.NewJob{Queue: "bounded", Kind: "k", VisibilityTimeout: pbtime.Dur(1000), MaxRun: pbtime.Dur(1500),
		BackoffInitial: pbtime.Dur(200), BackoffMax: pbtime.Dur(200)})[0].GetId()
	got := fetchJobs(t, q, "w", 1, 0, "bounded")
	if len(got) != 1 {
		t.Fatal("no job")
	}
	a := got[0].GetAttempt()
	if a.GetRunUntilMs() != a.GetStartedAtMs()+1500 {
		t.Fatalf("attempt %v: run_until is not start + 1.5 s", a)
	}
	var refused *coordv1.JobItemError
	for refused == nil {
		time.Sleep(200 * time.Millisecond) // the worker's heartbeat interval: the pace is the test
		hb, err := q.Heartbeat(ctxT(t), &coordv1.QueueHeartbeatRequest{WorkerId: "w", Attempts: []*coordv1.JobAttemptRef{{JobId: id, Attempt: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		r := hb.GetResults()[0]
		if refused = r.GetError(); refused == nil && r.GetDeadlineMs() > a.GetRunUntilMs() {
			t.Fatalf("a heartbeat moved the deadline past run_until: %v", r)
		}
		if time.Now().UnixMilli() > a.GetRunUntilMs()+5000 {
			t.Fatal("heartbeats still accepted 5 s after run_until")
		}
	}
	if late := time.Now().UnixMilli() - a.GetRunUntilMs(); refused.GetReason() != "ATTEMPT_EXPIRED" || !strings.Contains(refused.GetMessage(), "max_run") || late > 2000 {
		t.Fatalf("heartbeat refused %d ms after run_until with %v", late, refused)
	}
	if r := completeJob(t, q, "w", id, 1); r.GetError().GetReason() != "ATTEMPT_EXPIRED" {
		t.Fatalf("late completion: %v", r)
	}
	_, err := cc.FencedCommit(ctxT(t), &coordv1.FencedCommitRequest{Resource: "bounded/1", Token: a.GetToken(), Payload: []byte("late")})
	wantErr(t, err, codes.FailedPrecondition, "ATTEMPT_EXPIRED")
	j := getJob(t, q, id)
	first := j.GetAttemptLog()[0]
	if first.GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED || first.GetFinishedAtMs() != a.GetRunUntilMs() ||
		!strings.Contains(first.GetError(), "max_run exceeded") {
		t.Fatalf("attempt 1: %v", first)
	}
	c.Eventually("the job is retried", 10*time.Second, func() bool {
		return len(fetchJobs(t, q, "w2", 1, 0, "bounded")) == 1
	})
}

// The Go Worker ends a handler that ignores nothing but its context at
// max_run, with ErrMaxRunExceeded, long before its first heartbeat
// (visibility timeout 30 s), and the server ends the attempt.
func TestWorkerMaxRunCancelsHandler(t *testing.T) {
	c := testcluster.New(t, 3)
	cl := newClient(t, c, "ops")
	qc := queue.New(cl)
	started := make(chan context.Context, 1)
	w := queue.NewWorker(cl, queue.WithQueue("bounded-w", 1), queue.WithPollWait(time.Second))
	w.Handle("long", func(ctx context.Context, j *queue.Job) error {
		started <- ctx
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
	sub, err := qc.Submit(ctxT(t), "long", nil, queue.Queue("bounded-w"), queue.VisibilityTimeout(30*time.Second), queue.MaxRun(2*time.Second), queue.MaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	select {
	case ctx = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("handler not started")
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled 10 s after start (max_run 2 s)")
	}
	took := time.Since(t0)
	if cause := context.Cause(ctx); !errors.Is(cause, queue.ErrMaxRunExceeded) || took > 2500*time.Millisecond {
		t.Fatalf("cancelled after %s with %v", took, cause)
	}
	t.Logf("handler cancelled %s after it started (max_run 2 s)", took.Round(time.Millisecond))
	c.Eventually("the server ended the attempt", 10*time.Second, func() bool {
		j, err := qc.Get(ctxT(t), sub.GetId())
		return err == nil && j.GetState() == coordv1.JobState_JOB_STATE_DEAD
	})
}
