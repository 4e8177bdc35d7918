package queue

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// recordingTracer hands out spans that record and keep their attributes.
type recordingTracer struct {
	noop.Tracer
	spans []*recordingSpan
}

type recordingSpan struct {
	noop.Span
	name  string
	kind  trace.SpanKind
	attrs []attribute.KeyValue
}

func (s *recordingSpan) IsRecording() bool                      { return true }
func (s *recordingSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = append(s.attrs, kv...) }

func (t *recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	s := &recordingSpan{name: name, kind: cfg.SpanKind(), attrs: cfg.Attributes()}
	t.spans = append(t.spans, s)
	return trace.ContextWithSpan(ctx, s), s
}

func spanClaim() *claim {
	return &claim{ctx: context.Background(), job: &Job{ID: 42, Queue: "mail", Kind: "email", Attempt: 3}}
}

// A recording span of an attempt carries the job's attributes and is a
// consumer span; a span that does not record is started all the same
// (the handler's ctx holds it) without building them.
func TestStartSpanAttributes(t *testing.T) {
	tr := &recordingTracer{}
	w := &Worker{tr: tr}
	w.o.id = "w-1"
	_, span := w.startSpan(spanClaim())
	if span != trace.Span(tr.spans[0]) {
		t.Fatal("not the tracer's span")
	}
	got := map[attribute.Key]string{}
	for _, kv := range tr.spans[0].attrs {
		got[kv.Key] = kv.Value.Emit()
	}
	want := map[attribute.Key]string{"coordd.queue": "mail", "coordd.job.kind": "email", "coordd.job.id": "42",
		"coordd.job.attempt": "3", "coordd.fencing_token": Token(42, 3), "coordd.worker_id": "w-1"}
	if len(got) != len(want) || tr.spans[0].name != "coordd.job email" || tr.spans[0].kind != trace.SpanKindConsumer {
		t.Fatalf("%s %v %v", tr.spans[0].name, tr.spans[0].kind, got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
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
