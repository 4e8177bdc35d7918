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

// JobMetrics implements periodic.Metrics with Prometheus collectors, labelled
// by job (the process's host is the scrape target's instance). What the
// cluster decides (skipped, overdue occurrences) is coordd's own metrics.
type JobMetrics struct {
	started, completed, failed, lost *prometheus.CounterVec
	lag, duration                    *prometheus.HistogramVec
}

// NewJobMetrics creates the runner's collectors and registers them.
func NewJobMetrics(reg prometheus.Registerer) *JobMetrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"job"})
	}
	m := &JobMetrics{
		started:   counter("coordd_job_runs_started_total", "Attempts of occurrences this replica started."),
		completed: counter("coordd_job_runs_completed_total", "Occurrences this replica completed."),
		failed:    counter("coordd_job_runs_failed_total", "Attempts that returned an error (retried with backoff while attempts remain)."),
		lost:      counter("coordd_job_claims_lost_total", "Attempts whose claim was lost while they ran."),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_job_start_lag_seconds",
			Help: "Actual start minus the occurrence.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}, []string{"job"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_job_run_duration_seconds",
			Help: "Duration of completed runs.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 24)}, []string{"job"}),
	}
	reg.MustRegister(m.started, m.completed, m.failed, m.lost, m.lag, m.duration)
	return m
}

func (m *JobMetrics) RunStarted(job string, lag time.Duration) {
	m.started.WithLabelValues(job).Inc()
	m.lag.WithLabelValues(job).Observe(lag.Seconds())
}

func (m *JobMetrics) RunCompleted(job string, d time.Duration) {
	m.completed.WithLabelValues(job).Inc()
	m.duration.WithLabelValues(job).Observe(d.Seconds())
}

func (m *JobMetrics) RunFailed(job string) { m.failed.WithLabelValues(job).Inc() }
func (m *JobMetrics) ClaimLost(job string) { m.lost.WithLabelValues(job).Inc() }
