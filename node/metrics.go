package server

import (
	"strconv"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// metrics are one node's Prometheus collectors, in a registry of its own
// (several nodes can live in one test process). Names are stable.
type metrics struct {
	reg              *prometheus.Registry
	leader           prometheus.Gauge
	applyLatency     prometheus.Histogram
	proposals        *prometheus.CounterVec
	proposalCounters sync.Map // proposalKey -> prometheus.Counter: no label hashing per command
	acquisitions     *prometheus.CounterVec
	leasesLost       *prometheus.CounterVec
	fenceRejections  *prometheus.CounterVec
	fenceAccepted    *prometheus.CounterVec
	windowsClaimed   prometheus.Counter
	windowsCompleted prometheus.Counter
	windowsRefused   *prometheus.CounterVec
	forwarded        prometheus.Counter
	keepaliveStreams prometheus.Gauge
	waiters          prometheus.Gauge
	authDenied       *prometheus.CounterVec
	limited          *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &metrics{reg: reg}
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_raft_leader", Help: "1 when this node is the Raft leader."})
	m.applyLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "coordd_apply_duration_seconds", Help: "Time from proposal to applied result on the leader (commit + apply).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m.proposals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_proposals_total",
		Help: "Commands proposed by this node as leader, by type and outcome (ok, rejected, error)."}, []string{"type", "outcome"})
	m.acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_lease_acquisitions_total",
		Help: "Acquire calls by outcome: acquired, held (someone else holds it), takeover (previous holder expired)."}, []string{"outcome"})
	m.leasesLost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_leases_lost_total",
		Help: "Leases lost, by reason: expired (taken over after its TTL), or the reason a holder's renew was refused."}, []string{"reason"})
	m.fenceRejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_fence_rejections_total",
		Help: "FencedCommit calls refused, by reason."}, []string{"reason"})
	m.fenceAccepted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_fenced_commits_total",
		Help: "FencedCommit calls accepted, by kind (new, duplicate)."}, []string{"kind"})
	m.windowsClaimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "coordd_windows_claimed_total", Help: "Window claims granted."})
	m.windowsCompleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "coordd_windows_completed_total", Help: "Windows completed."})
	m.windowsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_window_refusals_total",
		Help: "Window claims and completions refused, by reason (WINDOW_COMPLETED for a claim on a completed window)."}, []string{"reason"})
	m.forwarded = prometheus.NewCounter(prometheus.CounterOpts{Name: "coordd_forwarded_requests_total", Help: "Calls this follower forwarded to the leader."})
	m.keepaliveStreams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_keepalive_streams", Help: "Open KeepAlive streams on this node."})
	m.authDenied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_auth_denied_total",
		Help: "Calls refused by authentication (op unauthenticated) or by the ACL, by op and the rule that applied."}, []string{"op", "rule"})
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_limited_total",
		Help: "Calls refused by a per-identity limit, by limit (rate, keepalive_streams, leases)."}, []string{"limit"})
	m.waiters = prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_acquire_waiters",
		Help: "Acquire calls waiting for a held lease on this leader (AcquireRequest.wait)."})
	for _, c := range []prometheus.Collector{m.waiters, m.authDenied, m.limited, m.leader, m.applyLatency, m.proposals, m.acquisitions, m.leasesLost,
		m.fenceRejections, m.fenceAccepted, m.windowsClaimed, m.windowsCompleted, m.windowsRefused, m.forwarded, m.keepaliveStreams} {
		f(c)
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f(&raftCollector{s: s})
	return m
}

// raftCollector reads Raft and FSM state at scrape time.
type raftCollector struct{ s *Server }

var (
	descState     = prometheus.NewDesc("coordd_raft_state", "Raft state of this node (1 for the current state).", []string{"state"}, nil)
	descTerm      = prometheus.NewDesc("coordd_raft_term", "Current Raft term.", nil, nil)
	descCommit    = prometheus.NewDesc("coordd_raft_commit_index", "Raft commit index.", nil, nil)
	descApplied   = prometheus.NewDesc("coordd_raft_applied_index", "Raft applied index.", nil, nil)
	descLastIndex = prometheus.NewDesc("coordd_raft_last_index", "Last index in the Raft log.", nil, nil)
	descLive      = prometheus.NewDesc("coordd_live_leases", "Leases held at the applied cluster time.", nil, nil)
	descRecords   = prometheus.NewDesc("coordd_fsm_records", "Records in the state machine, by family.", []string{"family"}, nil)
	descClock     = prometheus.NewDesc("coordd_cluster_time_seconds", "Cluster time as applied by this node.", nil, nil)
)

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTerm, descCommit, descApplied, descLastIndex, descLive, descRecords, descClock} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.s.raft
	if r == nil {
		return
	}
	st := r.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, b2f(s == st), s.String())
	}
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(r.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(r.CommitIndex()))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(r.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(descLastIndex, prometheus.GaugeValue, float64(r.LastIndex()))
	clock := c.s.fsm.Clock()
	ch <- prometheus.MustNewConstMetric(descClock, prometheus.GaugeValue, float64(clock)/1000)
	ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(c.s.fsm.LiveLeases(clock)))
	l, w, res, idem := c.s.fsm.Counts()
	for fam, n := range map[string]int{"leases": l, "windows": w, "resources": res, "idempotency": idem} {
		ch <- prometheus.MustNewConstMetric(descRecords, prometheus.GaugeValue, float64(n), fam)
	}
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

type proposalKey struct {
	t       fsmv1.CommandType
	outcome string
}

// proposed is the proposals counter of a command type and outcome.
func (m *metrics) proposed(t fsmv1.CommandType, outcome string) prometheus.Counter {
	k := proposalKey{t, outcome}
	if c, ok := m.proposalCounters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := m.proposals.WithLabelValues(t.String(), outcome)
	m.proposalCounters.Store(k, c)
	return c
}

// Gatherer exposes this node's metrics registry (tests and embedders).
func (s *Server) Gatherer() prometheus.Gatherer { return s.metrics.reg }
