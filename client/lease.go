package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/client/internal/due"
	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Lease is a held lease. It renews itself over the client's KeepAlive
// stream at TTL/3 until released or lost; Context is cancelled the moment
// it is lost.
type Lease struct {
	c      *Client
	name   string
	owner  string
	gen    uint64
	ttl    time.Duration
	margin time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline due.Deadline // local: send time of the last acknowledged renewal + TTL - margin
	done     bool
	err      error

	claim *Claim // the window claimed with the grant (AcquireClaim)

	onRenewal func(*coordv1.KeepAliveResponse) // see OnRenewal (Resume)

	notifyMu   sync.Mutex      // serializes onDeadline calls, so that they come in order
	onDeadline func(time.Time) // see OnDeadline; guarded by mu
}

// AcquireOption changes one Acquire call.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	owner     string
	requestID string
	claim     *coordv1.WindowRef
	notBefore time.Time
	wait      bool
	value     []byte
}

// AcquireWait waits while another owner holds the lease, instead of
// returning ErrNotAcquired: waiters get the lease in arrival order, handed
// over in the same log entry as the holder's Release (or when the holder's
// TTL runs out), until ctx ends. A blocking lock, like etcd's
// concurrency.Mutex.Lock.
func AcquireWait() AcquireOption { return func(o *acquireOptions) { o.wait = true } }

// ClaimNotBefore makes the AcquireClaim refused before t on the cluster's
// clock (coordd's, not this machine's): the error wraps ErrTooEarly and
// RetryAfter says how long to wait. The job runner sets it to the
// occurrence, so a replica whose clock runs ahead cannot start early.
func ClaimNotBefore(t time.Time) AcquireOption { return func(o *acquireOptions) { o.notBefore = t } }

// AcquireClaim grants the lease only together with a claim of the window
// job/window, in one call and one log entry: the start of a scheduled
// occurrence. Lease.Claim returns the claim. When the window is already
// completed nothing is granted and the error is a *WindowCompletedError
// (errors.Is(err, ErrWindowCompleted)).
func AcquireClaim(job, window string) AcquireOption {
	return func(o *acquireOptions) { o.claim = &coordv1.WindowRef{Job: job, Window: window} }
}

// WindowCompletedError: an AcquireClaim found its window completed.
type WindowCompletedError struct {
	Window *coordv1.Window
}

func (e *WindowCompletedError) Error() string {
	return "coordd: window " + e.Window.GetJob() + "/" + e.Window.GetWindow() + " is already completed (by " +
		e.Window.GetOwner() + " generation " + strconv.FormatUint(e.Window.GetGeneration(), 10) + ")"
}

func (e *WindowCompletedError) Unwrap() error { return ErrWindowCompleted }

// AcquireOwner overrides the client's owner id for this lease.
func AcquireOwner(owner string) AcquireOption { return func(o *acquireOptions) { o.owner = owner } }

// AcquireRequestID sets the request id (default: random per call). Calls
// with the same id get the same grant back while it is live.
func AcquireRequestID(id string) AcquireOption { return func(o *acquireOptions) { o.requestID = id } }

// Acquire takes the lease name for ttl. When another owner holds it, the
// error is a *NotAcquiredError (errors.Is(err, ErrNotAcquired)). Retries
// after an unknown outcome carry the same request id, so they never
// produce a second grant.
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	o := acquireOptions{owner: c.opts.owner}
	for _, opt := range opts {
		opt(&o)
	}
	if o.requestID == "" {
		o.requestID = randomID()
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("%w: ttl must be positive", ErrInvalidArgument)
	}
	// The server grants after this moment, so its expiry is at least
	// sent + ttl: the local deadline derived from it is conservative (G10).
	// (A waiting Acquire is granted later still: more conservative.)
	sent := c.clock.Now()
	if o.claim != nil && !o.notBefore.IsZero() {
		o.claim.NotBefore = pbtime.FromTime(o.notBefore)
	}
	req := &coordv1.AcquireRequest{Name: name, Owner: o.owner, Ttl: durationpb.New(ttl), RequestId: o.requestID, Claim: o.claim, Wait: o.wait,
		Value: o.value}
	ictx := ctx
	if o.wait {
		ictx = withoutAttemptTimeout(ctx) // a wait lasts as long as ctx allows
	}
	resp, err := call(c, ictx, true, coordv1.CoordinatorClient.Acquire, req)
	if err != nil {
		return nil, err
	}
	if cl := resp.GetClaim(); cl != nil && !cl.GetClaimed() {
		return nil, &WindowCompletedError{Window: cl.GetWindow()}
	}
	if !resp.GetAcquired() {
		h := resp.GetLease()
		return nil, &NotAcquiredError{Name: name, Owner: h.GetOwner(), Generation: h.GetGeneration(),
			Remaining: pbtime.Duration(h.GetExpiresIn())}
	}
	gen := resp.GetLease().GetGeneration()
	if o.wait && c.clock.Now().Sub(sent) > ttl/4 {
		// The grant came some time after sent, and the local deadline is
		// only safe from sent: after a long wait, renew once so the lease
		// starts with a deadline worth having.
		rs := c.clock.Now()
		rreq := &coordv1.RenewRequest{Name: name, Owner: o.owner, Generation: gen, Ttl: durationpb.New(ttl)}
		if err := c.invoke(ctx, true, func(ctx context.Context, cc coordv1.CoordinatorClient) error {
			_, err := cc.Renew(ctx, rreq)
			return err
		}); err != nil {
			return nil, err
		}
		sent = rs
	}
	l := c.newLease(name, o.owner, gen, ttl, sent)
	if cl := resp.GetClaim(); cl != nil {
		l.claim = &Claim{Claimed: true, Attempts: cl.GetAttempts(), Window: cl.GetWindow(), lease: l}
	}
	c.keeper.add(l)
	return l, nil
}

func (c *Client) marginFor(ttl time.Duration) time.Duration {
	if c.opts.margin > 0 {
		return c.opts.margin
	}
	return min(max(ttl/10, 50*time.Millisecond), 2*time.Second)
}

func (c *Client) newLease(name, owner string, gen uint64, ttl time.Duration, sent time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{c: c, name: name, owner: owner, gen: gen, ttl: ttl, margin: c.marginFor(ttl), ctx: ctx, cancel: cancel}
	l.mu.Lock() // the timer may fire at once; lose waits for the timer
	l.deadline.Start(c.clock, sent.Add(ttl-l.margin), l.localDeadline)
	l.mu.Unlock()
	return l
}

// Claim is the window claimed with the grant (AcquireClaim), or nil.
func (l *Lease) Claim() *Claim { return l.claim }

// Name is the lease name.
func (l *Lease) Name() string { return l.name }

// Owner is the owner id the lease is held as.
func (l *Lease) Owner() string { return l.owner }

// Generation is the fencing token.
func (l *Lease) Generation() uint64 { return l.gen }

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Token is the compact form of name and generation, "name:generation", for
// headers; ParseToken reads it.
func (l *Lease) Token() string { return FormatToken(l.name, l.gen) }

// Context is cancelled when the lease is lost or released; its cause is Err.
func (l *Lease) Context() context.Context { return l.ctx }

// Done is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lease is held; afterwards it says why it ended:
// an error wrapping ErrLeaseLost, or ErrLeaseReleased.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Deadline is the local deadline: the client considers the lease lost then
// unless a renewal is acknowledged first.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline.At
}

// OnDeadline calls f with the local deadline (Deadline) at once and again
// each time an acknowledged renewal moves it, until the lease ends: for a
// process that must act on the deadline itself, e.g. a watchdog that
// outlives a pause of this one (coordctl lease run). The deadline only
// moves later, and f sees the moves in order. f runs on the client's
// keepalive goroutine: it must return quickly. A later call replaces f.
func (l *Lease) OnDeadline(f func(time.Time)) {
	l.mu.Lock()
	l.onDeadline = f
	l.mu.Unlock()
	l.notifyDeadline()
}

// notifyDeadline calls onDeadline with the current deadline.
func (l *Lease) notifyDeadline() {
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	l.mu.Lock()
	f, at := l.onDeadline, l.deadline.At
	l.mu.Unlock()
	if f != nil {
		f(at)
	}
}

// acked records an acknowledged renewal sent at sent.
func (l *Lease) acked(sent time.Time) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.deadline.Extend(sent.Add(l.ttl - l.margin))
	l.mu.Unlock()
	l.notifyDeadline()
}

func (l *Lease) localDeadline() {
	l.lose("LOCAL_DEADLINE", fmt.Errorf("%w: no renewal of %q generation %d acknowledged before the local deadline", ErrLeaseLost, l.name, l.gen))
}

// lose ends the lease with err (once) and cancels its context.
func (l *Lease) lose(reason string, err error) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done, l.err = true, err
	l.deadline.Timer.Stop()
	l.mu.Unlock()
	l.cancel(err)
	l.c.keeper.remove(l)
	l.c.metrics.LeaseLost(l.name, reason)
	l.c.log.Warn("lease lost", "lease", l.name, "generation", l.gen, "owner", l.owner, "reason", reason, "err", err)
}

// Release stops renewing, cancels the context and releases the lease on the
// server. If the lease had already been lost, the error says so (it wraps
// ErrLeaseLost).
func (l *Lease) Release(ctx context.Context) error {
	lost := l.end()
	req := &coordv1.ReleaseRequest{Name: l.name, Owner: l.owner, Generation: l.gen}
	err := l.c.invoke(ctx, true, func(ctx context.Context, cc coordv1.CoordinatorClient) error {
		_, err := cc.Release(ctx, req)
		return err
	})
	if errors.Is(lost, ErrLeaseLost) {
		return lost
	}
	return err
}

// end stops keeping the lease alive and cancels its context with
// ErrLeaseReleased; it returns the loss already recorded, if any.
func (l *Lease) end() error {
	l.mu.Lock()
	lost := l.err
	if !l.done {
		l.done, l.err = true, ErrLeaseReleased
		l.deadline.Timer.Stop()
	}
	l.mu.Unlock()
	l.c.keeper.remove(l)
	l.cancel(ErrLeaseReleased)
	return lost
}

// FormatToken renders a fencing token as "name:generation"
// (coorderr.FormatToken).
func FormatToken(name string, gen uint64) string { return coorderr.FormatToken(name, gen) }

// ParseToken reads a token made by FormatToken (the generation follows the
// last colon, so names may contain colons); errors wrap ErrInvalidToken
// (coorderr.ParseToken).
func ParseToken(tok string) (name string, gen uint64, err error) { return coorderr.ParseToken(tok) }
