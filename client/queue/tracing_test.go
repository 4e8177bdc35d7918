package queue

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func spanClaim() *claim {
	return &claim{ctx: context.Background(), job: &Job{ID: 42, Queue: "mail", Kind: "email", Attempt: 3}}
}

// A recorded span of an attempt is a consumer span carrying the job's
// attributes, and its context goes out with the attempt (traceparent); an
// unsampled one is started all the same (the handler's ctx holds it)
// without them.
func TestStartSpanAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	w := &Worker{tr: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer(TracerName)}
	w.o.id = "w-1"
	cl := spanClaim()
	ctx, span := w.startSpan(cl)
	endSpan(span, nil)
	ended := rec.Ended()
	if len(ended) != 1 || !trace.SpanContextFromContext(ctx).Equal(span.SpanContext()) || cl.traceparent == "" {
		t.Fatalf("%d spans, traceparent %q", len(ended), cl.traceparent)
	}
	s := ended[0]
	got := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		got[kv.Key] = kv.Value.Emit()
	}
	want := map[attribute.Key]string{"coordd.queue": "mail", "coordd.job.kind": "email", "coordd.job.id": "42",
		"coordd.job.attempt": "3", "coordd.fencing_token": Token(42, 3), "coordd.worker_id": "w-1"}
	if len(got) != len(want) || s.Name() != "coordd.job email" || s.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("%s %v %v", s.Name(), s.SpanKind(), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
	}

	rec = tracetest.NewSpanRecorder()
	w.tr = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(rec)).Tracer(TracerName)
	cl = spanClaim()
	ctx, span = w.startSpan(cl)
	endSpan(span, nil)
	if span.IsRecording() || !trace.SpanContextFromContext(ctx).Equal(span.SpanContext()) || cl.traceparent != "" || len(rec.Ended()) != 0 {
		t.Fatalf("unsampled: recording %v, traceparent %q, %d spans", span.IsRecording(), cl.traceparent, len(rec.Ended()))
	}
}

// BenchmarkStartSpanNoop is an attempt's span with no tracing SDK
// installed (the default): what every job pays for tracing then.
func BenchmarkStartSpanNoop(b *testing.B) {
	w := &Worker{tr: noop.NewTracerProvider().Tracer(TracerName)}
	cl := spanClaim()
	b.ReportAllocs()
	for b.Loop() {
		_, span := w.startSpan(cl)
		endSpan(span, nil)
	}
}
