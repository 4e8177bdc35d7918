package client

import (
	"crypto/tls"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/tlsutil"
)

// Option configures a Client.
type Option func(*options)

type options struct {
	owner          string
	logger         *slog.Logger
	metrics        Metrics
	dialOpts       []grpc.DialOption
	clock          clock.Clock
	margin         time.Duration // 0: derived from the TTL
	backoffMin     time.Duration
	backoffMax     time.Duration
	attemptTimeout time.Duration
	pingInterval   time.Duration // gRPC keepalive pings; 0: none
	pingTimeout    time.Duration
	locateTimeout  time.Duration // one round of Members calls looking for the leader
	tls            *tls.Config
	tlsErr         error
	tracerProvider trace.TracerProvider // nil: the global one (tracing.go)
}

// WithOwner sets the owner id used for leases (default hostname:pid:random).
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }

// WithLogger sets a logger for lost leases and reconnects (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMetrics sets a metrics sink (see the clientprom package).
func WithMetrics(m Metrics) Option { return func(o *options) { o.metrics = m } }

// WithDialOptions adds gRPC dial options (credentials, interceptors). The
// default is plaintext.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithTLS connects with TLS using cfg: its RootCAs verify the nodes and its
// certificate (Certificates or GetClientCertificate) is this client's
// identity to a cluster running mutual TLS.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg.Clone() } }

// WithTLSFiles is WithTLS from PEM files: the client certificate and key
// (both empty for a client without identity) and the CA bundle that signed
// the nodes' certificates. A file that cannot be read fails New.
func WithTLSFiles(certFile, keyFile, caFile string) Option {
	return func(o *options) {
		o.tls, o.tlsErr = tlsutil.ClientConfig(tlsutil.Files{Cert: certFile, Key: keyFile, CA: caFile})
	}
}

// WithSafetyMargin sets how long before the server could expire a lease the
// client already considers it lost. The default is TTL/10, at least 50 ms
// and at most 2 s.
func WithSafetyMargin(d time.Duration) Option { return func(o *options) { o.margin = d } }

// WithRetryBackoff bounds the jittered backoff between retries while no
// leader answers (default 50 ms to 1 s).
func WithRetryBackoff(min, max time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = min, max }
}

// WithAttemptTimeout bounds one attempt of a call (default 5 s); the whole
// call is bounded by the caller's context.
func WithAttemptTimeout(d time.Duration) Option { return func(o *options) { o.attemptTimeout = d } }

// WithKeepalivePings sets the gRPC keepalive pings on the client's
// connections (default every 10 s, answered within 5 s): while a call or
// the KeepAlive stream is open and nothing arrived for interval, the client
// pings, and a node that does not answer within timeout (frozen, or its
// host gone without a reset) has its connection closed, failing the calls
// on it so they retry elsewhere. gRPC pings at most every 10 s; interval 0
// turns the pings off. The nodes must permit pings this often (coordd's
// enforcement policy).
func WithKeepalivePings(interval, timeout time.Duration) Option {
	return func(o *options) { o.pingInterval, o.pingTimeout = interval, timeout }
}

// WithClock injects the clock that drives renewals and local deadlines
// (tests use clock.Fake for virtual time).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// Metrics receives client-side events. Implementations must be cheap and
// safe for concurrent use.
type Metrics interface {
	// LeaseLost is called once per lost lease with the reason
	// (LEASE_LOST, LEASE_EXPIRED, LOCAL_DEADLINE, …).
	LeaseLost(name, reason string)
	// RenewLatency is the round trip of an acknowledged keepalive renewal.
	RenewLatency(d time.Duration)
	// RunSkipped is called when RunExclusive did not run because another
	// owner holds the lease.
	RunSkipped(name string)
	// FenceRejected is called when a fenced commit is refused.
	FenceRejected(resource, reason string)
}

type nopMetrics struct{}

func (nopMetrics) LeaseLost(string, string)     {}
func (nopMetrics) RenewLatency(time.Duration)   {}
func (nopMetrics) RunSkipped(string)            {}
func (nopMetrics) FenceRejected(string, string) {}
