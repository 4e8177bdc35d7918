// Package queue is the Go SDK of coordd's job queue (coord.v1.Queue):
// submit jobs to run now, at a time or after a delay, look them up, cancel
// and retry them, and run them on a Worker whose every attempt is a claim
// with a fencing token.
//
//	q := queue.New(c) // c is a *client.Client
//	sub, err := q.SubmitAfter(ctx, 10*time.Minute, "send-invoice", Invoice{ID: 42},
//		queue.Queue("billing"), queue.UniqueKey("invoice-42"))
//
//	w := queue.NewWorker(c, queue.WithQueue("billing", 8))
//	queue.HandleJSON(w, "send-invoice", func(ctx context.Context, j *queue.Job, inv Invoice) error {
//		// ... do the work; fence its write with the attempt's token:
//		_, err := j.FencedCommit(ctx, "invoices/42/sent", "", nil)
//		return err
//	})
//	err = w.Run(ctx)
//
// It imports only the client package, the coord.v1 API and the clock: a
// service that embeds it pulls in no Raft. Every call goes through the
// client's one routing and retry policy (client.Client.Queue). See
// DESIGN.md, and docs/jobs.md for the guarantees.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/internal/pages"
	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// MaxBatch is the most jobs one Submit call (and items one Heartbeat,
// Complete or Fail call) may carry.
const MaxBatch = 1000

// Client submits and looks up jobs. Safe for concurrent use.
//
// Idempotency: Get, List and Stats are reads; Cancel is idempotent (a
// repeat returns the job unchanged); every Submit is idempotent: a job
// without a UniqueKey gets a generated one (AutoKeyPrefix and a random
// id), so a repeat returns the first job (Duplicate set) and the call is
// retried after an unknown outcome (a leader lost while applying, a
// connection cut) with the same keys. A Retry is not retried once sent: its
// error then matches client.ErrUnknownOutcome, and the caller looks the job
// up (Get) before retrying again.
//
// Coalescing: concurrent Submits of one Client share RPCs (see Submit and
// WithSubmitCoalescing, WithSubmitLinger); each still gets its own answer.
type Client struct {
	c      *client.Client
	q      coordv1.QueueClient
	slots  int           // Submit RPCs in flight before calls coalesce; 0: off
	linger time.Duration // WithSubmitLinger
	co     *coalescer
}

// New returns the queue client of c.
func New(c *client.Client, opts ...ClientOption) *Client {
	q := &Client{c: c, q: c.Queue(), slots: DefaultSubmitsInFlight, linger: DefaultSubmitLinger}
	for _, o := range opts {
		o(q)
	}
	if q.slots > 0 {
		q.co = &coalescer{q: q, slots: q.slots, linger: q.linger}
	}
	return q
}

// Option sets a field of a job to submit.
type Option func(*spec)

type spec struct {
	j   *coordv1.NewJob
	err error
}

func (s *spec) fail(field, format string, a ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: %s: %s", client.ErrInvalidArgument, field, fmt.Sprintf(format, a...))
	}
}

// Queue puts the job in the named queue (default "default").
func Queue(name string) Option { return func(s *spec) { s.j.Queue = name } }

// Priority in [-100, 100] (default 0): higher is fetched first within its
// queue.
func Priority(p int) Option { return func(s *spec) { s.j.Priority = int32(clamp(p)) } }

// MaxAttempts in [1, 100] (default 25): after that many attempts the job
// is dead.
func MaxAttempts(n int) Option { return func(s *spec) { s.j.MaxAttempts = int32(clamp(n)) } }

func clamp(n int) int { return max(min(n, math.MaxInt32), math.MinInt32) }

// Backoff sets the retry backoff after failed attempt n: min(initial *
// factor^(n-1), max), plus up to 25 % jitter (defaults 1 s, 1 h, 2).
func Backoff(initial, maxDelay time.Duration, factor float64) Option {
	return func(s *spec) {
		s.j.BackoffInitial, s.j.BackoffMax, s.j.BackoffFactor = pbtime.FromDuration(initial), pbtime.FromDuration(maxDelay), factor
	}
}

// VisibilityTimeout sets how long an attempt lives without a heartbeat
// (default 30 s). The Worker heartbeats at a third of it.
func VisibilityTimeout(d time.Duration) Option {
	return func(s *spec) { s.j.VisibilityTimeout = pbtime.Dur(ceilMs(d)) }
}

// MaxRun bounds each attempt: it ends at its start + d even while the
// worker heartbeats (the Worker cancels the handler's context just before,
// cause wrapping ErrMaxRunExceeded; the job is retried after its backoff).
// Default: the queue's max_run (coordctl queue limit --max-run), else none.
func MaxRun(d time.Duration) Option {
	return func(s *spec) { s.j.MaxRun = pbtime.Dur(ceilMs(d)) }
}

// UniqueKey makes the submit idempotent within the job's queue while the
// job is retained: a second submit with the key returns the first job
// (Duplicate) and adds nothing, so it is safe to retry. Without it, Submit
// and SubmitBatch generate a key (AutoKey) for the call and its retries;
// give your own to make a later, separate submit of the same job a
// duplicate too.
func UniqueKey(key string) Option { return func(s *spec) { s.j.UniqueKey = key } }

// AutoKeyPrefix starts the unique keys Submit and SubmitBatch generate for
// jobs submitted without one ("auto:" and 24 hex digits).
const AutoKeyPrefix = "auto:"

// AutoKey returns a fresh generated unique key (AutoKeyPrefix and a random
// id), as Submit gives a job without one.
func AutoKey() string { return AutoKeyPrefix + client.NewRequestID() }

// keyed gives every job without a unique key a generated one, in place, so
// that the Submit carrying them is retried after an unknown outcome
// without adding a job twice.
func keyed(jobs []*coordv1.NewJob) []*coordv1.NewJob {
	for _, j := range jobs {
		if j.GetUniqueKey() == "" {
			j.UniqueKey = AutoKey()
		}
	}
	return jobs
}

// TraceContext gives the job an explicit W3C trace context (traceparent,
// and tracestate or ""), which its attempts continue. Without it the job
// takes the trace of the submit call's ctx, if it holds a span
// (docs/tracing.md). Malformed: the submit is refused, INVALID_ARGUMENT.
func TraceContext(traceparent, tracestate string) Option {
	return func(s *spec) { s.j.Traceparent, s.j.Tracestate = traceparent, tracestate }
}

// Label adds a label (List filters by one).
// Target makes coordd's nodes deliver the job to an HTTP endpoint instead
// of a worker (docs/delivery.md): each attempt is a request carrying the
// args as its JSON body, the attempt's fencing token and, with a secret
// name, a Standard Webhooks signature; a 2xx completes it.
func Target(t *coordv1.HttpTarget) Option { return func(s *spec) { s.j.Target = t } }

func Label(key, value string) Option {
	return func(s *spec) {
		if s.j.Labels == nil {
			s.j.Labels = map[string]string{}
		}
		s.j.Labels[key] = value
	}
}

// Labels adds labels.
func Labels(m map[string]string) Option {
	return func(s *spec) {
		for k, v := range m {
			Label(k, v)(s)
		}
	}
}

// At makes the job due at t on the cluster's calendar clock (the leader's
// wall clock): never handed out before t (kept to the millisecond, rounded
// up). A past t is due at once.
func At(t time.Time) Option {
	return func(s *spec) {
		if s.j.GetDelayMs() != 0 {
			s.fail("run_at", "At and After both set")
		}
		ms := t.UnixMilli()
		if t.After(time.UnixMilli(ms)) {
			ms++
		}
		s.j.RunAt = pbtime.At(ms)
	}
}

// After makes the job due d after the leader's calendar time at submit
// (rounded up to the millisecond).
func After(d time.Duration) Option {
	return func(s *spec) {
		if s.j.GetRunAtMs() != 0 {
			s.fail("delay", "At and After both set")
		}
		if d < 0 {
			s.fail("delay", "negative delay %s", d)
		}
		s.j.Delay = pbtime.Dur(ceilMs(d))
	}
}

// ceilMs is d in milliseconds, rounded up (a negative d rounds toward 0,
// and the server refuses it naming the field).
func ceilMs(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && time.Duration(ms)*time.Millisecond < d {
		ms++
	}
	return ms
}

// NewJob builds a job to submit. args are the job's parameters: []byte and
// json.RawMessage are sent as they are, nil as none, any other value as
// its JSON encoding (a value that cannot be encoded is ErrInvalidArgument).
func NewJob(kind string, args any, opts ...Option) (*coordv1.NewJob, error) {
	b, err := encodeArgs(args)
	if err != nil {
		return nil, fmt.Errorf("%w: args: %w", client.ErrInvalidArgument, err)
	}
	s := spec{j: &coordv1.NewJob{Kind: kind, Args: b}}
	for _, o := range opts {
		o(&s)
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.j, nil
}

func encodeArgs(args any) ([]byte, error) {
	switch a := args.(type) {
	case nil:
		return nil, nil
	case []byte:
		return a, nil
	case json.RawMessage:
		return a, nil
	default:
		return json.Marshal(a)
	}
}

// Submit submits one job, due now unless At or After says otherwise (see
// NewJob for args). The answer has its id and state, and Duplicate when a
// UniqueKey named an existing job (which is returned instead).
//
// Concurrent Submits (SubmitAt, SubmitAfter) of one Client are coalesced,
// group-commit style, unless WithoutSubmitCoalescing: a call made while
// no Submit RPC of this Client is in flight is sent at once; one made
// while some are, but fewer than DefaultSubmitsInFlight
// (WithSubmitCoalescing), lingers up to DefaultSubmitLinger
// (WithSubmitLinger), or until one of them ends, and goes with the calls
// made meanwhile; with all in flight it joins the next RPC, sent as soon
// as one ends, with every call waiting then (up to MaxBatch jobs). Each
// caller gets the answer it would have got alone: its own job (two jobs
// with one UniqueKey in one call are one job and its Duplicate, as in two
// calls),
// its own refusal (a refused shared RPC added nothing and is sent again
// without the job at fault, or one call per job), and on its ctx's end
// its ctx error (matching client.ErrUnknownOutcome once sent) without
// cancelling the others; the shared RPC ends when all its callers' ctxs
// have. The job takes the trace context of ctx's span, as alone. A ctx
// carrying outgoing gRPC metadata is sent alone.
func (q *Client) Submit(ctx context.Context, kind string, args any, opts ...Option) (*coordv1.SubmittedJob, error) {
	j, err := NewJob(kind, args, opts...)
	if err != nil {
		return nil, err
	}
	keyed([]*coordv1.NewJob{j})
	if q.co == nil || hasOutgoingMetadata(ctx) {
		return q.submitOne(ctx, j)
	}
	return q.co.submit(ctx, j)
}

// submitOne sends one job in its own call.
func (q *Client) submitOne(ctx context.Context, j *coordv1.NewJob) (*coordv1.SubmittedJob, error) {
	resp, err := q.q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{j}})
	if err != nil {
		return nil, err
	}
	if len(resp.GetJobs()) != 1 {
		return nil, fmt.Errorf("coordd: submit answered %d jobs for 1", len(resp.GetJobs()))
	}
	return resp.GetJobs()[0], nil
}

// SubmitAt submits a job due at t (At).
func (q *Client) SubmitAt(ctx context.Context, t time.Time, kind string, args any, opts ...Option) (*coordv1.SubmittedJob, error) {
	return q.Submit(ctx, kind, args, append(opts, At(t))...)
}

// SubmitAfter submits a job due d from now on the cluster's clock (After).
func (q *Client) SubmitAfter(ctx context.Context, d time.Duration, kind string, args any, opts ...Option) (*coordv1.SubmittedJob, error) {
	return q.Submit(ctx, kind, args, append(opts, After(d))...)
}

// SubmitBatch submits jobs (built with NewJob) in calls of up to MaxBatch,
// in order. Each call is all or nothing — one bad job refuses its whole
// call — but a batch of more than MaxBatch jobs is several calls and is not
// atomic across them: on an error, the answer holds the jobs of the calls
// that succeeded (a prefix of jobs, in order), the failing call added
// nothing (or, when the error matches client.ErrUnknownOutcome, may have
// added its jobs), and later calls were not made. The error names the
// failing call's range, jobs[lo:hi]; an INVALID_ARGUMENT's "index"
// metadata counts from lo. A job without a UniqueKey gets a generated one
// (AutoKey), set in jobs itself: each call is retried after an unknown
// outcome, and the same slice can be submitted again safely.
func (q *Client) SubmitBatch(ctx context.Context, jobs []*coordv1.NewJob) ([]*coordv1.SubmittedJob, error) {
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%w: jobs: none to submit", client.ErrInvalidArgument)
	}
	keyed(jobs)
	out := make([]*coordv1.SubmittedJob, 0, len(jobs))
	for lo := 0; lo < len(jobs); lo += MaxBatch {
		hi := min(lo+MaxBatch, len(jobs))
		resp, err := q.q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: jobs[lo:hi]})
		if err == nil && len(resp.GetJobs()) != hi-lo {
			err = fmt.Errorf("coordd: submit answered %d jobs for %d", len(resp.GetJobs()), hi-lo)
		}
		if err != nil {
			return out, fmt.Errorf("jobs[%d:%d] of %d: %w", lo, hi, len(jobs), err)
		}
		out = append(out, resp.GetJobs()...)
	}
	return out, nil
}

// Get returns a job with its args and recent attempts (client.ErrJobNotFound,
// which also matches client.ErrNotFound, if there is none). Linearizable
// unless client.Stale() is given.
func (q *Client) Get(ctx context.Context, id uint64, opts ...client.ReadOption) (*coordv1.QueueJob, error) {
	resp, err := q.q.Get(ctx, &coordv1.QueueGetRequest{Id: id, Stale: client.IsStale(opts...)})
	if err != nil {
		return nil, notFound(err)
	}
	return resp.GetJob(), nil
}

// notFound makes a NOT_FOUND answer about a job match ErrJobNotFound.
func notFound(err error) error {
	var e *client.Error
	if errors.As(err, &e) && e.Code == codes.NotFound && e.Reason != coorderr.Name(coorderr.JobNotFound) {
		return fmt.Errorf("%w: %w", client.ErrJobNotFound, err)
	}
	return err
}

// Filter selects jobs for List; zero fields match all.
type Filter struct {
	Queue string
	State coordv1.JobState
	Kind  string
	// Label is "key=value".
	Label string
	// PageSize: jobs per call (default 100, at most 1,000).
	PageSize int32
}

// ListPage returns one page of jobs matching f, newest first, without
// args, results or attempt details (Get has them); pageToken is the
// previous page's NextPageToken ("" for the first).
func (q *Client) ListPage(ctx context.Context, f Filter, pageToken string, opts ...client.ReadOption) (*coordv1.QueueListResponse, error) {
	return q.q.List(ctx, &coordv1.QueueListRequest{Queue: f.Queue, State: f.State, Kind: f.Kind, Label: f.Label,
		PageSize: f.PageSize, PageToken: pageToken, Stale: client.IsStale(opts...)})
}

// List iterates over the jobs matching f, newest first, a page per call;
// an error ends the iteration (yielded with a nil job). Jobs submitted
// while it runs may or may not appear; none appears twice.
func (q *Client) List(ctx context.Context, f Filter, opts ...client.ReadOption) iter.Seq2[*coordv1.QueueJob, error] {
	return pages.All(func(token string) (*coordv1.QueueListResponse, error) {
		return q.ListPage(ctx, f, token, opts...)
	}, (*coordv1.QueueListResponse).GetJobs)
}

// Cancel cancels a job that is not final: a running attempt ends at once
// on the server (its worker's next call is refused with JOB_CANCELLED); a
// Worker hears of it on its cancellation watch and cancels the handler's
// context within about a second (a worker without one: at its next
// heartbeat). A succeeded or dead job is client.ErrJobFinished; cancelling a
// cancelled job returns it with Duplicate. Idempotent.
func (q *Client) Cancel(ctx context.Context, id uint64) (*coordv1.QueueCancelResponse, error) {
	resp, err := q.q.Cancel(ctx, &coordv1.QueueCancelRequest{Id: id})
	return resp, notFound(err)
}

// Retry makes a dead, cancelled, retryable or scheduled job available now
// (a job whose attempts are used up gets one more). A running job is
// client.ErrJobRunning, a succeeded one client.ErrJobFinished; an available
// one is returned with Duplicate. Not retried after an unknown outcome
// (client.ErrUnknownOutcome): Get the job to see whether it took.
func (q *Client) Retry(ctx context.Context, id uint64) (*coordv1.QueueRetryResponse, error) {
	resp, err := q.q.Retry(ctx, &coordv1.QueueRetryRequest{Id: id})
	return resp, notFound(err)
}

// Stats returns per queue the number of jobs in each state and the age of
// the oldest available job (how far dispatch lags); queue "" is every
// queue with jobs.
func (q *Client) Stats(ctx context.Context, queue string, opts ...client.ReadOption) (*coordv1.QueueStatsResponse, error) {
	return q.q.Stats(ctx, &coordv1.QueueStatsRequest{Queue: queue, Stale: client.IsStale(opts...)})
}
