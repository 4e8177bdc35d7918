package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/tracectx"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// DefaultSubmitsInFlight is how many Submit RPCs of one Client run at once
// (WithSubmitCoalescing): calls made while all of them are in flight —
// piling up because the cluster is behind — wait and share the next RPC.
// Below that, a call lingers briefly when another is in flight
// (DefaultSubmitLinger). DESIGN.md says why 8.
const DefaultSubmitsInFlight = 8

// DefaultSubmitLinger is how long a Submit call that finds another Submit
// of its Client in flight waits for more calls to share its RPC
// (WithSubmitLinger). A call with nothing in flight never waits.
// DESIGN.md says why 1 ms.
const DefaultSubmitLinger = time.Millisecond

// maxCoalescedBytes caps the jobs (their encoded size) of one coalesced
// Submit, well below the server's 4 MiB message limit (a job's args may
// be 64 KiB).
const maxCoalescedBytes = 1 << 20

// ClientOption configures a Client (New).
type ClientOption func(*Client)

// WithSubmitCoalescing sets how many Submit RPCs of this Client may be in
// flight before concurrent Submit, SubmitAt and SubmitAfter calls are
// coalesced (default DefaultSubmitsInFlight): with fewer in flight a call
// is sent at once (or after its linger, WithSubmitLinger), else it waits
// and joins the next call, sent as soon as one in flight ends, with every
// job waiting then (up to MaxBatch). n ≤ 0 turns coalescing off, as
// WithoutSubmitCoalescing.
func WithSubmitCoalescing(n int) ClientOption {
	return func(q *Client) { q.slots = max(n, 0) }
}

// WithSubmitLinger sets how long a Submit, SubmitAt or SubmitAfter call
// that finds another Submit RPC of this Client in flight waits for more
// calls to go with it (default DefaultSubmitLinger): the calls arriving
// meanwhile, up to MaxBatch, then share one RPC. A call made while none
// is in flight is sent at once; when an RPC ends, the calls waiting go at
// once. d ≤ 0 sends a call at once whenever a slot is free
// (WithSubmitCoalescing), as before there was a linger.
func WithSubmitLinger(d time.Duration) ClientOption {
	return func(q *Client) { q.linger = max(d, 0) }
}

// WithoutSubmitCoalescing makes every Submit its own RPC.
func WithoutSubmitCoalescing() ClientOption { return WithSubmitCoalescing(0) }

// member is one Submit call waiting for, or carried by, a coalesced RPC.
type member struct {
	ctx  context.Context
	job  *coordv1.NewJob
	done chan struct{} // closed when res/err are set
	res  *coordv1.SubmittedJob
	err  error

	// Under coalescer.mu.
	sent bool // handed to an RPC (its job may be applied)
	gone bool // returned on its ctx before it was sent: never send it
}

// coalescer turns concurrent Submits of one Client into shared RPCs,
// group-commit style: at most slots RPCs in flight, the calls arriving
// meanwhile wait and go together in the next one, and a call that finds
// an RPC in flight lingers up to linger for others to join it.
type coalescer struct {
	q      *Client
	slots  int
	linger time.Duration // 0: no linger

	mu        sync.Mutex
	inFlight  int
	waiting   []*member
	lingering bool // a linger timer is armed; it sends what waits then
}

// submit sends j on behalf of a caller and returns its own answer.
func (c *coalescer) submit(ctx context.Context, j *coordv1.NewJob) (*coordv1.SubmittedJob, error) {
	m := &member{ctx: ctx, job: j, done: make(chan struct{})}
	c.mu.Lock()
	if c.inFlight < c.slots && len(c.waiting) == 0 && (c.linger == 0 || c.inFlight == 0) {
		// A slot is free, nobody waits and nothing it could wait for is
		// in flight: the call goes out alone, from the caller's own
		// goroutine, as without coalescing (a goroutine of its own cost a
		// start, a stack grown again down through gRPC and two hand-offs
		// per call).
		c.inFlight++
		m.sent = true
		c.mu.Unlock()
		c.send([]*member{m})
		c.mu.Lock()
		c.inFlight--
		c.startLocked()
		c.mu.Unlock()
		return m.res, m.err
	}
	c.waiting = append(c.waiting, m)
	switch {
	case c.lingering:
		// The armed timer sends it, or an RPC's end before that.
	case c.linger > 0 && c.inFlight < c.slots:
		c.lingering = true
		c.q.c.Clock().AfterFunc(c.linger, c.lingered)
	default:
		c.startLocked()
	}
	c.mu.Unlock()
	select {
	case <-m.done:
		return m.res, m.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	sent := m.sent
	if !sent {
		m.gone = true
	}
	c.mu.Unlock()
	select {
	case <-m.done: // answered meanwhile (a lone call's RPC ends with its ctx)
		return m.res, m.err
	default:
	}
	return nil, ctxError(ctx, sent)
}

// lingered sends the calls that waited out a linger (those an RPC's end
// has not sent already).
func (c *coalescer) lingered() {
	c.mu.Lock()
	c.lingering = false
	c.startLocked()
	c.mu.Unlock()
}

// startLocked sends batches of the waiting calls while slots are free,
// each from a goroutine of its own (run).
func (c *coalescer) startLocked() {
	for batch := c.nextLocked(); batch != nil; batch = c.nextLocked() {
		go c.run(batch)
	}
}

// nextLocked takes the next batch of waiting calls and its slot, or
// returns nil when no slot is free or nobody waits.
func (c *coalescer) nextLocked() []*member {
	for c.inFlight < c.slots && len(c.waiting) > 0 {
		var batch []*member
		size := 0
		n := 0
		for _, m := range c.waiting {
			if m.gone {
				n++
				continue
			}
			s := proto.Size(m.job)
			if len(batch) == MaxBatch || (len(batch) > 0 && size+s > maxCoalescedBytes) {
				break
			}
			size += s
			m.sent = true
			batch = append(batch, m)
			n++
		}
		clear(c.waiting[:n])
		c.waiting = c.waiting[n:]
		if len(c.waiting) == 0 {
			c.waiting = nil
		}
		if len(batch) > 0 {
			c.inFlight++
			return batch
		}
	}
	return nil
}

// run makes the RPC of one batch, answers its members and frees the slot;
// while calls wait it goes on with the next batch itself. Under load one
// goroutine so carries batch after batch (a goroutine started per batch
// grew its stack again down through gRPC each time: 5 % of a producer's
// CPU at 10,000 submits/s).
func (c *coalescer) run(batch []*member) {
	for batch != nil {
		c.send(batch)
		c.mu.Lock()
		c.inFlight--
		batch = c.nextLocked()
		c.startLocked() // slots freed meanwhile (none, as a rule)
		c.mu.Unlock()
	}
}

// send submits the jobs of ms in one call and answers each member as if it
// had called alone. The call is all or nothing, so a refusal that may be
// one member's (an INVALID_ARGUMENT naming an index, a permission, a
// quota, a precondition) is not everyone's answer: the named culprit is
// sent alone and the others again; any other refusal, one call per member.
// Transport trouble, unknown outcomes (after the client's retries, which
// end only with every member's ctx) and the identity's request rate limit
// are shared.
func (c *coalescer) send(ms []*member) {
	var culprits sync.WaitGroup
	defer culprits.Wait()
	for len(ms) > 0 {
		if len(ms) == 1 {
			m := ms[0]
			m.answer(c.q.submitOne(m.ctx, m.job))
			return
		}
		resp, err := c.call(ms)
		if err == nil {
			for i, m := range ms {
				m.answer(resp[i], nil)
			}
			return
		}
		if !refusal(err) {
			for _, m := range ms {
				m.answer(nil, err)
			}
			return
		}
		if i, ok := culprit(err, len(ms)); ok {
			bad := ms[i]
			ms = live(append(ms[:i:i], ms[i+1:]...))
			culprits.Go(func() { bad.answer(c.q.submitOne(bad.ctx, bad.job)) })
			continue
		}
		c.oneByOne(ms)
		return
	}
}

// call sends the jobs of ms in one Submit, on a context that carries each
// member's trace context in its job and ends when every member's has.
func (c *coalescer) call(ms []*member) ([]*coordv1.SubmittedJob, error) {
	jobs := make([]*coordv1.NewJob, len(ms))
	for i, m := range ms {
		withTrace(m.ctx, m.job)
		jobs[i] = m.job
	}
	ctx, cancel := batchContext(ms)
	defer cancel()
	resp, err := c.q.q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: jobs})
	if err == nil && len(resp.GetJobs()) != len(jobs) {
		err = fmt.Errorf("coordd: submit answered %d jobs for %d", len(resp.GetJobs()), len(jobs))
	}
	return resp.GetJobs(), err
}

// oneByOne sends each live member's job in its own call, a few at a time.
func (c *coalescer) oneByOne(ms []*member) {
	const parallel = 8
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, m := range live(ms) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.answer(c.q.submitOne(m.ctx, m.job))
		}()
	}
	wg.Wait()
}

func (m *member) answer(res *coordv1.SubmittedJob, err error) {
	m.res, m.err = res, err
	close(m.done)
}

// live drops the members that returned on their ctx: a resend after a
// refusal (which added nothing) must not add a job its caller gave up on;
// that caller was told the outcome is unknown, which stays true.
func live(ms []*member) []*member {
	out := ms[:0]
	for _, m := range ms {
		if m.ctx.Err() == nil {
			out = append(out, m)
		} else {
			m.answer(nil, ctxError(m.ctx, true))
		}
	}
	return out
}

// refusal reports whether err is the server refusing the call (nothing
// applied) for a reason that may belong to one job or caller.
func refusal(err error) bool {
	if errors.Is(err, client.ErrUnknownOutcome) {
		return false
	}
	var e *client.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unauthenticated, codes.Unimplemented:
		return false
	}
	// The identity's request rate: the shared call took one request where
	// its callers alone would each have taken one; sending them one by one
	// would only add load. (The job bytes rate, limit "job_bytes", is per
	// job: one by one, some fit.)
	return e.Reason != coorderr.Name(coorderr.RateLimited) || e.Metadata["limit"] == "job_bytes"
}

// culprit is the index an INVALID_ARGUMENT names, if it names one of n.
func culprit(err error, n int) (int, bool) {
	var e *client.Error
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument {
		return 0, false
	}
	s, ok := e.Metadata["index"]
	if !ok {
		return 0, false
	}
	i, perr := strconv.Atoi(s)
	return i, perr == nil && i >= 0 && i < n
}

// withTrace gives j the W3C trace context of ctx's span unless it names
// its own: what the server takes from a lone call's metadata.
func withTrace(ctx context.Context, j *coordv1.NewJob) {
	if j.GetTraceparent() != "" || j.GetTracestate() != "" {
		return
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		j.Traceparent, j.Tracestate = tracectx.Format(sc)
	}
}

// batchContext is the context of a coalesced call: none of the members'
// values, ended when every member's ctx has ended, and with the latest of
// their deadlines (none if one has none).
func batchContext(ms []*member) (context.Context, context.CancelFunc) {
	var latest time.Time
	all := true
	for _, m := range ms {
		d, ok := m.ctx.Deadline()
		if !ok {
			all = false
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if all {
		ctx, cancel = context.WithDeadline(context.Background(), latest)
	}
	var left atomic.Int64
	left.Store(int64(len(ms)))
	stops := make([]func() bool, len(ms))
	for i, m := range ms {
		stops[i] = context.AfterFunc(m.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// ctxError is what a Submit whose ctx ended returns, worded as the
// client's calls word it: an RPC in flight may have been applied
// (client.ErrUnknownOutcome); one not yet sent added nothing. Both match
// client.ErrUnavailable and hold a *client.Error with the gRPC code.
func ctxError(ctx context.Context, sent bool) error {
	code := codes.Canceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}
	return &abandonedError{e: &client.Error{Code: code, Message: ctx.Err().Error()}, sent: sent}
}

type abandonedError struct {
	e    *client.Error
	sent bool
}

func (a *abandonedError) Error() string {
	if a.sent {
		return a.e.Error() + " (outcome unknown)"
	}
	return a.e.Error()
}

func (a *abandonedError) Unwrap() []error {
	if a.sent {
		return []error{client.ErrUnknownOutcome, a.e, client.ErrUnavailable}
	}
	return []error{a.e, client.ErrUnavailable}
}

// hasOutgoingMetadata reports whether ctx carries gRPC metadata of the
// caller's, which a coalesced call would not send: such a Submit goes alone.
func hasOutgoingMetadata(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && md.Len() > 0
}
