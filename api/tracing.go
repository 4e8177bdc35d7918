package api

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/tracectx"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Tracing (docs/tracing.md). With Config.TracerProvider nil, s.tracer is
// nil and nothing here starts a span or allocates: every entry point
// checks it first. Spans are made at the API's edge only — the RPC on the
// node that serves it, the per-job spans where the call runs on the
// leader — never in the FSM, which every replica applies.

// TracerName is the instrumentation scope of the server's spans.
const TracerName = "github.com/coordd/coordd/api"

// The W3C Trace Context keys, as gRPC metadata (lower case) and headers.
const (
	traceparentKey = "traceparent"
	tracestateKey  = "tracestate"
)

// Span attributes (docs/tracing.md lists them).
const (
	attrQueue   = attribute.Key("coordd.queue")
	attrKind    = attribute.Key("coordd.job.kind")
	attrJobID   = attribute.Key("coordd.job.id")
	attrAttempt = attribute.Key("coordd.job.attempt")
	attrToken   = attribute.Key("coordd.fencing_token")
	attrWorker  = attribute.Key("coordd.worker_id")
	attrLease   = attribute.Key("coordd.lease")
	attrGen     = attribute.Key("coordd.lease.generation")
	attrResrc   = attribute.Key("coordd.fence.resource")
	attrDup     = attribute.Key("coordd.duplicate")
	attrState   = attribute.Key("coordd.job.state")
)

// traceUnary is the first unary interceptor: a server span per call, the
// child of the caller's trace context (traceparent in the metadata), with
// the lease's or resource's name and the token it carried or got.
func (s *Server) traceUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.tracer == nil {
		return handler(ctx, req)
	}
	if sc := incomingTrace(ctx); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	service, method := splitMethod(info.FullMethod)
	ctx, span := s.tracer.Start(ctx, info.FullMethod, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service),
			attribute.String("rpc.method", method)))
	defer span.End()
	requestAttrs(span, req)
	resp, err := handler(ctx, req)
	if err != nil {
		st := status.Convert(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
		span.SetStatus(codes.Error, st.Message())
		return resp, err
	}
	span.SetAttributes(attribute.Int("rpc.grpc.status_code", 0))
	responseAttrs(span, resp)
	return resp, nil
}

func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return full, ""
}

// requestAttrs names what a lease or fence call is about.
func requestAttrs(span trace.Span, req any) {
	switch r := req.(type) {
	case *coordv1.AcquireRequest:
		span.SetAttributes(attrLease.String(r.GetName()))
	case *coordv1.RenewRequest:
		span.SetAttributes(attrLease.String(r.GetName()), attrGen.Int64(int64(r.GetGeneration())))
	case *coordv1.ReleaseRequest:
		span.SetAttributes(attrLease.String(r.GetName()), attrGen.Int64(int64(r.GetGeneration())))
	case *coordv1.FencedCommitRequest:
		span.SetAttributes(attrResrc.String(r.GetResource()))
		if r.GetToken() != "" {
			span.SetAttributes(attrToken.String(r.GetToken()))
		} else if r.GetLeaseName() != "" {
			span.SetAttributes(attrLease.String(r.GetLeaseName()), attrGen.Int64(int64(r.GetGeneration())))
		}
	}
}

// responseAttrs records the generation an acquire got, a commit's verdict.
func responseAttrs(span trace.Span, resp any) {
	switch r := resp.(type) {
	case *coordv1.AcquireResponse:
		span.SetAttributes(attribute.Bool("coordd.lease.acquired", r.GetAcquired()))
		if l := r.GetLease(); l != nil {
			span.SetAttributes(attrGen.Int64(int64(l.GetGeneration())))
		}
	case *coordv1.FencedCommitResponse:
		span.SetAttributes(attribute.Bool("coordd.fence.accepted", r.GetAccepted()), attrDup.Bool(r.GetDuplicate()),
			attribute.Int64("coordd.fence.max_generation", int64(r.GetMaxGeneration())))
	}
}

// incomingTrace is the caller's W3C trace context from the call's
// metadata; malformed or absent: the zero context (the W3C rule: an
// invalid traceparent is ignored and a new trace starts).
func incomingTrace(ctx context.Context) trace.SpanContext {
	tp := metadata.ValueFromIncomingContext(ctx, traceparentKey)
	if len(tp) != 1 {
		return trace.SpanContext{}
	}
	var ts string
	if v := metadata.ValueFromIncomingContext(ctx, tracestateKey); len(v) == 1 {
		ts = v[0]
	}
	sc, err := tracectx.Parse(tp[0], ts)
	if err != nil {
		if sc, err = tracectx.Parse(tp[0], ""); err != nil { // a bad tracestate alone is dropped
			return trace.SpanContext{}
		}
	}
	return sc
}

// injectTrace adds ctx's span context to a forwarded call's metadata, so
// the leader's spans continue this node's trace.
func (s *Server) injectTrace(ctx context.Context, md metadata.MD) {
	if s.tracer == nil {
		return
	}
	if tp, ts := tracectx.Format(trace.SpanContextFromContext(ctx)); tp != "" {
		md.Set(traceparentKey, tp)
		if ts != "" {
			md.Set(tracestateKey, ts)
		}
	}
}

// submitTraceDefaults gives each job of a submit that names no trace
// context the caller's, from the call's metadata, when this server does
// not trace (a tracing server's per-job spans are children of the call's
// span instead, which continues that context). Done on the node the call
// entered, before the checks, so a forwarded submit carries it as data.
func (s *Server) submitTraceDefaults(ctx context.Context, req *coordv1.QueueSubmitRequest) {
	if s.tracer != nil {
		return
	}
	var sc trace.SpanContext
	found := false
	for _, j := range req.GetJobs() {
		if j.GetTraceparent() != "" || j.GetTracestate() != "" {
			continue
		}
		if !found {
			found = true
			if sc = incomingTrace(ctx); !sc.IsValid() {
				return
			}
		}
		j.Traceparent, j.Tracestate = tracectx.Format(sc)
	}
}

// jobSpan starts a leader-side span of one job (submit, dispatch, complete,
// fail) as the child of the trace context tp/ts (the job's or the
// worker's), or of ctx's span when that is empty or unreadable. A nil
// tracer: no span (nil).
func (s *Server) jobSpan(ctx context.Context, name, tp, ts string, start time.Time, attrs ...attribute.KeyValue) trace.Span {
	if s.tracer == nil {
		return nil
	}
	if sc, err := tracectx.Parse(tp, ts); err == nil && sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	if !start.IsZero() {
		opts = append(opts, trace.WithTimestamp(start))
	}
	_, span := s.tracer.Start(ctx, name, opts...)
	return span
}

// endJobSpan records a per-job outcome (err, or an item's refusal reason)
// and ends the span; nil span: nothing.
func endJobSpan(span trace.Span, refusal string, attrs ...attribute.KeyValue) {
	if span == nil {
		return
	}
	span.SetAttributes(attrs...)
	if refusal != "" {
		span.SetStatus(codes.Error, refusal)
	}
	span.End()
}

func tokenAttrs(id uint64, attempt uint32) []attribute.KeyValue {
	return []attribute.KeyValue{attrJobID.Int64(int64(id)), attrAttempt.Int(int(attempt)),
		attrToken.String(attemptToken(id, attempt))}
}

// submitSpans starts, on the leader, one span per job of a submit, the
// child of the job's trace context (the submitter's, or the call's), and
// stores each span's context in its spec: the job's trace context from now
// on, which its attempts continue. Nil when tracing is off.
func (s *Server) submitSpans(ctx context.Context, specs []*fsmv1.QueueJobSpec) []trace.Span {
	if s.tracer == nil {
		return nil
	}
	spans := make([]trace.Span, len(specs))
	for i, sp := range specs {
		spans[i] = s.jobSpan(ctx, "coordd.job.submit", sp.GetTraceParent(), sp.GetTraceState(), time.Time{},
			attrQueue.String(sp.GetQueue()), attrKind.String(sp.GetKind()))
		sp.TraceParent, sp.TraceState = tracectx.Format(spans[i].SpanContext())
	}
	return spans
}

// spanStart is when a traced call began (the start of its per-job spans);
// zero when tracing is off.
func (s *Server) spanStart() time.Time {
	if s.tracer == nil {
		return time.Time{}
	}
	return time.Now()
}

// dispatchSpan marks, on the leader, the hand-out of attempt a of job j to
// a worker (or a deliverer): a span of the job's trace, ended at once.
func (s *Server) dispatchSpan(ctx context.Context, j *fsm.QueueJob, a *fsm.Attempt) {
	if s.tracer == nil || a == nil {
		return
	}
	attrs := append(tokenAttrs(j.ID, a.Number), attrQueue.String(j.Queue), attrKind.String(j.Kind), attrWorker.String(a.WorkerID))
	endJobSpan(s.jobSpan(ctx, "coordd.job.dispatch", j.TraceParent, j.TraceState, time.Time{}, attrs...), "")
}

// outcomeSpan is the leader's span of one completion or failure: the
// child of the worker's attempt span (tp) when it sent one, else of the
// job's trace context; its refusal, if any, is the span's error.
func (s *Server) outcomeSpan(ctx context.Context, name string, start time.Time, it attemptRef, tp string, o *fsm.JobOutcome,
	refused *coordv1.JobItemError) {
	if s.tracer == nil {
		return
	}
	attrs := tokenAttrs(it.GetJobId(), it.GetAttempt())
	var ts string
	if o != nil {
		attrs = append(attrs, attrQueue.String(o.Job.Queue), attrKind.String(o.Job.Kind), attrDup.Bool(o.Duplicate),
			attrState.String(o.Job.State.String()))
		if tp == "" {
			tp, ts = o.Job.TraceParent, o.Job.TraceState
		}
	}
	var reason string
	if refused != nil {
		reason = refused.GetReason() + ": " + refused.GetMessage()
	}
	endJobSpan(s.jobSpan(ctx, name, tp, ts, start, attrs...), reason)
}

// checkItemTraceparent checks a completion's or failure's traceparent.
func checkItemTraceparent(i int, tp string) error {
	if tp != "" && !tracectx.Valid(tp) {
		return invalidItem(i, "traceparent", "traceparent %v", tracectx.ErrTraceParent)
	}
	return nil
}
