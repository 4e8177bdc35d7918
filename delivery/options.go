package delivery

import (
	"crypto/x509"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Options configure a node's delivery (coordd's --delivery-* flags).
type Options struct {
	// Allow lists the hosts targets may name (nil: none).
	Allow *Allow
	// Secrets are the signing secrets by name.
	Secrets Secrets
	// Concurrency bounds the requests in flight on this node (its slots);
	// 0: DefaultConcurrency. Negative: this node delivers nothing.
	Concurrency int
	// PerTarget bounds the requests in flight to one target (scheme and
	// host) from this node; 0: DefaultPerTarget.
	PerTarget int
	// RootCAs verify targets' TLS certificates (nil: the system's).
	RootCAs *x509.CertPool
	// MaxResponseBytes bounds what is read of a response body (the rest
	// is cut and marked); 0: DefaultMaxResponseBytes.
	MaxResponseBytes int
	// Poll is the long poll of a delivery fetch; 0: DefaultPoll.
	Poll time.Duration
	// TracerProvider makes a client span of each request, whose context
	// the request's traceparent header carries (docs/tracing.md); nil: no
	// span, and the header carries the job's own trace context.
	TracerProvider trace.TracerProvider
}

// Defaults of Options.
const (
	DefaultConcurrency      = 64
	DefaultPerTarget        = 16
	DefaultMaxResponseBytes = 64 << 10
	DefaultPoll             = 10 * time.Second
)
