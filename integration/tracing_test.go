package integration

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/internal/proccluster"
	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/internal/testutil"
	"github.com/coordd/coordd/internal/tracectx"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Tracing end to end (docs/tracing.md): real nodes export their spans
// over OTLP/gRPC to a collector stub in the test, as coordd's
// --otlp-endpoint does.

// collector is an OTLP/gRPC trace receiver that keeps what it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []exported
}

// exported is one span with the instance (service.instance.id) and the
// service that sent it.
type exported struct {
	service, instance string
	*tracepb.Span
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service, instance string
		for _, kv := range rs.GetResource().GetAttributes() {
			switch kv.GetKey() {
			case "service.name":
				service = kv.GetValue().GetStringValue()
			case "service.instance.id":
				instance = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, exported{service, instance, sp})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startCollector serves a collector on loopback until the test ends.
func startCollector(t *testing.T) (*collector, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c, lis.Addr().String()
}

// otlpProvider is a provider that exports every span as it ends to the
// collector at addr, as service/instance.
func otlpProvider(t *testing.T, addr, service, instance string) *sdktrace.TracerProvider {
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resource.NewSchemaless(
		attribute.String("service.name", service), attribute.String("service.instance.id", instance))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// where returns the spans that pass keep.
func (c *collector) where(keep func(exported) bool) []exported {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []exported
	for _, s := range c.spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

func (c *collector) byID(id []byte) (exported, bool) {
	got := c.where(func(s exported) bool { return string(s.SpanId) == string(id) })
	if len(got) != 1 {
		return exported{}, false
	}
	return got[0], true
}

func spanAttr(s exported, key string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// jobSpans are the spans named name of job id.
func (c *collector) jobSpans(name string, id uint64) []exported {
	return c.where(func(s exported) bool {
		return s.GetName() == name && spanAttr(s, "coordd.job.id").GetIntValue() == int64(id)
	})
}

// tracedCluster is a three-node cluster whose nodes export to the
// collector at addr and deliver to loopback targets.
func tracedCluster(t *testing.T, addr string) *testcluster.Cluster {
	allow, err := delivery.ParseAllow([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return testcluster.New(t, 3, func(id string, cfg *testcluster.Config) {
		tp := otlpProvider(t, addr, "coordd", id)
		cfg.API.TracerProvider, cfg.Node.TracerProvider = tp, tp
		cfg.API.Delivery = delivery.Options{Allow: allow}
	})
}

// headerTarget answers 200 and keeps each request's traceparent header.
type headerTarget struct {
	mu           sync.Mutex
	traceparents []string
}

func (h *headerTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.traceparents = append(h.traceparents, r.Header.Get("traceparent"))
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (h *headerTarget) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.traceparents...)
}

// A job submitted under the application's span, run by a Go worker, and
// one delivered to an HTTP target, each make one trace: app span →
// the Submit call → coordd.job.submit (on the leader, once) → the
// dispatch and the worker's (or deliverer's) span of attempt 1 → the
// leader's span of its completion.
func TestTracingJobLifeIsOneTrace(t *testing.T) {
	col, addr := startCollector(t)
	c := tracedCluster(t, addr)
	leader := c.Leader()
	app := otlpProvider(t, addr, "app", "app")
	cl := newClient(t, c, "tracing", client.WithTracerProvider(app))
	qc := queue.New(cl)

	ctx, root := app.Tracer("test").Start(ctxT(t), "app.checkout")
	sub, err := qc.Submit(ctx, "email", map[string]string{"to": "a@example.com"}, queue.Queue("mail"))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	var handlerCtx trace.SpanContext
	handled := make(chan struct{})
	w := queue.NewWorker(cl, queue.WithQueue("mail", 1))
	w.Handle("email", func(ctx context.Context, j *queue.Job) error {
		handlerCtx = trace.SpanContextFromContext(ctx)
		close(handled)
		return nil
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not handled")
	}
	id := sub.GetId()
	c.Eventually("the completion's span exported", 20*time.Second, func() bool { return len(col.jobSpans("coordd.job.complete", id)) == 1 })

	traceID := root.SpanContext().TraceID()
	submits := col.jobSpans("coordd.job.submit", id)
	if len(submits) != 1 {
		t.Fatalf("%d submit spans for job %d, want 1 (made on the leader only)", len(submits), id)
	}
	submit := submits[0]
	if string(submit.TraceId) != string(traceID[:]) || submit.instance != leader.ID {
		t.Errorf("submit span: trace %x (want %s), made by %s (leader %s)", submit.TraceId, traceID, submit.instance, leader.ID)
	}
	if spanAttr(submit, "coordd.queue").GetStringValue() != "mail" || spanAttr(submit, "coordd.job.kind").GetStringValue() != "email" {
		t.Errorf("submit span attributes %v", submit.GetAttributes())
	}
	// Up from the submit span: the Submit calls (the node the client
	// reached, and the leader if that was a follower), then the app's span.
	p, rootSID := submit, root.SpanContext().SpanID()
	for hops := 0; string(p.ParentSpanId) != string(rootSID[:]); hops++ {
		parent, ok := col.byID(p.ParentSpanId)
		if !ok || hops >= 2 || parent.GetName() != "/coord.v1.Queue/Submit" || parent.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Fatalf("the submit span's ancestor %x is %q (found %v), want the Submit calls' spans up to the app's", p.ParentSpanId, parent.GetName(), ok)
		}
		p = parent
	}
	token := queue.Token(id, 1)
	check := func(what string, s exported, parent []byte) {
		t.Helper()
		if string(s.TraceId) != string(traceID[:]) || string(s.ParentSpanId) != string(parent) {
			t.Errorf("%s: trace %x parent %x, want trace %s parent %x", what, s.TraceId, s.ParentSpanId, traceID, parent)
		}
		if spanAttr(s, "coordd.job.attempt").GetIntValue() != 1 || spanAttr(s, "coordd.fencing_token").GetStringValue() != token {
			t.Errorf("%s attributes %v, want attempt 1, token %s", what, s.GetAttributes(), token)
		}
	}
	dispatches := col.jobSpans("coordd.job.dispatch", id)
	attempts := col.jobSpans("coordd.job email", id)
	completes := col.jobSpans("coordd.job.complete", id)
	if len(dispatches) != 1 || len(attempts) != 1 {
		t.Fatalf("%d dispatch and %d worker spans, want 1 each", len(dispatches), len(attempts))
	}
	check("dispatch", dispatches[0], submit.SpanId)
	check("worker attempt", attempts[0], submit.SpanId)
	check("complete", completes[0], attempts[0].SpanId)
	if attempts[0].service != "app" || attempts[0].GetKind() != tracepb.Span_SPAN_KIND_CONSUMER || dispatches[0].instance != leader.ID ||
		completes[0].instance != leader.ID {
		t.Errorf("worker span from %s kind %v; dispatch from %s, complete from %s (leader %s)", attempts[0].service,
			attempts[0].GetKind(), dispatches[0].instance, completes[0].instance, leader.ID)
	}
	if hex.EncodeToString(attempts[0].SpanId) != handlerCtx.SpanID().String() {
		t.Errorf("the handler's ctx holds span %s, the worker's span is %x", handlerCtx.SpanID(), attempts[0].SpanId)
	}
	job := getJob(t, queueOf(c, leader), id)
	if want, _ := tracectx.Format(traceSpanContext(submit)); job.GetTraceparent() != want {
		t.Errorf("the job's traceparent %q, want its submit span's %q", job.GetTraceparent(), want)
	}

	// Through a follower: its span of the call, then the leader's (the
	// forward carries the follower's span as metadata), then the job's.
	follower := c.Followers()[0]
	_, root3 := app.Tracer("test").Start(ctxT(t), "app.forwarded")
	tp3, _ := tracectx.Format(root3.SpanContext())
	fctx := metadata.AppendToOutgoingContext(ctxT(t), "traceparent", tp3)
	fr, err := coordv1.NewQueueClient(c.Conn(follower)).Submit(fctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "other", Kind: "k"}}})
	root3.End()
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually("the forwarded submit's span exported", 20*time.Second, func() bool {
		return len(col.jobSpans("coordd.job.submit", fr.GetJobs()[0].GetId())) == 1
	})
	fs := col.jobSpans("coordd.job.submit", fr.GetJobs()[0].GetId())[0]
	onLeader, ok1 := col.byID(fs.ParentSpanId)
	onFollower, ok2 := col.byID(onLeader.ParentSpanId)
	rootSID3 := root3.SpanContext().SpanID()
	if !ok1 || !ok2 || onLeader.instance != leader.ID || onFollower.instance != follower.ID ||
		onLeader.GetName() != "/coord.v1.Queue/Submit" || onFollower.GetName() != "/coord.v1.Queue/Submit" ||
		string(onFollower.ParentSpanId) != string(rootSID3[:]) {
		t.Errorf("forwarded submit: parent %q on %s (found %v), its parent %q on %s (found %v) under %x; want the leader's, the follower's Submit, the app span",
			onLeader.GetName(), onLeader.instance, ok1, onFollower.GetName(), onFollower.instance, ok2, onFollower.ParentSpanId)
	}

	// A delivery: the request carries the deliverer's span, the child of
	// the job's submit span.
	target := &headerTarget{}
	srv := httptest.NewServer(target)
	defer srv.Close()
	ctx, root2 := app.Tracer("test").Start(ctxT(t), "app.notify")
	dsub, err := qc.Submit(ctx, "hook", nil, queue.Queue("hooks"), queue.Target(&coordv1.HttpTarget{Url: srv.URL}))
	root2.End()
	if err != nil {
		t.Fatal(err)
	}
	did := dsub.GetId()
	c.Eventually("the delivery's completion exported", 30*time.Second, func() bool { return len(col.jobSpans("coordd.job.complete", did)) == 1 })
	got := target.got()
	if len(got) != 1 {
		t.Fatalf("the target got %d requests", len(got))
	}
	sc, err := tracectx.Parse(got[0], "")
	if err != nil || sc.TraceID() != root2.SpanContext().TraceID() {
		t.Fatalf("the request's traceparent %q (%v) is not of the submitter's trace %s", got[0], err, root2.SpanContext().TraceID())
	}
	dsid := sc.SpanID()
	dspan, ok := col.byID(dsid[:])
	dsubmit := col.jobSpans("coordd.job.submit", did)
	if !ok || !strings.HasPrefix(dspan.GetName(), "coordd.delivery") || dspan.GetKind() != tracepb.Span_SPAN_KIND_CLIENT ||
		len(dsubmit) != 1 || string(dspan.ParentSpanId) != string(dsubmit[0].SpanId) {
		t.Fatalf("the header names span %s: %q (found %v), want the deliverer's client span under the job's submit span", sc.SpanID(), dspan.GetName(), ok)
	}
	if spanAttr(dspan, "http.response.status_code").GetIntValue() != 200 ||
		spanAttr(dspan, "coordd.fencing_token").GetStringValue() != queue.Token(did, 1) {
		t.Errorf("delivery span attributes %v", dspan.GetAttributes())
	}
	if dc := col.jobSpans("coordd.job.complete", did)[0]; string(dc.ParentSpanId) != string(dspan.SpanId) {
		t.Errorf("the delivery's completion span's parent %x, want the delivery span %x", dc.ParentSpanId, dspan.SpanId)
	}

	// A schedule's jobs: a new trace per occurrence, started by the leader.
	schedules := coordv1.NewSchedulesClient(c.Conn(leader))
	if _, err := schedules.PutSchedule(ctxT(t), &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "ticker", Schedule: "@every 1s", Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW,
		Job: &coordv1.JobTemplate{Queue: "ticks", Kind: "tick"}}}); err != nil {
		t.Fatal(err)
	}
	var ticks []*coordv1.QueueJob
	c.Eventually("two occurrences made", 30*time.Second, func() bool {
		r, err := queueOf(c, leader).List(ctxT(t), &coordv1.QueueListRequest{Queue: "ticks"})
		ticks = r.GetJobs()
		return err == nil && len(ticks) >= 2
	})
	traces := map[trace.TraceID]bool{}
	for _, j := range ticks[:2] {
		sc, err := tracectx.Parse(j.GetTraceparent(), j.GetTracestate())
		if err != nil || !sc.IsValid() {
			t.Fatalf("scheduled job %d carries %q (%v)", j.GetId(), j.GetTraceparent(), err)
		}
		traces[sc.TraceID()] = true
		sid := sc.SpanID()
		occ, ok := col.byID(sid[:])
		if !ok || occ.GetName() != "coordd.schedule.occurrence" || len(occ.ParentSpanId) != 0 || occ.instance != leader.ID ||
			spanAttr(occ, "coordd.schedule").GetStringValue() != "ticker" {
			t.Errorf("scheduled job %d's context names span %s: %q (found %v), parent %x, from %s; want the leader's root occurrence span",
				j.GetId(), sid, occ.GetName(), ok, occ.ParentSpanId, occ.instance)
		}
	}
	if len(traces) != 2 {
		t.Errorf("two occurrences share a trace: %v", traces)
	}
}

// traceSpanContext is an exported span's own context (sampled).
func traceSpanContext(s exported) trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], s.TraceId)
	copy(sid[:], s.SpanId)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
		TraceState: mustTraceState(s.GetTraceState())})
}

func mustTraceState(s string) trace.TraceState {
	ts, _ := trace.ParseTraceState(s)
	return ts
}

// Tracing off (no TracerProvider): the nodes make no span at all — not
// even through a global provider the process installed — yet a job still
// carries its submitter's trace context to the worker's ctx and to an
// HTTP delivery's traceparent header; an explicit malformed traceparent
// is refused naming the field.
func TestTracingOffCarriesTheSubmittersContext(t *testing.T) {
	global := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(global)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	allow, err := delivery.ParseAllow([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.Delivery = delivery.Options{Allow: allow}
		cfg.API.HTTPAddr = "127.0.0.1:0"
	}))
	app := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	cl := newClient(t, c, "tracing-off", client.WithTracerProvider(noop.NewTracerProvider()))
	qc := queue.New(cl)

	ctx, root := app.Tracer("test").Start(ctxT(t), "app.checkout")
	want, _ := tracectx.Format(root.SpanContext())
	sub, err := qc.Submit(ctx, "email", nil, queue.Queue("mail"))
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	explicit := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	sub2, err := qc.Submit(ctxT(t), "email", nil, queue.Queue("mail"), queue.TraceContext(explicit, "vendor=x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tp, ts, field string }{
		{"00-garbage", "", "traceparent"}, {explicit, "no equals sign", "tracestate"}, {"", "vendor=x", "traceparent"},
	} {
		_, err := qc.Submit(ctxT(t), "email", nil, queue.Queue("mail"), queue.TraceContext(tc.tp, tc.ts))
		var ce *client.Error
		if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &ce) || ce.Metadata["field"] != tc.field {
			t.Errorf("traceparent %q tracestate %q: %v, want INVALID_ARGUMENT naming %s", tc.tp, tc.ts, err, tc.field)
		}
	}
	// Over HTTP/JSON: the body's fields, checked alike.
	base := "http://" + c.Leader().API.HTTPAddr()
	hr := doJSON(t, http.DefaultClient, "POST", base+"/v1/queue/jobs", map[string]any{"jobs": []any{
		map[string]any{"queue": "over-http", "kind": "email", "traceparent": explicit}}})
	wantHTTP(t, "HTTP submit with a traceparent", hr, 200, "")
	jobs, _ := hr.body["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("HTTP submit answered %v", hr.body)
	}
	id := jobs[0].(map[string]any)["id"].(string)
	got := doJSON(t, http.DefaultClient, "GET", base+"/v1/queue/jobs/"+id, nil)
	if job, _ := got.body["job"].(map[string]any); job["traceparent"] != explicit {
		t.Errorf("HTTP job answer %v, want traceparent %s", got.body, explicit)
	}
	bad := doJSON(t, http.DefaultClient, "POST", base+"/v1/queue/jobs", map[string]any{"jobs": []any{
		map[string]any{"queue": "over-http", "kind": "email", "traceparent": "nonsense"}}})
	wantHTTP(t, "HTTP submit with a malformed traceparent", bad, 400, "INVALID_ARGUMENT")
	if meta, _ := bad.body["metadata"].(map[string]any); meta["field"] != "traceparent" {
		t.Errorf("HTTP refusal %v, want metadata field traceparent", bad.body)
	}

	q := queueOf(c, c.Leader())
	if got := getJob(t, q, sub.GetId()).GetTraceparent(); got != want {
		t.Errorf("job from a traced call carries %q, want the caller's %q", got, want)
	}
	if j := getJob(t, q, sub2.GetId()); j.GetTraceparent() != explicit || j.GetTracestate() != "vendor=x" {
		t.Errorf("job with an explicit context carries %q %q", j.GetTraceparent(), j.GetTracestate())
	}
	seen := map[uint64]trace.SpanContext{}
	var mu sync.Mutex
	w := queue.NewWorker(cl, queue.WithQueue("mail", 2))
	w.Handle("email", func(ctx context.Context, j *queue.Job) error {
		mu.Lock()
		defer mu.Unlock()
		seen[j.ID] = trace.SpanContextFromContext(ctx)
		return nil
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	c.Eventually("both jobs handled", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2
	})
	if sc := seen[sub.GetId()]; sc.TraceID() != root.SpanContext().TraceID() || sc.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("the handler's ctx continues %v, want the submitter's span %v", sc, root.SpanContext())
	}
	if sc := seen[sub2.GetId()]; sc.TraceID().String() != explicit[3:35] || sc.TraceState().Get("vendor") != "x" {
		t.Errorf("the handler's ctx continues %v, want %s", sc, explicit)
	}

	target := &headerTarget{}
	srv := httptest.NewServer(target)
	defer srv.Close()
	dsub, err := qc.Submit(ctxT(t), "hook", nil, queue.Queue("hooks"), queue.Target(&coordv1.HttpTarget{Url: srv.URL}),
		queue.TraceContext(explicit, ""))
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually("the delivery made", 30*time.Second, func() bool {
		return getJob(t, q, dsub.GetId()).GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED
	})
	if got := target.got(); len(got) != 1 || got[0] != explicit {
		t.Errorf("the target got traceparent %q, want the job's %q", got, explicit)
	}
	if n := len(global.Ended()) + len(global.Started()); n != 0 {
		t.Errorf("the nodes made %d spans with tracing off", n)
	}
}

// coordd's own flags: a real process with --otlp-endpoint exports its
// spans (here a lease call's) to the collector, batched in the background.
func TestTracingProcessExportsOverOTLP(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	col, addr := startCollector(t)
	pc := proccluster.Start(t, coorddBin, 1, "--otlp-endpoint", addr, "--otlp-insecure")
	pc.WaitLeader()
	if _, err := pc.AcquireAnywhere("traced-lease", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Poll(t, "the Acquire span exported", 30*time.Second, 50*time.Millisecond, func() bool {
		return len(col.where(func(s exported) bool {
			return s.GetName() == "/coord.v1.Coordinator/Acquire" && s.service == "coordd" && s.instance == "node1" &&
				spanAttr(s, "coordd.lease").GetStringValue() == "traced-lease" && spanAttr(s, "coordd.lease.generation").GetIntValue() >= 1
		})) > 0
	})
}

// Over HTTP/JSON a W3C traceparent header is the caller's trace context,
// as gRPC metadata is: a tracing node's call span continues it (and the
// job's submit span is under that), and a node that does not trace stores
// it as the job's context; a malformed header is ignored (W3C), never a
// refusal.
func TestTracingHTTPTraceparentHeader(t *testing.T) {
	const header = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"
	submit := func(t *testing.T, base, tp string) string {
		t.Helper()
		hr := doJSONHeader(t, http.DefaultClient, "POST", base+"/v1/queue/jobs",
			map[string]any{"jobs": []any{map[string]any{"queue": "over-http", "kind": "email"}}}, http.Header{"Traceparent": {tp}})
		wantHTTP(t, "HTTP submit with a traceparent header", hr, 200, "")
		jobs, _ := hr.body["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("HTTP submit answered %v", hr.body)
		}
		return jobs[0].(map[string]any)["id"].(string)
	}
	t.Run("traced", func(t *testing.T) {
		col, addr := startCollector(t)
		allow, err := delivery.ParseAllow([]string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		c := testcluster.New(t, 1, func(id string, cfg *testcluster.Config) {
			tp := otlpProvider(t, addr, "coordd", id)
			cfg.API.TracerProvider, cfg.Node.TracerProvider = tp, tp
			cfg.API.Delivery = delivery.Options{Allow: allow}
			cfg.API.HTTPAddr = "127.0.0.1:0"
		})
		id := submit(t, "http://"+c.Leader().API.HTTPAddr(), header)
		jobID, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		c.Eventually("the submit span exported", 20*time.Second, func() bool { return len(col.jobSpans("coordd.job.submit", jobID)) == 1 })
		s := col.jobSpans("coordd.job.submit", jobID)[0]
		if fmt.Sprintf("%x", s.TraceId) != header[3:35] {
			t.Fatalf("submit span in trace %x, want the header's %s", s.TraceId, header[3:35])
		}
		call, ok := col.byID(s.ParentSpanId)
		if !ok || call.GetName() != "/coord.v1.Queue/Submit" || fmt.Sprintf("%x", call.ParentSpanId) != header[36:52] {
			t.Fatalf("the submit span's parent is %q (found %v, its parent %x), want the HTTP call's span under the header's %s",
				call.GetName(), ok, call.ParentSpanId, header[36:52])
		}
	})
	t.Run("not traced", func(t *testing.T) {
		c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
		base := "http://" + c.Leader().API.HTTPAddr()
		id := submit(t, base, header)
		got := doJSON(t, http.DefaultClient, "GET", base+"/v1/queue/jobs/"+id, nil)
		if job, _ := got.body["job"].(map[string]any); job["traceparent"] != header {
			t.Errorf("HTTP job answer %v, want traceparent %s from the header", got.body, header)
		}
		id = submit(t, base, "00-garbage")
		got = doJSON(t, http.DefaultClient, "GET", base+"/v1/queue/jobs/"+id, nil)
		if job, _ := got.body["job"].(map[string]any); job["traceparent"] != nil && job["traceparent"] != "" {
			t.Errorf("a malformed header was stored: %v", got.body)
		}
	})
}
