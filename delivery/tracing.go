package delivery

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordd/coordd/internal/tracectx"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// startSpan starts the client span of one delivery request, the child of
// the job's trace context (a new trace when it has none), and makes the
// job carry the span's context: the traceparent header the target gets
// and the parent of the leader's span of the report. Nil when tracing is
// off: the header carries the job's own context unchanged.
func (d *Deliverer) startSpan(ctx context.Context, job *coordv1.QueueJob, a *coordv1.JobAttempt) trace.Span {
	if d.tracer == nil {
		return nil
	}
	if sc, err := tracectx.Parse(job.GetTraceparent(), job.GetTracestate()); err == nil && sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	t := job.GetTarget()
	_, span := d.tracer.Start(ctx, "coordd.delivery "+t.GetMethod(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", t.GetMethod()), attribute.String("server.address", target(t.GetUrl())),
			attribute.String("coordd.queue", job.GetQueue()), attribute.String("coordd.job.kind", job.GetKind()),
			attribute.Int64("coordd.job.id", int64(job.GetId())), attribute.Int("coordd.job.attempt", int(a.GetNumber())),
			attribute.String("coordd.fencing_token", a.GetToken())))
	job.Traceparent, job.Tracestate = tracectx.Format(span.SpanContext())
	return span
}

// endSpan records a request's outcome and ends its span (nil: nothing).
func endSpan(span trace.Span, o outcome) {
	if span == nil {
		return
	}
	if o.status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", o.status))
	}
	switch {
	case o.err != nil:
		span.SetStatus(codes.Error, o.err.Error())
	case o.status < 200 || o.status > 299:
		span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(o.status))
	}
	span.End()
}
