package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// started is what a blocking test handler reports.
type started struct {
	j   *Job
	ctx context.Context
}

// blocking returns a handler that reports its start and returns when
// release is closed or its context ends.
func blocking(ch chan<- started, release <-chan struct{}) Handler {
	return func(ctx context.Context, j *Job) error {
		ch <- started{j, ctx}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// startBlocking starts a worker whose kind "k" handler blocks until its
// context ends, reporting each start on ch and each return on returned.
func (h *harness) startBlocking() (w *Worker, ch chan started, returned chan error) {
	h.t.Helper()
	ch, returned = make(chan started, 10), make(chan error, 10)
	w = h.worker()
	w.Handle("k", func(ctx context.Context, j *Job) error {
		err := blocking(ch, nil)(ctx, j)
		returned <- err
		return err
	})
	if err := w.Start(); err != nil {
		h.t.Fatal(err)
	}
	return w, ch, returned
}

// Heartbeats go out at a third of the visibility timeout after the last
// send, the attempts due together in one call; an acknowledgement moves
// the local deadline to send time + VT - margin. One Fetch asks for all
// free slots.
func TestHeartbeatScheduleBatched(t *testing.T) {
	h := newHarness(t)
	h.f.add("default", "k", nil, 30*time.Second)
	h.f.add("default", "k", nil, 30*time.Second)
	ch := make(chan started, 10)
	w := h.worker(WithQueue("default", 4))
	w.Handle("k", blocking(ch, nil))
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	if f := recv(t, h.f.fetched, "fetch"); f.GetMax() != 4 || f.GetWorkerId() != "w1" || f.GetWaitMs() != 5_000 {
		t.Fatalf("first fetch %v", f)
	}
	a, b := recv(t, ch, "start"), recv(t, ch, "start")
	if f := recv(t, h.f.fetched, "second fetch"); f.GetMax() != 2 {
		t.Fatalf("second fetch %v: want max 2 (the free slots)", f)
	}
	// Margin: 30 s / 10 = 3 s, clamped to 2 s.
	if d := a.j.Deadline(); !d.Equal(h.at(28 * time.Second)) {
		t.Fatalf("initial local deadline t0+%s", d.Sub(h.t0))
	}
	if a.j.ID > b.j.ID {
		a, b = b, a
	}
	if a.j.Token() != "job:1:1" || b.j.Token() != "job:2:1" {
		t.Fatalf("tokens %s %s", a.j.Token(), b.j.Token())
	}
	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second} {
		h.advanceTo(h.at(want))
		hb := recv(t, h.f.heartbeats, "heartbeat")
		if !hb.at.Equal(h.at(want)) || len(hb.req.GetAttempts()) != 2 || hb.req.GetWorkerId() != "w1" {
			t.Fatalf("heartbeat %d at t0+%s: %v", i, hb.at.Sub(h.t0), hb.req)
		}
		// The acknowledgement re-arms the local deadline at send + 28 s.
		if !h.clk.WaitArmed(h.at(want+28*time.Second), 5*time.Second) {
			t.Fatalf("deadline not moved to t0+%s", want+28*time.Second)
		}
		if d := a.j.Deadline(); !d.Equal(h.at(want + 28*time.Second)) {
			t.Fatalf("deadline t0+%s after heartbeat %d", d.Sub(h.t0), i)
		}
	}
	if a.ctx.Err() != nil || b.ctx.Err() != nil {
		t.Fatal("handler cancelled while heartbeats were acknowledged")
	}
}

// A refused heartbeat ends the claim at once: the handler's context is
// cancelled with ErrClaimLost wrapping the server's reason, and nothing is
// reported for the attempt (the server would refuse it).
func TestRefusedHeartbeatCancelsHandler(t *testing.T) {
	h := newHarness(t)
	h.f.onHeartbeat = func(_ context.Context, r *coordv1.QueueHeartbeatRequest) (*coordv1.QueueHeartbeatResponse, error) {
		a := r.GetAttempts()[0]
		return &coordv1.QueueHeartbeatResponse{Results: []*coordv1.HeartbeatResult{{JobId: a.GetJobId(), Attempt: a.GetAttempt(),
			Error: &coordv1.JobItemError{Reason: "JOB_CANCELLED", Message: "job 1 was cancelled", Metadata: map[string]string{"job_id": "1"}}}}}, nil
	}
	h.f.add("default", "k", nil, 3*time.Second)
	w, ch, returned := h.startBlocking()
	s := recv(t, ch, "start")
	h.advanceTo(h.at(time.Second))
	recv(t, h.f.heartbeats, "heartbeat")
	err := recv(t, returned, "handler return")
	if !errors.Is(err, ErrClaimLost) || !errors.Is(err, client.ErrJobCancelled) || !strings.Contains(err.Error(), "job 1 was cancelled") {
		t.Fatalf("cause %v", err)
	}
	if s.ctx.Err() == nil || !h.clk.Now().Equal(h.at(time.Second)) {
		t.Fatal("context not cancelled at the refusal")
	}
	_ = w.Stop(context.Background())
	if len(h.f.failed)+len(h.f.completed) != 0 {
		t.Fatalf("outcome sent for a lost attempt: %v %v", h.f.failed, h.f.completed)
	}
}

// Without acknowledged heartbeats the claim ends at its local deadline,
// fetch send time + VT - margin: the handler's context is cancelled
// before the server's deadline (fetch time + VT), so before the job can be
// handed to anyone else.
func TestLocalDeadlineBeforeServerDeadline(t *testing.T) {
	h := newHarness(t)
	h.f.onHeartbeat = func(ctx context.Context, _ *coordv1.QueueHeartbeatRequest) (*coordv1.QueueHeartbeatResponse, error) {
		<-ctx.Done() // the network ate it
		return nil, ctx.Err()
	}
	id := h.f.add("default", "k", nil, 3*time.Second) // margin 300 ms
	ch := make(chan started, 1)
	w := h.worker()
	w.Handle("k", blocking(ch, nil))
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	s := recv(t, ch, "start")
	h.advanceTo(h.at(time.Second))
	recv(t, h.f.heartbeats, "heartbeat")
	local := h.at(2700 * time.Millisecond)
	if !h.clk.WaitArmed(local, 5*time.Second) {
		t.Fatal("no local deadline armed at t0+2.7s")
	}
	h.clk.Advance(local.Add(-time.Millisecond).Sub(h.clk.Now()))
	if s.ctx.Err() != nil {
		t.Fatalf("cancelled before the local deadline: %v", context.Cause(s.ctx))
	}
	h.clk.Advance(time.Millisecond)
	if s.ctx.Err() == nil {
		t.Fatal("not cancelled at the local deadline")
	}
	cause := context.Cause(s.ctx)
	if !errors.Is(cause, ErrClaimLost) || !strings.Contains(cause.Error(), "local deadline") {
		t.Fatalf("cause %v", cause)
	}
	if server := h.f.deadline(id, 1); !h.clk.Now().Before(server) || server.Sub(h.clk.Now()) != 300*time.Millisecond {
		t.Fatalf("cancelled at t0+%s, server deadline t0+%s", h.clk.Now().Sub(h.t0), server.Sub(h.t0))
	}
}

// Outcomes are sent in batches: at once when the batch is full, else a
// flush interval after the first; one Fetch asks for every free slot.
func TestOutcomesBatched(t *testing.T) {
	h := newHarness(t)
	for range 25 {
		h.f.add("default", "k", nil, 30*time.Second)
	}
	w := h.worker(WithQueue("default", 25), WithBatching(10, 5*time.Millisecond))
	var ran atomic.Int32
	w.Handle("k", func(context.Context, *Job) error { ran.Add(1); return nil })
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	if f := recv(t, h.f.fetched, "fetch"); f.GetMax() != 25 {
		t.Fatalf("fetch max %d, want 25", f.GetMax())
	}
	a, b := recv(t, h.f.completes, "completion batch"), recv(t, h.f.completes, "completion batch")
	if len(a.GetCompletions()) != 10 || len(b.GetCompletions()) != 10 {
		t.Fatalf("full batches of %d and %d", len(a.GetCompletions()), len(b.GetCompletions()))
	}
	waitUntil(t, "the other 5 outcomes queued", func() bool {
		w.out.mu.Lock()
		defer w.out.mu.Unlock()
		return len(w.out.completes) == 5
	})
	h.advanceTo(h.at(5 * time.Millisecond))
	c := recv(t, h.f.completes, "last completion batch")
	seen := map[uint64]bool{}
	for _, r := range []*coordv1.QueueCompleteRequest{a, b, c} {
		for _, x := range r.GetCompletions() {
			if x.GetAttempt() != 1 || seen[x.GetJobId()] {
				t.Fatalf("completion %v", x)
			}
			seen[x.GetJobId()] = true
		}
	}
	if len(c.GetCompletions()) != 5 || len(seen) != 25 || ran.Load() != 25 {
		t.Fatalf("last batch %d, %d distinct, %d ran", len(c.GetCompletions()), len(seen), ran.Load())
	}
	// Completed claims are no longer heartbeaten.
	waitUntil(t, "claims released", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.claims) == 0 && w.due.Len() == 0
	})
}

// A panic fails the attempt (retryable) with the panic value and the
// stack; a Permanent error fails it for good; other errors are retryable;
// a kind without a handler fails retryably; args that do not decode into
// HandleJSON's type fail permanently.
func TestHandlerOutcomes(t *testing.T) {
	h := newHarness(t)
	type args struct {
		N int `json:"n"`
	}
	got := make(chan args, 1)
	w := h.worker(WithQueue("default", 1))
	w.Handle("panics", func(context.Context, *Job) error { panic("boom") })
	w.Handle("permanent", func(context.Context, *Job) error { return Permanent(errors.New("no such customer")) })
	w.Handle("flaky", func(context.Context, *Job) error { return errors.New("timeout talking to smtp") })
	HandleJSON(w, "typed", func(_ context.Context, _ *Job, a args) error { got <- a; return nil })
	w.Handle("text-result", func(_ context.Context, j *Job) error { j.SetResult([]byte("charged 100")); return nil })
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind, args string
		retryable  bool
		contains   []string
	}{
		{"panics", "", true, []string{"panic: boom", "goroutine ", "client/queue.TestHandlerOutcomes"}},
		{"permanent", "", false, []string{"no such customer"}},
		{"flaky", "", true, []string{"timeout talking to smtp"}},
		{"unknown", "", true, []string{`no handler for kind "unknown" on worker w1`}},
		{"typed", `{"n": "x"}`, false, []string{"args of typed job"}},
		// A result that is not JSON fails its own attempt, saying why,
		// rather than getting a batch of completions refused.
		{"text-result", "", false, []string{"the result is not JSON"}},
	} {
		id := h.f.add("default", tc.kind, []byte(tc.args), 30*time.Second)
		f := recv(t, h.f.fails, tc.kind+" failure").GetFailures()
		if len(f) != 1 || f[0].GetJobId() != id || f[0].GetRetryable() != tc.retryable {
			t.Fatalf("%s: %v", tc.kind, f)
		}
		for _, s := range tc.contains {
			if !strings.Contains(f[0].GetError(), s) {
				t.Fatalf("%s: error %q lacks %q", tc.kind, f[0].GetError(), s)
			}
		}
		if len(f[0].GetError()) > maxErrorText {
			t.Fatalf("%s: error of %d bytes", tc.kind, len(f[0].GetError()))
		}
	}
	id := h.f.add("default", "typed", []byte(`{"n": 7}`), 30*time.Second)
	if a := recv(t, got, "typed args"); a.N != 7 {
		t.Fatalf("args %+v", a)
	}
	if c := recv(t, h.f.completes, "typed completion").GetCompletions(); c[0].GetJobId() != id {
		t.Fatalf("completion %v", c)
	}
}

// Stop stops fetching at once, lets a running handler finish and records
// its outcome; when Stop's context ends, the attempts still running are
// handed back (failed, retryable, "worker shutdown") and their contexts
// cancelled with ErrWorkerShutdown.
func TestGracefulStop(t *testing.T) {
	h := newHarness(t)
	idA := h.f.add("default", "k", nil, 30*time.Second)
	idB := h.f.add("default", "k", nil, 30*time.Second)
	ch := make(chan started, 2)
	releaseA := make(chan struct{})
	w := h.worker(WithQueue("default", 3))
	w.Handle("k", func(ctx context.Context, j *Job) error {
		if j.ID == idA {
			return blocking(ch, releaseA)(ctx, j)
		}
		return blocking(ch, nil)(ctx, j) // B returns only when its context ends
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "start")
	recv(t, ch, "start")
	var b started
	recv(t, h.f.fetched, "fetch")
	recv(t, h.f.fetched, "fetch for the last slot")
	stopCtx, giveUp := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(stopCtx) }()
	if err := recv(t, h.f.fetchEnded, "long poll cancelled"); !errors.Is(err, context.Canceled) {
		t.Fatalf("fetch ended with %v", err)
	}
	close(releaseA)
	if c := recv(t, h.f.completes, "A's completion").GetCompletions(); len(c) != 1 || c[0].GetJobId() != idA {
		t.Fatalf("completion %v", c)
	}
	w.mu.Lock()
	for _, cl := range w.claims {
		if cl.ref.id == idB {
			b = started{cl.job, cl.ctx}
		}
	}
	w.mu.Unlock()
	giveUp()
	err := recv(t, stopped, "Stop")
	if !errors.Is(err, ErrWorkerShutdown) || !strings.Contains(err.Error(), "1 running attempts handed back") {
		t.Fatalf("Stop: %v", err)
	}
	f := recv(t, h.f.fails, "B handed back").GetFailures()
	if len(f) != 1 || f[0].GetJobId() != idB || !f[0].GetRetryable() || f[0].GetError() != "worker shutdown" {
		t.Fatalf("hand-back %v", f)
	}
	if b.ctx == nil || !errors.Is(context.Cause(b.ctx), ErrWorkerShutdown) {
		t.Fatalf("B's context: %v", b.ctx)
	}
	if n := len(h.f.fetched); n != 0 {
		t.Fatalf("%d fetches after Stop began", n)
	}
	if err := w.Stop(context.Background()); !errors.Is(err, ErrWorkerShutdown) {
		t.Fatalf("second Stop: %v", err)
	}
	if err := w.Start(); err == nil {
		t.Fatal("Start after Stop")
	}
}

// At most concurrency handlers of a queue run at once; each Fetch asks
// for the slots that are free.
func TestConcurrencyLimit(t *testing.T) {
	h := newHarness(t)
	for range 5 {
		h.f.add("q", "k", nil, 30*time.Second)
	}
	ch := make(chan started, 5)
	var running, most atomic.Int32
	release := map[uint64]chan struct{}{}
	var mu sync.Mutex
	for id := uint64(1); id <= 5; id++ {
		release[id] = make(chan struct{})
	}
	w := h.worker(WithQueue("q", 2))
	w.Handle("k", func(ctx context.Context, j *Job) error {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		defer running.Add(-1)
		mu.Lock()
		r := release[j.ID]
		mu.Unlock()
		return blocking(ch, r)(ctx, j)
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var maxes []uint32
	maxes = append(maxes, recv(t, h.f.fetched, "fetch").GetMax())
	var ids []uint64
	ids = append(ids, recv(t, ch, "start").j.ID, recv(t, ch, "start").j.ID)
	for len(ids) < 5 {
		close(release[ids[len(ids)-2]]) // free one slot
		maxes = append(maxes, recv(t, h.f.fetched, "fetch").GetMax())
		ids = append(ids, recv(t, ch, "start").j.ID)
	}
	if most.Load() != 2 || len(maxes) != 4 || maxes[0] != 2 || maxes[1] != 1 || maxes[2] != 1 || maxes[3] != 1 {
		t.Fatalf("at most %d running, fetch maxes %v", most.Load(), maxes)
	}
}

// A long poll that returns after more than VT/4 leaves too little of the
// claim counted from its send time: the worker heartbeats first and starts
// the handler with a deadline from that heartbeat.
func TestLateFetchHeartbeatsFirst(t *testing.T) {
	h := newHarness(t)
	ch := make(chan started, 1)
	w := h.worker()
	w.Handle("k", blocking(ch, nil))
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	recv(t, h.f.fetched, "fetch") // sent at t0, waiting
	h.clk.Advance(20 * time.Second)
	h.f.add("default", "k", nil, 30*time.Second)
	hb := recv(t, h.f.heartbeats, "heartbeat before the start")
	s := recv(t, ch, "start")
	if !hb.at.Equal(h.at(20*time.Second)) || len(hb.req.GetAttempts()) != 1 {
		t.Fatalf("heartbeat %v at t0+%s", hb.req, hb.at.Sub(h.t0))
	}
	if d := s.j.Deadline(); !d.Equal(h.at(48 * time.Second)) {
		t.Fatalf("deadline t0+%s, want t0+48s", d.Sub(h.t0))
	}
}

// Job.FencedCommit sends the attempt's token "job:<id>:<attempt>"; a
// refusal saying the attempt is over ends the claim and cancels the
// handler's context.
func TestFencedCommitWithAttemptToken(t *testing.T) {
	h := newHarness(t)
	h.f.onCommit = func(r *coordv1.FencedCommitRequest) (*coordv1.FencedCommitResponse, error) {
		if r.GetIdempotencyKey() == "second" {
			return nil, coorderr.New(codes.FailedPrecondition, coorderr.AttemptExpired, "attempt 1 of job 1 lapsed",
				map[string]string{"job_id": "1", "attempt": "1"})
		}
		return &coordv1.FencedCommitResponse{Accepted: true, Generation: 1}, nil
	}
	h.f.add("default", "k", nil, 30*time.Second)
	errs := make(chan error, 2)
	var hctx context.Context
	w := h.worker()
	w.Handle("k", func(ctx context.Context, j *Job) error {
		hctx = ctx
		_, err := j.FencedCommit(ctx, "orders/1/charge", "first", []byte("ok"))
		errs <- err
		_, err = j.FencedCommit(ctx, "orders/1/charge", "second", nil)
		errs <- err
		<-ctx.Done()
		return nil
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	r := recv(t, h.f.commits, "commit")
	if r.GetToken() != "job:1:1" || r.GetLeaseName() != "" || r.GetResource() != "orders/1/charge" || string(r.GetPayload()) != "ok" {
		t.Fatalf("commit %v", r)
	}
	if err := recv(t, errs, "first commit"); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errs, "second commit"); !errors.Is(err, client.ErrAttemptLost) {
		t.Fatalf("refused commit: %v", err)
	}
	waitUntil(t, "handler context cancelled", func() bool { return hctx.Err() != nil })
	if cause := context.Cause(hctx); !errors.Is(cause, ErrClaimLost) || !errors.Is(cause, client.ErrAttemptLost) {
		t.Fatalf("cause %v", cause)
	}
}

func TestTokens(t *testing.T) {
	if tok := Token(42, 3); tok != "job:42:3" {
		t.Fatal(tok)
	}
	if id, n, ok := ParseToken("job:42:3"); !ok || id != 42 || n != 3 {
		t.Fatal(id, n, ok)
	}
	for _, bad := range []string{"daily-close:3", "job:042:3", "job::3", "job:1:0", "job:1:x", "job:1:4294967296", "job:1"} {
		if _, _, ok := ParseToken(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// cancelledEvent is the watch event of job id cancelled during attempt n,
// which ran on worker.
func cancelledEvent(id uint64, n uint32, worker string) *coordv1.WatchEvent {
	j := &coordv1.QueueJob{Id: id, Queue: "default", Kind: "k", State: coordv1.JobState_JOB_STATE_CANCELLED, Attempts: n,
		AttemptLog: []*coordv1.JobAttempt{{Number: n, WorkerId: worker, Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED, Error: `cancelled by "ops"`}}}
	return &coordv1.WatchEvent{Family: coordv1.WatchFamily_WATCH_FAMILY_QUEUE_JOB, Kind: coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT,
		Key: fmt.Sprintf("default/%d", id), Record: &coordv1.WatchEvent_QueueJob{QueueJob: j}}
}

// The worker watches each queue for its own attempts' cancellations (one
// stream, filtered by the server), and its first Fetch waits until that
// watch has started: a cancellation event ends the claim at once, without
// waiting for a heartbeat (none is due yet: the clock has not moved), with
// ErrClaimLost wrapping client.ErrJobCancelled. Events of other attempts
// (another worker's, an attempt this worker does not hold) change nothing.
func TestCancellationWatchCancelsHandler(t *testing.T) {
	h := newHarness(t)
	release := h.watch.holdFirst()
	h.f.add("default", "k", nil, 30*time.Second)
	h.f.add("default", "k", nil, 30*time.Second)
	_, ch, returned := h.startBlocking()
	req := recv(t, h.watch.reqs, "watch")
	if req.GetPrefix() != "default/" || fmt.Sprint(req.GetFamilies()) != "[WATCH_FAMILY_QUEUE_JOB]" || req.GetJobWorkerId() != "w1" ||
		fmt.Sprint(req.GetJobStates()) != "[JOB_STATE_CANCELLED]" || req.GetStartIndex() != 0 {
		t.Fatalf("watch request %v", req)
	}
	// The fetch loop waits for the watch (its bound armed at t0+1s), not
	// fetching yet.
	if !h.clk.WaitArmed(h.at(watchStartWait), 5*time.Second) || len(h.f.fetched) != 0 {
		t.Fatalf("fetch not held for the watch (%d fetches)", len(h.f.fetched))
	}
	release()
	a, b := recv(t, ch, "start"), recv(t, ch, "start")
	if a.j.ID != 1 {
		a, b = b, a
	}
	h.watch.events <- cancelledEvent(2, 1, "another-worker")
	h.watch.events <- cancelledEvent(2, 7, "w1")
	h.watch.events <- cancelledEvent(1, 1, "w1")
	err := recv(t, returned, "handler return")
	if !errors.Is(err, ErrClaimLost) || !errors.Is(err, client.ErrJobCancelled) || !strings.Contains(err.Error(), `cancelled by "ops"`) ||
		!errors.Is(context.Cause(a.ctx), client.ErrJobCancelled) {
		t.Fatalf("cause %v", err)
	}
	if !h.clk.Now().Equal(h.t0) || len(h.f.heartbeats) != 0 {
		t.Fatal("cancelled by a heartbeat, not the watch")
	}
	if b.ctx.Err() != nil {
		t.Fatalf("job 2 cancelled by another attempt's event: %v", context.Cause(b.ctx))
	}
}

// A handler goroutine that finished its job runs the next one (its stack
// already grown) instead of a new goroutine per job. Jobs run one at a
// time here; a free goroutine may miss a job that comes while it is still
// on its way back, so the bound is loose: without the reuse there is one
// goroutine per job.
func TestHandlerGoroutinesReused(t *testing.T) {
	h := newHarness(t)
	const jobs = 20
	for range jobs {
		h.f.add("q", "k", nil, 30*time.Second)
	}
	var mu sync.Mutex
	goroutines := map[string]bool{}
	done := make(chan struct{}, jobs)
	w := h.worker(WithQueue("q", 1))
	w.Handle("k", func(ctx context.Context, j *Job) error {
		buf := make([]byte, 64)
		id, _, _ := strings.Cut(string(buf[:runtime.Stack(buf, false)]), " [")
		mu.Lock()
		goroutines[id] = true
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	for range jobs {
		recv(t, done, "a job run")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(goroutines) > jobs/2 {
		t.Fatalf("%d jobs ran on %d goroutines", jobs, len(goroutines))
	}
}
