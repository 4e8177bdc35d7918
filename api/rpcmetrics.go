package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/internal/buildinfo"
)

// Per-call metrics: every gRPC method with the series of grpc-ecosystem's
// Prometheus provider (grpcMetrics: grpc_server_started_total, grpc_server_handled_total by
// grpc_code, grpc_server_handling_seconds, by grpc_service and
// grpc_method; grpc_code keeps gRPC's own names, "OK", "Unavailable", as
// every gRPC dashboard expects), and every HTTP/JSON route by its pattern
// (coordd_http_requests_total, coordd_http_request_duration_seconds),
// never by the raw path; and coordd_build_info. A method's series appear
// at its first call: initialising every method with every code up front
// (the provider's InitializeMetrics) made a scrape ten times as large
// (227 of 248 KB on a fresh node).

// rpcBuckets span a local read (~0.1 ms) to a long wait (~16 s).
var rpcBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// grpcMetrics are the series of grpc-ecosystem's Prometheus provider
// (go-grpc-middleware/providers/prometheus, its ServerMetrics with a
// handling-time histogram): the same names, labels, help and counting,
// which rpcmetrics_test.go checks against the provider itself. Not the
// provider, because it looks every series up by its label values on every
// call (five lookups a unary call: 4.4 % of the leader's CPU at 16 lock
// clients, docs/benchmarks.md); here a method's series are looked up once
// and kept.
type grpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec
	methods                          sync.Map // "/service/method" → *methodMetrics
}

// methodMetrics are one method's series; handled by code appear at the
// first call that ends with that code.
type methodMetrics struct {
	m              *grpcMetrics
	labels         [3]string // grpc_type, grpc_service, grpc_method
	started        prometheus.Counter
	received, sent lazyCounter // as the provider: a series at its first count
	handling       prometheus.Observer
	handled        [17]lazyCounter // by codes.Code
}

// lazyCounter is a series made at its first Inc.
type lazyCounter struct {
	vec    *prometheus.CounterVec
	labels []string
	c      atomic.Pointer[prometheus.Counter]
}

func (l *lazyCounter) Inc() {
	p := l.c.Load()
	if p == nil {
		c := l.vec.WithLabelValues(l.labels...)
		p = &c
		l.c.Store(p)
	}
	(*p).Inc()
}

// newGRPCMetrics are the gRPC server's metrics, registered in reg.
func newGRPCMetrics(reg *prometheus.Registry) *grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &grpcMetrics{
		started:  counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels),
		handled:  counter("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", append(labels[:3:3], "grpc_code")),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: rpcBuckets}, labels),
	}
	reg.MustRegister(m.started, m.handled, m.received, m.sent, m.handling)
	return m
}

// method returns the series of fullMethod ("/service/method"), made at
// its first call.
func (m *grpcMetrics) method(fullMethod, typ string) *methodMetrics {
	if mm, ok := m.methods.Load(fullMethod); ok {
		return mm.(*methodMetrics)
	}
	service, name := "unknown", "unknown"
	if rest := strings.TrimPrefix(fullMethod, "/"); strings.Contains(rest, "/") {
		service, name, _ = strings.Cut(rest, "/")
	}
	mm := &methodMetrics{m: m, labels: [3]string{typ, service, name}}
	mm.started = m.started.WithLabelValues(mm.labels[:]...)
	mm.received.vec, mm.received.labels = m.received, mm.labels[:]
	mm.sent.vec, mm.sent.labels = m.sent, mm.labels[:]
	for code := range mm.handled {
		mm.handled[code].vec, mm.handled[code].labels = m.handled, []string{typ, service, name, codes.Code(code).String()}
	}
	mm.handling = m.handling.WithLabelValues(mm.labels[:]...)
	actual, _ := m.methods.LoadOrStore(fullMethod, mm)
	return actual.(*methodMetrics)
}

// done counts a call's end: its code (a context error counts as gRPC's
// own code for it, as the server answers) and its duration.
func (mm *methodMetrics) done(err error, start time.Time) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	if code := st.Code(); int(code) < len(mm.handled) {
		mm.handled[code].Inc()
	} else { // not one of gRPC's codes: looked up each time
		mm.m.handled.WithLabelValues(mm.labels[0], mm.labels[1], mm.labels[2], code.String()).Inc()
	}
	mm.handling.Observe(time.Since(start).Seconds())
}

// unary counts a unary call: started, one message received, one sent when
// it succeeded, handled by code, its duration.
func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	mm := m.method(info.FullMethod, "unary")
	mm.started.Inc()
	mm.received.Inc()
	resp, err := handler(ctx, req)
	if err == nil {
		mm.sent.Inc()
	}
	mm.done(err, start)
	return resp, err
}

// stream counts a streaming call: started, each message received and sent
// (successfully), handled by code, its duration.
func (m *grpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	typ := "bidi_stream"
	switch {
	case info.IsClientStream && !info.IsServerStream:
		typ = "client_stream"
	case !info.IsClientStream && info.IsServerStream:
		typ = "server_stream"
	}
	mm := m.method(info.FullMethod, typ)
	mm.started.Inc()
	err := handler(srv, &countedStream{ServerStream: ss, mm: mm})
	mm.done(err, start)
	return err
}

// countedStream counts the messages of a stream.
type countedStream struct {
	grpc.ServerStream
	mm *methodMetrics
}

func (s *countedStream) SendMsg(msg any) error {
	err := s.ServerStream.SendMsg(msg)
	if err == nil {
		s.mm.sent.Inc()
	}
	return err
}

func (s *countedStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if err == nil {
		s.mm.received.Inc()
	}
	return err
}

// httpMetrics count and time the HTTP/JSON gateway's routes.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg *prometheus.Registry) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_http_requests_total",
			Help: "HTTP/JSON API calls, by route (the gateway's pattern, e.g. /v1/leases/{name}:acquire), method and status code."},
			[]string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_http_request_duration_seconds",
			Help:    "Time to answer an HTTP/JSON API call (a watch: its whole stream), by route and method.",
			Buckets: rpcBuckets}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// routeLabel is a matched route's pattern as a label: "/v1/leases/{name}"
// (the gateway writes a variable as {name=*}).
func routeLabel(p runtime.Pattern) string {
	return strings.NewReplacer("=**}", "}", "=*}", "}").Replace(p.String())
}

// middleware is the gateway middleware that observes each matched route.
func (m *httpMetrics) middleware(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		route := "unknown"
		if p, ok := runtime.HTTPPattern(r.Context()); ok {
			route = routeLabel(p)
		}
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		start := time.Now()
		next(sw, r, params)
		m.duration.WithLabelValues(route, strings.ToLower(r.Method)).Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(route, strings.ToLower(r.Method), strconv.Itoa(sw.code)).Inc()
	}
}

// statusWriter remembers the status written; it flushes (a watch's
// stream) and unwraps like the writer it wraps.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	w.wrote = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// registerBuildInfo adds coordd_build_info{version,revision,go_version} 1.
func registerBuildInfo(reg *prometheus.Registry) {
	bi := buildinfo.Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_build_info",
		Help:        "1, labelled with the running binary's module version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "go_version": bi.GoVersion}})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
}
