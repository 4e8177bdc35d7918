package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordd/coordd/internal/buildinfo"
)

// tracingFlags configure the export of spans over OTLP/gRPC
// (docs/tracing.md). No endpoint (flag, COORDD_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT):
// tracing is off and no span is made.
type tracingFlags struct {
	endpoint string
	insecure bool
	ratio    float64
}

func (f envFlags) tracing(t *tracingFlags) {
	f.str(&t.endpoint, "otlp-endpoint", "", "OTLP/gRPC collector of the trace spans: host:port or a URL (http:// is plaintext); "+
		"empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else tracing is off (docs/tracing.md)")
	f.boolean(&t.insecure, "otlp-insecure", "send spans to --otlp-endpoint without TLS")
	f.float(&t.ratio, "otlp-sample-ratio", 1, "fraction of new traces sampled (0 to 1); a call that carries a trace context follows its sampled flag")
}

// endpointSet says whether spans are exported, and where from.
func (t tracingFlags) endpointSet() bool {
	return t.endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// provider builds the tracer provider and its shutdown (which flushes);
// nil without an endpoint: tracing off.
func (t tracingFlags) provider(ctx context.Context, nodeID string) (trace.TracerProvider, func(context.Context) error, error) {
	if t.ratio < 0 || t.ratio > 1 || t.ratio != t.ratio {
		return nil, nil, fmt.Errorf("--otlp-sample-ratio %v: want 0 to 1", t.ratio)
	}
	if !t.endpointSet() {
		return nil, func(context.Context) error { return nil }, nil
	}
	var opts []otlptracegrpc.Option
	switch e := t.endpoint; {
	case strings.Contains(e, "://"):
		opts = append(opts, otlptracegrpc.WithEndpointURL(e))
	case e != "":
		opts = append(opts, otlptracegrpc.WithEndpoint(e))
	}
	if t.insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...) // dials lazily: a collector down is not a start failure
	if err != nil {
		return nil, nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "coordd"),
		attribute.String("service.instance.id", nodeID), attribute.String("service.version", buildinfo.Read().Version)))
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.ratio))))
	return tp, tp.Shutdown, nil
}
