package client

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/coordd/coordd/internal/tracectx"
)

// WithTracerProvider sets the OpenTelemetry tracer provider of the SDK's
// spans (client/queue's Worker makes one per attempt; docs/tracing.md).
// Default: the global provider (otel.GetTracerProvider), which makes no
// spans unless the application installs one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// TracerProvider is the provider of WithTracerProvider, or the global one.
func (c *Client) TracerProvider() trace.TracerProvider {
	if c.opts.tracerProvider != nil {
		return c.opts.tracerProvider
	}
	return otel.GetTracerProvider()
}

// injectTrace sends the W3C trace context of the call's span (if any) as
// the traceparent and tracestate metadata: a submit's jobs keep it, and a
// tracing server's span of the call is its child. No span in ctx: nothing
// is added (no allocation).
func injectTrace(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
	opts ...grpc.CallOption) error {
	return invoker(withTraceMetadata(ctx), method, req, reply, cc, opts...)
}

func injectTraceStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer,
	opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(withTraceMetadata(ctx), desc, cc, method, opts...)
}

func withTraceMetadata(ctx context.Context) context.Context {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ctx
	}
	tp, ts := tracectx.Format(sc)
	if ts == "" {
		return metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
	}
	return metadata.AppendToOutgoingContext(ctx, "traceparent", tp, "tracestate", ts)
}
