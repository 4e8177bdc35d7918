// Package delivery delivers the attempts of jobs that name an HTTP target
// (docs/delivery.md). Every coordd node runs one Deliverer. It is a pull
// worker like any other, with the node as its identity: it long-polls a
// targeted Fetch (the delivery lane of every queue, served by the leader
// in arrival order, so the work spreads over the nodes), heartbeats each
// attempt while its request runs, and reports the response with Complete
// or Fail. Lapses, retries with backoff, dead jobs, cancel and every
// fencing rule are therefore the queue's, unchanged: a node that dies
// mid-request stops heartbeating, the attempt lapses and another node
// delivers the job again, and the dead node's token is refused by
// FencedCommit from then on.
//
// Bounds: Options.Concurrency requests in flight per node (a fetch asks
// for no more jobs than it has free slots, and 8 while the lane keeps
// up, so a burst spreads over the nodes' long polls) and Options.PerTarget per
// target (scheme and host); a request is cut at its timeout and its
// response body at MaxResponseBytes, so a slow or hostile endpoint costs
// one slot and its attempt, never the node.
package delivery

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"time"

	"go.opentelemetry.io/otel/trace"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/backoff"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Queue is the part of the Queue service a Deliverer calls (the node's
// in-process client, as a member).
type Queue interface {
	Fetch(ctx context.Context, in *coordv1.QueueFetchRequest, opts ...grpc.CallOption) (*coordv1.QueueFetchResponse, error)
	Heartbeat(ctx context.Context, in *coordv1.QueueHeartbeatRequest, opts ...grpc.CallOption) (*coordv1.QueueHeartbeatResponse, error)
	Complete(ctx context.Context, in *coordv1.QueueCompleteRequest, opts ...grpc.CallOption) (*coordv1.QueueCompleteResponse, error)
	Fail(ctx context.Context, in *coordv1.QueueFailRequest, opts ...grpc.CallOption) (*coordv1.QueueFailResponse, error)
}

// Deliverer runs one node's deliveries.
type Deliverer struct {
	q      Queue
	worker string
	opts   Options
	clock  clock.Clock
	log    *slog.Logger
	client *http.Client
	m      *Metrics
	tracer trace.Tracer // nil: no spans (tracing.go)

	slots   chan struct{} // one token per request in flight on this node
	reports chan report   // outcomes waiting for the reporter (report.go)

	mu      sync.Mutex
	targets map[string]chan struct{} // per target (scheme://host): its requests in flight
}

// retryCalls spaces the retries of a Fetch, Heartbeat, Complete or Fail
// that failed for want of a leader.
var retryCalls = backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}

// New returns a Deliverer that calls q as worker id worker. Requests and
// timers use c; m may be nil (no metrics).
func New(q Queue, worker string, opts Options, c clock.Clock, log *slog.Logger, m *Metrics) *Deliverer {
	opts = opts.withDefaults()
	d := &Deliverer{q: q, worker: worker, opts: opts, clock: c, log: log, m: m,
		slots: make(chan struct{}, max(opts.Concurrency, 1)), reports: make(chan report, max(opts.Concurrency, 1)),
		targets: map[string]chan struct{}{}}
	tr := &http.Transport{
		Proxy:                  nil, // targets are reached directly, as the allow-list says
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxIdleConnsPerHost:    opts.PerTarget,
		MaxConnsPerHost:        opts.PerTarget,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
	d.client = &http.Client{Transport: tr, CheckRedirect: d.checkRedirect}
	if opts.TracerProvider != nil {
		d.tracer = opts.TracerProvider.Tracer("github.com/coordd/coordd/delivery")
	}
	return d
}

func (o Options) withDefaults() Options {
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.PerTarget <= 0 {
		o.PerTarget = DefaultPerTarget
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Allow == nil {
		o.Allow, _ = ParseAllow(nil)
	}
	return o
}

// Run delivers until ctx ends, then waits for the requests in flight
// (each bounded by its timeout; their attempts lapse if they cannot be
// reported).
func (d *Deliverer) Run(ctx context.Context) {
	if d.opts.Concurrency < 0 {
		return
	}
	// The reporter outlives the deliveries: Run waits for them first.
	rctx, stopReporter := context.WithCancel(context.WithoutCancel(ctx))
	reporterDone := make(chan struct{})
	go func() { defer close(reporterDone); d.reporter(rctx) }()
	defer func() { stopReporter(); <-reporterDone }()
	var wg sync.WaitGroup
	defer wg.Wait()
	retry := backoff.New(retryCalls)
	batch := fetchBatch
	for {
		// One slot at least, then every other free one.
		select {
		case <-ctx.Done():
			return
		case d.slots <- struct{}{}:
		}
		n := 1
		for n < cap(d.slots) && n < batch {
			select {
			case d.slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		start := d.clock.Now()
		res, err := d.q.Fetch(ctx, &coordv1.QueueFetchRequest{Targeted: true, Max: uint32(n), Wait: durationpb.New(d.opts.Poll), WorkerId: d.worker})
		got := len(res.GetJobs())
		for range n - got {
			<-d.slots
		}
		if err == nil && got == 0 && clock.Since(d.clock, start) < d.opts.Poll/10 {
			err = errEmptyAtOnce // a long poll that did not wait: do not spin
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Debug("delivery fetch failed; retrying", "err", err)
			if !retry.Wait(ctx, d.clock) {
				return
			}
			continue
		}
		retry.Reset()
		// A full answer means a backlog: ask for more next time (up to
		// the free slots); anything less, back to small fetches.
		if got == n && n == batch {
			batch = min(batch*2, maxFetchBatch)
		} else if got < n {
			batch = fetchBatch
		}
		for _, cj := range res.GetJobs() {
			wg.Go(func() {
				defer func() { <-d.slots }()
				d.deliver(ctx, cj)
			})
		}
	}
}

// fetchBatch bounds one delivery fetch while the lane keeps up: the leader
// serves the nodes' long polls in arrival order, so small batches spread
// a burst of jobs over the nodes instead of filling the first node's
// slots. Each full answer (a backlog) doubles the next fetch, up to
// maxFetchBatch and the free slots.
const (
	fetchBatch    = 8
	maxFetchBatch = 256
)

var errEmptyAtOnce = errors.New("a delivery fetch answered nothing at once")

// targetSlot takes a slot of target key, waiting while it has
// PerTarget requests in flight; release gives it back.
func (d *Deliverer) targetSlot(ctx context.Context, key string) (release func(), ok bool) {
	d.mu.Lock()
	ch := d.targets[key]
	if ch == nil {
		ch = make(chan struct{}, d.opts.PerTarget)
		d.targets[key] = ch
	}
	d.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, true
	case <-ctx.Done():
		return nil, false
	}
}

// transient reports whether a call failed for want of a leader (or in
// transit) and may be repeated.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}
