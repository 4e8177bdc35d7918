// Package clientprom implements client.Metrics with Prometheus collectors.
//
//	m := clientprom.New(prometheus.DefaultRegisterer)
//	c, err := client.New(ctx, endpoints, client.WithMetrics(m))
package clientprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the SDK's collectors.
type Metrics struct {
	lost     *prometheus.CounterVec
	renew    prometheus.Histogram
	skipped  *prometheus.CounterVec
	rejected *prometheus.CounterVec
}

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_client_leases_lost_total",
			Help: "Leases this process lost, by lease and reason."}, []string{"lease", "reason"}),
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coordd_client_renew_duration_seconds",
			Help: "Round trip of acknowledged keepalive renewals.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_client_runs_skipped_total",
			Help: "RunExclusive calls that did not run because another owner held the lease."}, []string{"lease"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_client_fence_rejections_total",
			Help: "Fenced commits refused, by reason."}, []string{"reason"}),
	}
	reg.MustRegister(m.lost, m.renew, m.skipped, m.rejected)
	return m
}

func (m *Metrics) LeaseLost(name, reason string)  { m.lost.WithLabelValues(name, reason).Inc() }
func (m *Metrics) RenewLatency(d time.Duration)   { m.renew.Observe(d.Seconds()) }
func (m *Metrics) RunSkipped(name string)         { m.skipped.WithLabelValues(name).Inc() }
func (m *Metrics) FenceRejected(_, reason string) { m.rejected.WithLabelValues(reason).Inc() }
