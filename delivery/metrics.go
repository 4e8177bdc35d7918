package delivery

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxTargetLabels bounds the target label's values: targets beyond the
// first this many are counted as "other".
const maxTargetLabels = 100

// Metrics are a node's delivery metrics, per target (scheme://host,
// bounded) and outcome.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	refusals *prometheus.CounterVec

	mu   sync.Mutex
	seen map[string]bool
}

// NewMetrics registers the delivery metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_delivery_requests_total",
			Help: "Delivery requests this node made, by target (scheme://host; the first 100, then other) and outcome: the HTTP status class (2xx, 4xx, 5xx), error (no response), not_allowed, lost (the attempt ended while the request ran)."},
			[]string{"target", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_delivery_latency_seconds",
			Help: "Time from sending a delivery request to the end of its response body, by target.", Buckets: prometheus.DefBuckets},
			[]string{"target"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_delivery_reports_refused_total",
			Help: "Delivery outcomes the queue refused because the attempt had lapsed or been cancelled meanwhile (a late 2xx is never taken for success), by target."},
			[]string{"target"}),
		seen: map[string]bool{},
	}
	reg.MustRegister(m.requests, m.latency, m.refusals)
	return m
}

// label bounds the target label.
func (m *Metrics) label(t string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[t] {
		return t
	}
	if len(m.seen) >= maxTargetLabels {
		return "other"
	}
	m.seen[t] = true
	return t
}

func (m *Metrics) observe(t string, o outcome) {
	if m == nil {
		return
	}
	t = m.label(t)
	out := "error"
	switch {
	case o.lost:
		out = "lost"
	case o.status > 0:
		out = strconv.Itoa(o.status/100) + "xx"
	case o.refused:
		out = "not_allowed"
	}
	m.requests.WithLabelValues(t, out).Inc()
	if o.latency > 0 {
		m.latency.WithLabelValues(t).Observe(o.latency.Seconds())
	}
}

func (m *Metrics) refused(t string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(m.label(t)).Inc()
}
