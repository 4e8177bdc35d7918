// Package client is the Go SDK of coordd: leases that keep themselves alive
// and cancel the work's context when lost, fenced commits, the window
// ledger, and leader discovery with failover. It imports only the coord.v1
// API (no Raft). See DESIGN.md.
package client

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/backoff"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Client talks to a coordd cluster. It keeps one gRPC connection per node
// and one shared KeepAlive stream to the leader. Safe for concurrent use.
type Client struct {
	opts      options
	endpoints []string
	log       *slog.Logger
	clock     clock.Clock
	metrics   Metrics

	mu       sync.Mutex
	conns    map[string]*grpc.ClientConn
	current  string            // the endpoint believed to lead (or the fallback while none is known)
	known    bool              // current was learned (Members, NOT_LEADER, a leader header), not guessed
	suspect  string            // the endpoint that last failed as leader
	ids      map[string]string // node id -> the address it answered on
	locating *locateCall       // the lookup round in flight, if any
	closed   bool

	life    context.Context // ends at Close: background leader lookups
	endLife context.CancelFunc
	bg      sync.WaitGroup

	keeper *keeper
}

// New connects to a cluster given any of its nodes' gRPC addresses. The
// connections are lazy: New fails only on bad arguments.
func New(ctx context.Context, endpoints []string, opts ...Option) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrInvalidArgument)
	}
	o := options{backoffMin: 50 * time.Millisecond, backoffMax: time.Second, attemptTimeout: 5 * time.Second,
		pingInterval: 10 * time.Second, pingTimeout: 5 * time.Second, locateTimeout: 500 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if o.owner == "" {
		o.owner = defaultOwner()
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.metrics == nil {
		o.metrics = nopMetrics{}
	}
	if o.clock == nil {
		o.clock = clock.Real{}
	}
	if o.tlsErr != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, o.tlsErr)
	}
	if o.backoffMin <= 0 || o.backoffMax < o.backoffMin {
		return nil, fmt.Errorf("%w: retry backoff [%s, %s]", ErrInvalidArgument, o.backoffMin, o.backoffMax)
	}
	if o.pingInterval < 0 || (o.pingInterval > 0 && o.pingTimeout <= 0) {
		return nil, fmt.Errorf("%w: keepalive pings every %s, timeout %s", ErrInvalidArgument, o.pingInterval, o.pingTimeout)
	}
	if o.attemptTimeout <= 0 {
		return nil, fmt.Errorf("%w: attempt timeout %s", ErrInvalidArgument, o.attemptTimeout)
	}
	o.locateTimeout = min(o.locateTimeout, o.attemptTimeout)
	c := &Client{
		opts: o, endpoints: append([]string(nil), endpoints...), log: o.logger, clock: o.clock,
		metrics: o.metrics, conns: map[string]*grpc.ClientConn{}, current: endpoints[0], ids: map[string]string{},
	}
	c.life, c.endLife = context.WithCancel(context.Background())
	for _, ep := range endpoints {
		if _, err := c.conn(ep); err != nil {
			c.Close()
			return nil, err
		}
	}
	// Ask the nodes who leads now, so that the first calls go straight
	// there; a call made meanwhile waits for the answer (locate).
	c.startLocate()
	c.keeper = newKeeper(c, c.openKeepAlive, c.probeHealth)
	return c, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// randomID returns a request id.
func randomID() string { return NewRequestID() }

// NewRequestID returns a fresh random idempotency handle (96 bits, hex): a
// request id for Acquire, or a job's unique key, as the SDK makes its own
// when the caller gives none. Repeating a write with the same handle after
// an unknown outcome has no second effect.
func NewRequestID() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Owner is the owner id this client acquires leases as.
func (c *Client) Owner() string { return c.opts.owner }

// Close stops the keepalive stream and closes the connections. Leases still
// held are not released; they expire on the server after their TTL, and
// their contexts are cancelled now.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.endLife()
	if c.keeper != nil {
		c.keeper.close()
	}
	c.bg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

func (c *Client) conn(ep string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[ep]; ok {
		return cc, nil
	}
	if c.closed {
		return nil, fmt.Errorf("%w: client closed", ErrUnavailable)
	}
	creds := insecure.NewCredentials()
	if c.opts.tls != nil {
		creds = credentials.NewTLS(c.opts.tls)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithChainUnaryInterceptor(c.observeLeader(ep), injectTrace),
		grpc.WithChainStreamInterceptor(injectTraceStream)}
	if c.opts.pingInterval > 0 {
		dial = append(dial, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: c.opts.pingInterval, Timeout: c.opts.pingTimeout}))
	}
	dial = append(dial, c.opts.dialOpts...)
	cc, err := grpc.NewClient(ep, dial...)
	if err != nil {
		return nil, fmt.Errorf("coordd: endpoint %q: %w", ep, err)
	}
	c.conns[ep] = cc
	return cc, nil
}

// outcome classifies a failed attempt.
type outcome int

const (
	final    outcome = iota // a verdict: return it
	redirect                // NOT_LEADER with the leader's address: go there now
	retry                   // nothing was done (no leader, connection refused): back off and retry
	unknown                 // it may have been applied (leadership lost, timeout, connection cut)
)

func classify(err error) (outcome, string) {
	st, info := coorderr.Info(err)
	if st == nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return unknown, ""
		}
		return final, ""
	}
	reason, _ := coorderr.ParseReason(info.GetReason())
	switch {
	case reason == coorderr.NotLeader && info.GetMetadata()["leader_address"] != "":
		return redirect, info.GetMetadata()["leader_address"]
	case reason == coorderr.NoLeader || reason == coorderr.ShuttingDown || reason == coorderr.NotLeader:
		return retry, ""
	case reason == coorderr.LeadershipLost || reason == coorderr.Timeout:
		return unknown, ""
	case tlsFailure(st):
		// The handshake failed: nothing was sent, and retrying will not help.
		return final, ""
	case notSent(st):
		// The connection was never made: try another node.
		return retry, ""
	case st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled:
		// Transport trouble: the request may or may not have reached a node.
		return unknown, ""
	default:
		return final, ""
	}
}

// invoke runs call against the leader (or, while none is known, any node,
// which forwards), following redirects and retrying with jittered backoff
// until ctx ends.
// A call whose outcome is unknown is retried only when idempotent says the
// retry cannot have a second effect (request ids, idempotency keys).
func (c *Client) invoke(ctx context.Context, idempotent bool, call func(context.Context, coordv1.CoordinatorClient) error) error {
	return c.invokeConn(ctx, idempotent, func(ctx context.Context, cc *grpc.ClientConn) error {
		return call(ctx, coordv1.NewCoordinatorClient(cc))
	})
}

func (c *Client) invokeConn(ctx context.Context, idempotent bool, call func(context.Context, *grpc.ClientConn) error) error {
	delays := c.retryBackoff()
	redirects := 0
	uncertain := false // an attempt may have been applied
	refused := 0       // attempts in a row that could not connect
	var told error     // the last error that said more than "out of time"
	finish := func(err error) error {
		if !telling(err) && told != nil {
			// The time ran out in an attempt (or while it waited for a
			// connection): what the cluster said before is the news.
			err = told
		}
		err = c.wrapFinal(err)
		if uncertain {
			return &unknownOutcomeError{err: err}
		}
		return err
	}
	for {
		ep := c.leader(ctx)
		cc, err := c.conn(ep)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.attemptTimeout(ctx))
		if ctx.Value(noAttemptTimeout{}) != nil {
			actx, cancel = context.WithCancel(ctx)
		}
		probe := &attemptProbe{}
		err = call(context.WithValue(actx, attemptProbeKey{}, probe), cc)
		cancel()
		if err == nil {
			return nil
		}
		kind, addr := classify(err)
		neverReached := probe.neverReached(err)
		if neverReached {
			kind = retry // it waited for a connection: nothing was sent
		}
		if telling(err) && kind != redirect {
			told = err // a redirect is routing, not why the call failed
		}
		if kind == unknown {
			uncertain = true
		}
		if kind == retry || kind == unknown {
			// This node is not (or no longer) a leader that answers: the
			// next attempt asks the nodes who leads, or falls back to the
			// next endpoint (any node forwards).
			c.leaderFailed(ep)
		}
		if ctx.Err() != nil {
			return finish(err)
		}
		switch kind {
		case final:
			return c.wrapFinal(err)
		case redirect:
			c.redirected(ep, addr)
			if redirects++; redirects <= len(c.endpoints)+1 {
				continue
			}
		case unknown:
			if !idempotent {
				return finish(err)
			}
		case retry:
			if refused = refusedInARow(refused, err, neverReached); refused > 0 && refused < len(c.endpoints) {
				continue // a node that cannot be connected to costs no wait: another may be up
			}
		}
		refused = 0
		if !delays.Wait(ctx, c.clock) {
			return finish(err)
		}
	}
}

// retryBackoff is the delay between a call's attempts: from backoffMin
// doubling to backoffMax, each drawn in [d/2, d] so that clients failing
// together do not retry together.
func (c *Client) retryBackoff() *backoff.Backoff {
	return backoff.New(backoff.Policy{Initial: c.opts.backoffMin, Max: c.opts.backoffMax, Jitter: 0.5})
}

type noAttemptTimeout struct{}

// withoutAttemptTimeout marks a call whose attempts may last as long as
// ctx (a waiting Acquire).
func withoutAttemptTimeout(ctx context.Context) context.Context {
	return context.WithValue(ctx, noAttemptTimeout{}, true)
}

func (c *Client) wrapFinal(err error) error {
	e := fromStatus(err)
	var ce *Error
	if errors.As(e, &ce) && ce.sentinel == nil && (ce.Code == codes.DeadlineExceeded || ce.Code == codes.Canceled) {
		ce.sentinel = ErrUnavailable
	}
	return e
}
