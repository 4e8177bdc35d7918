package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/internal/due"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/backoff"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Handler runs one attempt of a job. Its context is cancelled when the
// attempt's claim is lost (cause ErrClaimLost; within about a second of
// the job's cancellation, wrapping client.ErrJobCancelled; just before the
// attempt's max_run ends it, wrapping ErrMaxRunExceeded), when
// Worker.Stop gives up waiting (cause ErrWorkerShutdown), and after it
// returns. A nil error completes the job (with the result set by
// Job.SetResult); an error fails the attempt: retried after the job's
// backoff while attempts remain, unless it is Permanent. A panic fails the
// attempt (retryable) with the panic value and the stack as its error.
type Handler func(ctx context.Context, j *Job) error

// Worker fetches jobs from its queues and runs each with the handler of
// its kind, up to a concurrency per queue. Per queue one Fetch asks for
// as many jobs as there are free slots and long-polls while none is due;
// heartbeats of all running attempts go out together at a third of their
// visibility timeout; completions and failures are sent in batches. A
// handler's context is cancelled before its claim could be handed to
// another worker (see DESIGN.md: the local deadline). Safe for concurrent
// use; Handle may be called before or after Start.
type Worker struct {
	c   *client.Client
	q   coordv1.QueueClient
	clk clock.Clock
	o   workerOptions
	log *slog.Logger
	tr  trace.Tracer // the client's provider's (tracing.go)

	mu       sync.Mutex
	handlers map[string]Handler
	fallback Handler // HandleDefault
	started  bool
	stopping bool
	claims   map[ref]*claim
	due      due.Heap[*claim] // running claims waiting for their next heartbeat

	ctx         context.Context // heartbeats and outcomes; ends when Stop ends
	cancel      context.CancelFunc
	fetchCtx    context.Context // fetch loops; ends when Stop begins
	fetchCancel context.CancelFunc
	fetchers    sync.WaitGroup
	running     sync.WaitGroup // handlers, until their outcome is queued
	background  sync.WaitGroup // the heartbeat loop, the cancellation watches
	// free takes a claim to a handler goroutine that finished its job and
	// waits for the next (handle).
	free    chan *claim
	hbWake  chan struct{}
	slots   []*slots
	out     *batcher
	stopped chan struct{}
	stopErr error
}

// ref names an attempt.
type ref struct {
	id      uint64
	attempt uint32
}

// WorkerOption configures a Worker.
type WorkerOption func(*workerOptions)

type workerOptions struct {
	queues          []queueConf
	id              string
	pollWait        time.Duration
	batchSize       int
	batchInterval   time.Duration
	logger          *slog.Logger
	shutdownTimeout time.Duration
	handBackTimeout time.Duration
}

type queueConf struct {
	name        string
	concurrency int
}

// WithQueue makes the worker run jobs of queue, at most concurrency at a
// time (repeat it for several queues; the default is queue "default" with
// concurrency 10). Every worker of a queue should handle all of its kinds:
// a job of a kind without a handler fails (retryable).
func WithQueue(name string, concurrency int) WorkerOption {
	return func(o *workerOptions) { o.queues = append(o.queues, queueConf{name, concurrency}) }
}

// WithWorkerID sets the worker id its attempts are recorded with (default
// the client's owner id: host:pid:random).
func WithWorkerID(id string) WorkerOption { return func(o *workerOptions) { o.id = id } }

// WithPollWait sets how long a Fetch waits for a job when none is due (a
// long poll; default 5 s, at most 30 s). A poll that returns jobs after
// more than a quarter of their visibility timeout costs them a heartbeat
// before they start (see DESIGN.md): 5 s stays under that for the default
// timeout of 30 s.
func WithPollWait(d time.Duration) WorkerOption { return func(o *workerOptions) { o.pollWait = d } }

// WithBatching sets when completions and failures are sent: once size are
// waiting (at most 1,000), or interval after the first of them (default
// 1,000 and 5 ms).
func WithBatching(size int, interval time.Duration) WorkerOption {
	return func(o *workerOptions) { o.batchSize, o.batchInterval = size, interval }
}

// WithLogger sets where the worker logs lost claims and failed calls
// (default: discard).
func WithLogger(l *slog.Logger) WorkerOption { return func(o *workerOptions) { o.logger = l } }

// WithShutdownTimeout sets how long Run lets running handlers finish after
// its context ends (default 30 s); see Stop.
func WithShutdownTimeout(d time.Duration) WorkerOption {
	return func(o *workerOptions) { o.shutdownTimeout = d }
}

// NewWorker returns a worker on c; register handlers with Handle or
// HandleJSON, then Run (or Start and Stop).
func NewWorker(c *client.Client, opts ...WorkerOption) *Worker {
	o := workerOptions{pollWait: 5 * time.Second, batchSize: MaxBatch, batchInterval: 5 * time.Millisecond,
		shutdownTimeout: 30 * time.Second, handBackTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if len(o.queues) == 0 {
		o.queues = []queueConf{{"default", 10}}
	}
	if o.id == "" {
		o.id = c.Owner()
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.pollWait = min(o.pollWait, 30*time.Second)
	if o.pollWait <= 0 {
		o.pollWait = 5 * time.Second
	}
	o.batchSize = min(max(o.batchSize, 1), MaxBatch)
	ctx, cancel := context.WithCancel(context.Background())
	fctx, fcancel := context.WithCancel(ctx)
	w := &Worker{c: c, q: c.Queue(), clk: c.Clock(), o: o, log: o.logger, handlers: map[string]Handler{},
		claims: map[ref]*claim{}, ctx: ctx, cancel: cancel, fetchCtx: fctx, fetchCancel: fcancel,
		hbWake: make(chan struct{}, 1), stopped: make(chan struct{}), free: make(chan *claim)}
	w.out = &batcher{w: w, size: o.batchSize, interval: o.batchInterval}
	w.tr = c.TracerProvider().Tracer(TracerName)
	return w
}

// ID is the worker id.
func (w *Worker) ID() string { return w.o.id }

// Handle registers the handler of a kind (replacing an earlier one).
func (w *Worker) Handle(kind string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[kind] = h
}

// HandleJSON registers a handler of a kind whose args are the JSON
// encoding of a T. Args that do not decode fail the attempt permanently
// (a retry would not decode them either); empty args are T's zero value.
func HandleJSON[T any](w *Worker, kind string, h func(ctx context.Context, j *Job, args T) error) {
	w.Handle(kind, func(ctx context.Context, j *Job) error {
		var args T
		if len(j.Args) > 0 {
			if err := json.Unmarshal(j.Args, &args); err != nil {
				return Permanent(fmt.Errorf("args of %s job %d: %w", kind, j.ID, err))
			}
		}
		return h(ctx, j, args)
	})
}

// HandleDefault registers the handler of every kind without a handler of
// its own (Handle), e.g. a command that dispatches on the kind itself
// (coordctl worker). Without one, such a job fails, retryable.
func (w *Worker) HandleDefault(h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fallback = h
}

func (w *Worker) handler(kind string) Handler {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.handlers[kind]; h != nil {
		return h
	}
	return w.fallback
}

// Start starts fetching and running jobs in the background. It fails on
// a bad configuration (no queue name, a concurrency below 1) or when the
// worker was started before.
func (w *Worker) Start() error {
	for _, q := range w.o.queues {
		if q.name == "" || q.concurrency < 1 {
			return fmt.Errorf("%w: queue %q with concurrency %d", client.ErrInvalidArgument, q.name, q.concurrency)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("coordd: worker already started")
	}
	w.started = true
	w.background.Add(1)
	go w.heartbeats()
	for _, q := range w.o.queues {
		s := &slots{name: q.name, free: q.concurrency, wake: make(chan struct{}, 1), watching: make(chan struct{})}
		w.slots = append(w.slots, s)
		w.background.Add(1)
		go w.watchCancels(s)
		w.fetchers.Add(1)
		go w.fetchLoop(s)
	}
	return nil
}

// Run starts the worker and, when ctx ends, stops it (Stop), letting
// running handlers finish for up to the shutdown timeout
// (WithShutdownTimeout). It returns Start's error or Stop's.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), w.o.shutdownTimeout)
	defer cancel()
	return w.Stop(sctx)
}

// Stop shuts the worker down gracefully: it stops fetching (a long poll in
// flight is cancelled), lets running handlers finish and their outcomes be
// recorded until ctx ends, then hands back the attempts still running:
// their handlers' contexts are cancelled (cause ErrWorkerShutdown) and
// each attempt is failed, retryable, with the error "worker shutdown", so
// the job is due again after its backoff instead of waiting out its
// visibility timeout (the attempt counts either way; a job on its last
// attempt is dead). The pending outcomes are sent with a fresh budget of
// 5 s. Stop returns nil when every handler finished, else an error
// wrapping ErrWorkerShutdown that says how many attempts were handed back.
// A handler that ignores its context may still be running when Stop
// returns: its writes fenced with the attempt's token are refused from
// the hand-back on, and its outcome is dropped.
//
// Why fail rather than let the claims lapse: the job comes back after its
// backoff (1 s by default) instead of after its visibility timeout, and
// its attempt log says why. A fetch cancelled in flight may have been
// granted: jobs of a grant that arrives are handed back too; those of an
// answer that never arrives lapse after their visibility timeout, as if
// this worker had died.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.started, w.stopping = true, true
		w.mu.Unlock()
		w.cancel()
		close(w.stopped)
		return nil
	}
	if w.stopping {
		w.mu.Unlock()
		<-w.stopped
		return w.stopErr
	}
	w.stopping = true
	w.mu.Unlock()

	w.fetchCancel()
	w.fetchers.Wait()
	finished := make(chan struct{})
	go func() {
		w.running.Wait()
		close(finished)
	}()
	handedBack := 0
	select {
	case <-finished:
	case <-ctx.Done():
		var cancels []*claim
		w.mu.Lock()
		for _, cl := range w.claims {
			if cl.state == stateRunning {
				cl.state = stateHandedBack
				w.out.addFail(cl, "worker shutdown", true)
				cancels = append(cancels, cl)
			}
		}
		w.mu.Unlock()
		handedBack = len(cancels)
		for _, cl := range cancels {
			cl.cancel(fmt.Errorf("%w: job %d attempt %d handed back", ErrWorkerShutdown, cl.ref.id, cl.ref.attempt))
		}
	}

	// Send what is queued now, wait for the sends (bounded), then end the
	// heartbeats and every claim still held.
	sent := make(chan struct{})
	go func() {
		w.out.close()
		close(sent)
	}()
	t := w.clk.NewTimer(w.o.handBackTimeout)
	select {
	case <-sent:
	case <-t.C():
	}
	t.Stop()
	w.cancel()
	<-sent
	w.background.Wait()
	w.mu.Lock()
	for _, cl := range w.claims {
		w.forgetLocked(cl)
		cl.cancel(fmt.Errorf("%w: worker stopped", ErrWorkerShutdown))
	}
	w.mu.Unlock()
	if handedBack > 0 {
		w.stopErr = fmt.Errorf("%w: %d running attempts handed back (failed, retryable: \"worker shutdown\"): %w",
			ErrWorkerShutdown, handedBack, ctx.Err())
	}
	close(w.stopped)
	return w.stopErr
}

// slots counts a queue's free handler slots.
type slots struct {
	name     string
	mu       sync.Mutex
	free     int
	wake     chan struct{}
	watching chan struct{} // closed when the queue's cancellation watch started or gave up
}

// wait returns the number of free slots once there is one (0 when ctx
// ends).
func (s *slots) wait(ctx context.Context) int {
	for {
		s.mu.Lock()
		n := s.free
		s.mu.Unlock()
		if n > 0 {
			return n
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return 0
		}
	}
}

func (s *slots) take(n int) {
	s.mu.Lock()
	s.free -= n
	s.mu.Unlock()
}

func (s *slots) release() {
	s.mu.Lock()
	s.free++
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fetchLoop fetches jobs of one queue for its free slots until Stop.
func (w *Worker) fetchLoop(s *slots) {
	defer w.fetchers.Done()
	delays := backoff.New(backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second})
	if !w.awaitWatch(s) {
		return
	}
	for {
		n := s.wait(w.fetchCtx)
		if n == 0 {
			return
		}
		sent := w.clk.Now()
		resp, err := w.q.Fetch(w.fetchCtx, &coordv1.QueueFetchRequest{Queues: []string{s.name}, Max: uint32(min(n, MaxBatch)),
			Wait: durationpb.New(w.o.pollWait), WorkerId: w.o.id})
		if w.fetchCtx.Err() != nil {
			if err == nil { // granted as Stop began: hand the jobs back at once
				s.take(len(resp.GetJobs()))
				for _, cj := range resp.GetJobs() {
					w.register(s, newJob(cj), sent, stateHandedBack)
				}
			}
			return
		}
		if err != nil {
			d := delays.Next()
			w.log.Warn("job fetch failed", "queue", s.name, "err", err, "retry_in", d)
			if !backoff.Sleep(w.fetchCtx, w.clk, d) {
				return
			}
			continue
		}
		delays.Reset()
		w.startClaims(s, resp.GetJobs(), sent)
	}
}

// startClaims starts handlers for jobs fetched by a call sent at sent. A
// claim's local deadline counts from the send time (the server handed the
// job out after it). After a long poll that send time may be most of a
// visibility timeout ago: those jobs are heartbeaten first and start with
// a deadline from that heartbeat (as a waiting Acquire renews once).
func (w *Worker) startClaims(s *slots, jobs []*coordv1.ClaimedJob, sent time.Time) {
	s.take(len(jobs))
	var late []*Job
	for _, cj := range jobs {
		j := newJob(cj)
		if w.clk.Now().Sub(sent) > j.VisibilityTimeout/4 {
			late = append(late, j)
			continue
		}
		w.start(s, j, sent)
	}
	if len(late) == 0 {
		return
	}
	hbSent := w.clk.Now()
	refs := make([]*coordv1.JobAttemptRef, len(late))
	for i, j := range late {
		refs[i] = &coordv1.JobAttemptRef{JobId: j.ID, Attempt: j.Attempt}
	}
	ctx, cancel := context.WithTimeout(w.ctx, late[0].VisibilityTimeout/2)
	resp, err := w.q.Heartbeat(ctx, &coordv1.QueueHeartbeatRequest{WorkerId: w.o.id, Attempts: refs})
	cancel()
	for i, j := range late {
		var itemErr error
		switch {
		case err != nil:
			itemErr = err
		case i >= len(resp.GetResults()) || resp.GetResults()[i].GetJobId() != j.ID:
			itemErr = errors.New("no heartbeat result")
		default:
			itemErr = client.ItemError(resp.GetResults()[i].GetError())
		}
		if itemErr != nil {
			w.log.Warn("job claim lost before its handler started", "job_id", j.ID, "attempt", j.Attempt, "err", itemErr)
			s.release()
			continue
		}
		w.start(s, j, hbSent)
	}
}

// start registers the claim of j (live since sent) and runs its handler.
func (w *Worker) start(s *slots, j *Job, sent time.Time) {
	if cl := w.register(s, j, sent, stateRunning); cl != nil {
		select {
		case w.free <- cl: // a handler goroutine waits for one
		default:
			go w.handle(cl)
		}
	}
}

// handle runs cl's handler, then those of the claims handed to it while it
// waits free, until the worker stops. A goroutine that ran a handler keeps
// its grown stack for the next one: a new goroutine per job grew its stack
// again on every job (runtime.copystack was 4.7 % of a worker process's CPU
// at 10,000 jobs/s with JSON handlers). There are never more of them than
// the most handlers that ran at once.
func (w *Worker) handle(cl *claim) {
	for {
		w.run(cl)
		select {
		case cl = <-w.free:
		case <-w.ctx.Done():
			return
		}
	}
}

// register holds the claim of j, live since sent: its local deadline and
// heartbeats start. A claim registered as handed back (fetched as Stop
// began) is failed at once, retryable, "worker shutdown".
func (w *Worker) register(s *slots, j *Job, sent time.Time, state claimState) *claim {
	ctx, cancel := context.WithCancelCause(w.ctx)
	cl := &claim{w: w, ref: ref{j.ID, j.Attempt}, job: j, slots: s, vt: j.VisibilityTimeout,
		margin: w.c.SafetyMargin(j.VisibilityTimeout), ctx: ctx, cancel: cancel, state: state}
	j.cl = cl
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.claims[cl.ref]; dup || w.ctx.Err() != nil {
		cancel(nil)
		s.release()
		return nil
	}
	if a := j.claimed.GetAttempt(); a.GetRunUntil() != nil && a.GetStartedAt() != nil {
		// The server started the attempt after sent: sent + max_run, less
		// the margin for clock drift over max_run, is before the server's
		// end of it.
		mr := a.GetRunUntil().AsTime().Sub(a.GetStartedAt().AsTime())
		cl.runEnd = sent.Add(mr - w.c.SafetyMargin(mr))
	}
	cl.deadline.Start(w.clk, cl.bounded(sent.Add(cl.vt-cl.margin)), func() { w.deadlinePassed(cl) })
	cl.nextHB = sent.Add(cl.vt / 3)
	w.claims[cl.ref] = cl
	w.pushLocked(cl)
	if state == stateHandedBack {
		w.out.addFail(cl, "worker shutdown", true)
		s.release()
		cancel(ErrWorkerShutdown)
		return nil
	}
	w.running.Add(1)
	return cl
}

// run runs a claim's handler and queues its outcome.
func (w *Worker) run(cl *claim) {
	defer w.running.Done()
	var err error
	ctx, span := w.startSpan(cl)
	if h := w.handler(cl.job.Kind); h == nil {
		err = fmt.Errorf("no handler for kind %q on worker %s", cl.job.Kind, w.o.id)
	} else {
		err = call(ctx, cl, h)
	}
	if err == nil {
		err = cl.job.checkResult()
	}
	endSpan(span, err)
	w.mu.Lock()
	st := cl.state
	if st == stateRunning {
		cl.state = stateReporting
		if err == nil {
			w.out.addComplete(cl)
		} else {
			w.out.addFail(cl, err.Error(), !IsPermanent(err))
		}
	}
	w.mu.Unlock()
	cl.slots.release()
	cl.cancel(nil)
	if st != stateRunning && err != nil {
		w.log.Debug("job handler returned after its claim ended", "job_id", cl.ref.id, "attempt", cl.ref.attempt, "err", err)
	}
}

// call runs h, turning a panic into an error with the stack.
func call(ctx context.Context, cl *claim, h Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n\n%s", r, debug.Stack())
		}
	}()
	return h(ctx, cl.job)
}
