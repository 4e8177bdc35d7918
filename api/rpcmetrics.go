package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/internal/buildinfo"
)

// Per-call metrics: every gRPC method through grpc-ecosystem's Prometheus
// provider (grpc_server_started_total, grpc_server_handled_total by
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

// newGRPCMetrics are the gRPC server's metrics, registered in reg.
func newGRPCMetrics(reg *prometheus.Registry) *grpcprom.ServerMetrics {
	m := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(rpcBuckets)))
	reg.MustRegister(m)
	return m
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
