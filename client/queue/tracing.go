package queue

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordd/coordd/internal/tracectx"
)

// TracerName is the instrumentation scope of the Worker's spans.
const TracerName = "github.com/coordd/coordd/client/queue"

// startSpan starts the consumer span of one attempt, the child of the
// job's trace context (a new trace when it has none), and returns the
// handler's ctx holding it. With the default (global, no-op) provider the
// span records nothing but ctx still carries the job's context, so calls
// the handler makes continue the job's trace.
func (w *Worker) startSpan(cl *claim) (context.Context, trace.Span) {
	ctx := cl.ctx
	j := cl.job
	if sc, err := tracectx.Parse(j.Traceparent, j.Tracestate); err == nil && sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := w.tr.Start(ctx, "coordd.job "+j.Kind, consumerSpan...)
	if !span.IsRecording() {
		// No SDK, or not sampled: the attributes would be dropped; building
		// them cost every job 7 allocations (BenchmarkStartSpanNoop).
		return ctx, span
	}
	// Set once the span records: a sampler decides on the name, kind and
	// parent, not on these.
	span.SetAttributes(attribute.String("coordd.queue", j.Queue), attribute.String("coordd.job.kind", j.Kind),
		attribute.Int64("coordd.job.id", int64(j.ID)), attribute.Int("coordd.job.attempt", int(j.Attempt)),
		attribute.String("coordd.fencing_token", j.Token()), attribute.String("coordd.worker_id", w.o.id))
	cl.traceparent, _ = tracectx.Format(span.SpanContext())
	return ctx, span
}

// consumerSpan is the start option of an attempt's span.
var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// endSpan records the handler's error and ends the span.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
