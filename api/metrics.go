package api

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's Prometheus collectors, registered next to the
// node's (the absence monitor has its own, monitor.go). Names are stable.
type metrics struct {
	acquisitions     *prometheus.CounterVec
	leasesLost       *prometheus.CounterVec
	fenceRejections  *prometheus.CounterVec
	fenceAccepted    *prometheus.CounterVec
	windowsClaimed   prometheus.Counter
	windowsCompleted prometheus.Counter
	windowsRefused   *prometheus.CounterVec
	forwarded        prometheus.Counter
	keepaliveStreams prometheus.Gauge
	authDenied       *prometheus.CounterVec
	limited          *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{}
	m.acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_lease_acquisitions_total",
		Help: "Acquire calls by outcome: acquired, held (someone else holds it), takeover (previous holder expired)."}, []string{"outcome"})
	m.leasesLost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_leases_lost_total",
		Help: "Leases lost, by reason: expired (taken over after its TTL, or a renew refused as expired), or the reason a holder's renew was refused (lost, released, not_found, ...)."}, []string{"reason"})
	m.fenceRejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_fence_rejections_total",
		Help: "FencedCommit calls refused, by reason."}, []string{"reason"})
	m.fenceAccepted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_fenced_commits_total",
		Help: "FencedCommit calls accepted, by kind (new, duplicate)."}, []string{"kind"})
	m.windowsClaimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "coordd_windows_claimed_total", Help: "Window claims granted."})
	m.windowsCompleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "coordd_windows_completed_total", Help: "Windows completed."})
	m.windowsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_window_refusals_total",
		Help: "Window claims and completions refused, by reason (completed for a claim on a completed window)."}, []string{"reason"})
	m.forwarded = prometheus.NewCounter(prometheus.CounterOpts{Name: "coordd_forwarded_requests_total", Help: "Calls this follower forwarded to the leader."})
	m.keepaliveStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_keepalive_streams", Help: "Open KeepAlive streams on this node."})
	m.authDenied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_auth_denied_total",
		Help: "Calls refused by authentication (op unauthenticated) or by the ACL, by op and the rule that applied."}, []string{"op", "rule"})
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_limited_total",
		Help: "Calls refused by a per-identity limit, by limit (rate, keepalive_streams, leases)."}, []string{"limit"})
	reg.MustRegister(m.authDenied, m.limited, m.acquisitions, m.leasesLost, m.fenceRejections, m.fenceAccepted,
		m.windowsClaimed, m.windowsCompleted, m.windowsRefused, m.forwarded, m.keepaliveStreams)
	registerRuntime(reg)
	registerBuildInfo(reg)
	return m
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
