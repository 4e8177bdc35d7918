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

// JobMetrics implements jobs.Metrics with Prometheus collectors, labelled
// by job (the process's host is the scrape target's instance).
type JobMetrics struct {
	started, completed, failed, skipped, missed, lost *prometheus.CounterVec
	lag, duration, ratio                              *prometheus.HistogramVec
}

// NewJobMetrics creates the runner's collectors and registers them.
func NewJobMetrics(reg prometheus.Registerer) *JobMetrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"job"})
	}
	m := &JobMetrics{
		started:   counter("coordd_job_runs_started_total", "Occurrences this replica started."),
		completed: counter("coordd_job_runs_completed_total", "Occurrences this replica completed."),
		failed:    counter("coordd_job_runs_failed_total", "Runs that returned an error (the window stays incomplete and is retried)."),
		skipped:   counter("coordd_job_runs_skipped_total", "Occurrences this replica did not run because another replica held the lease."),
		missed:    counter("coordd_job_runs_missed_total", "Occurrences skipped past their starting deadline or catch-up horizon."),
		lost:      counter("coordd_job_leases_lost_total", "Runs whose lease was lost."),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_job_start_lag_seconds",
			Help: "Actual start minus the occurrence.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}, []string{"job"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_job_run_duration_seconds",
			Help: "Duration of completed runs.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 24)}, []string{"job"}),
		ratio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_job_run_duration_ratio",
			Help:    "Duration of completed runs divided by the job's interval (above 0.5 deserves a look).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2}}, []string{"job"}),
	}
	reg.MustRegister(m.started, m.completed, m.failed, m.skipped, m.missed, m.lost, m.lag, m.duration, m.ratio)
	return m
}

func (m *JobMetrics) RunStarted(job string, lag time.Duration) {
	m.started.WithLabelValues(job).Inc()
	m.lag.WithLabelValues(job).Observe(lag.Seconds())
}

func (m *JobMetrics) RunCompleted(job string, d, interval time.Duration) {
	m.completed.WithLabelValues(job).Inc()
	m.duration.WithLabelValues(job).Observe(d.Seconds())
	if interval > 0 {
		m.ratio.WithLabelValues(job).Observe(d.Seconds() / interval.Seconds())
	}
}

func (m *JobMetrics) RunFailed(job string)  { m.failed.WithLabelValues(job).Inc() }
func (m *JobMetrics) RunSkipped(job string) { m.skipped.WithLabelValues(job).Inc() }
func (m *JobMetrics) RunMissed(job string)  { m.missed.WithLabelValues(job).Inc() }
func (m *JobMetrics) LeaseLost(job string)  { m.lost.WithLabelValues(job).Inc() }
