package api

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/tracectx"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

const parentTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func recordingServer() (*Server, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return &Server{tracer: tp.Tracer(TracerName)}, rec
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A call's span continues the caller's traceparent (metadata) and names
// the lease and the generation it got; a malformed traceparent is ignored
// and the span starts a new trace (W3C).
func TestTraceUnarySpanOfALeaseCall(t *testing.T) {
	s, rec := recordingServer()
	info := &grpc.UnaryServerInfo{FullMethod: "/coord.v1.Coordinator/Acquire"}
	handler := func(ctx context.Context, _ any) (any, error) {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			t.Error("the handler's ctx holds no span")
		}
		return &coordv1.AcquireResponse{Acquired: true, Lease: &coordv1.Lease{Name: "l", Generation: 7}}, nil
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", parentTP))
	if _, err := s.traceUnary(ctx, &coordv1.AcquireRequest{Name: "l"}, info, handler); err != nil {
		t.Fatal(err)
	}
	bad := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-nonsense"))
	failing := func(context.Context, any) (any, error) { return nil, status.Error(codes.NotFound, "no") }
	if _, err := s.traceUnary(bad, &coordv1.RenewRequest{Name: "l", Generation: 7}, &grpc.UnaryServerInfo{FullMethod: "/coord.v1.Coordinator/Renew"}, failing); status.Code(err) != codes.NotFound {
		t.Fatalf("the handler's error is not returned: %v", err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	acq, renew := spans[0], spans[1]
	if acq.Name() != "/coord.v1.Coordinator/Acquire" || acq.SpanKind() != trace.SpanKindServer ||
		acq.Parent().TraceID().String() != parentTP[3:35] || acq.Parent().SpanID().String() != parentTP[36:52] {
		t.Errorf("acquire span %q kind %v parent %v", acq.Name(), acq.SpanKind(), acq.Parent())
	}
	if attrOf(acq, attrLease).AsString() != "l" || attrOf(acq, attrGen).AsInt64() != 7 || !attrOf(acq, "coordd.lease.acquired").AsBool() ||
		attrOf(acq, "rpc.method").AsString() != "Acquire" || attrOf(acq, "rpc.service").AsString() != "coord.v1.Coordinator" {
		t.Errorf("acquire span attributes %v", acq.Attributes())
	}
	if renew.Parent().IsValid() || renew.Status().Code.String() != "Error" || attrOf(renew, "rpc.grpc.status_code").AsInt64() != int64(codes.NotFound) {
		t.Errorf("renew span: parent %v (want a new trace), status %v, attributes %v", renew.Parent(), renew.Status(), renew.Attributes())
	}
}

// On the leader each job of a submit gets a span, the child of its
// explicit trace context or of the call's, and the span's context becomes
// the job's.
func TestSubmitSpansBecomeTheJobsContext(t *testing.T) {
	s, rec := recordingServer()
	ctx, call := s.tracer.Start(context.Background(), "call")
	specs := []*fsmv1.QueueJobSpec{{Queue: "q", Kind: "a", TraceParent: parentTP}, {Queue: "q", Kind: "b"}}
	spans := s.submitSpans(ctx, specs)
	for i, sp := range spans {
		endJobSpan(sp, "", attrJobID.Int64(int64(i+1)))
	}
	call.End()
	ended := rec.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans", len(ended))
	}
	explicit, implicit := ended[0], ended[1]
	if explicit.Parent().SpanID().String() != parentTP[36:52] || implicit.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Errorf("parents %v and %v", explicit.Parent(), implicit.Parent())
	}
	for i, sp := range ended[:2] {
		if tp, _ := tracectx.Format(sp.SpanContext()); specs[i].GetTraceParent() != tp {
			t.Errorf("job %d stores %q, its span is %q", i, specs[i].GetTraceParent(), tp)
		}
		if attrOf(sp, attrQueue).AsString() != "q" || attrOf(sp, attrJobID).AsInt64() != int64(i+1) {
			t.Errorf("span %d attributes %v", i, sp.Attributes())
		}
	}
	// A completion's span: the child of the worker's span, else the job's.
	j := fsm.QueueJob{ID: 9, Queue: "q", Kind: "k", TraceParent: specs[1].GetTraceParent(), State: fsm.JobSucceeded}
	s.outcomeSpan(context.Background(), "coordd.job.complete", s.spanStart(), &coordv1.JobCompletion{JobId: 9, Attempt: 2}, "",
		&fsm.JobOutcome{Job: &j}, nil)
	s.outcomeSpan(context.Background(), "coordd.job.fail", s.spanStart(), &coordv1.JobFailure{JobId: 9, Attempt: 3}, parentTP,
		nil, &coordv1.JobItemError{Reason: "STALE_ATTEMPT"})
	ended = rec.Ended()[3:]
	if ended[0].Parent().SpanID() != implicit.SpanContext().SpanID() || attrOf(ended[0], attrToken).AsString() != "job:9:2" {
		t.Errorf("complete span parent %v attributes %v", ended[0].Parent(), ended[0].Attributes())
	}
	if ended[1].Parent().SpanID().String() != parentTP[36:52] || ended[1].Status().Description != "STALE_ATTEMPT: " {
		t.Errorf("fail span parent %v status %v", ended[1].Parent(), ended[1].Status())
	}
}

// Tracing off: no entry point starts a span or allocates (the interceptor
// costs what calling the handler costs).
func TestTracingOffAllocatesNothing(t *testing.T) {
	s := &Server{}
	info := &grpc.UnaryServerInfo{FullMethod: "/coord.v1.Coordinator/Acquire"}
	req, resp := &coordv1.AcquireRequest{Name: "l"}, &coordv1.AcquireResponse{}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", parentTP))
	bare := context.Background()
	sub := &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "q", Kind: "k", Traceparent: parentTP}}}
	specs := []*fsmv1.QueueJobSpec{{Queue: "q", Kind: "k"}}
	j := &fsm.QueueJob{ID: 1, TraceParent: parentTP}
	a := &fsm.Attempt{Number: 1}
	md := metadata.MD{}
	done := &coordv1.JobCompletion{JobId: 1, Attempt: 1}
	for name, f := range map[string]func(){
		"traceUnary":          func() { _, _ = s.traceUnary(ctx, req, info, handler) },
		"submitTraceDefaults": func() { s.submitTraceDefaults(bare, sub) },
		"submitSpans":         func() { _ = s.submitSpans(ctx, specs) },
		"dispatchSpan":        func() { s.dispatchSpan(ctx, j, a) },
		"outcomeSpan":         func() { s.outcomeSpan(ctx, "x", s.spanStart(), done, parentTP, nil, nil) },
		"injectTrace":         func() { s.injectTrace(ctx, md) },
	} {
		if n := testing.AllocsPerRun(200, f); n != 0 {
			t.Errorf("%s allocates %v times with tracing off", name, n)
		}
	}
	if len(md) != 0 {
		t.Errorf("injectTrace added %v with tracing off", md)
	}
}

// BenchmarkUnaryInterceptorOff measures the tracing interceptor with
// tracing off against calling the handler directly (run with -benchmem:
// both 0 allocs/op).
func BenchmarkUnaryInterceptorOff(b *testing.B) {
	s := &Server{}
	info := &grpc.UnaryServerInfo{FullMethod: "/coord.v1.Coordinator/Acquire"}
	req, resp := &coordv1.AcquireRequest{Name: "l"}, &coordv1.AcquireResponse{}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", parentTP))
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = handler(ctx, req)
		}
	})
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = s.traceUnary(ctx, req, info, handler)
		}
	})
	b.Run("on", func(b *testing.B) {
		s, _ := recordingServer()
		b.ReportAllocs()
		for b.Loop() {
			_, _ = s.traceUnary(ctx, req, info, handler)
		}
	})
}
