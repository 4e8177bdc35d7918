package node

import (
	"sync"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/internal/metriclabel"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// metrics are the node's Prometheus collectors (the API registers its own
// in the same registry). Names are stable.
type metrics struct {
	leader           prometheus.Gauge
	applyLatency     prometheus.Histogram
	proposals        *prometheus.CounterVec
	proposalCounters sync.Map // proposalKey -> prometheus.Counter: no label hashing per command
	waiters          prometheus.Gauge
	schedules        *scheduleMetrics
	fetchWaiters     prometheus.Gauge
}

func newMetrics(n *Node, reg *prometheus.Registry) *metrics {
	m := &metrics{}
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_raft_leader", Help: "1 when this node is the Raft leader."})
	m.applyLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "coordd_apply_duration_seconds", Help: "Time from proposal to applied result on the leader (commit + apply).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m.proposals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_proposals_total",
		Help: "Commands proposed by this node as leader, by type (acquire, renew, submit_jobs, ...) and outcome (ok, rejected, error)."}, []string{"type", "outcome"})
	m.waiters = prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_acquire_waiters",
		Help: "Acquire calls waiting for a held lease on this leader (AcquireRequest.wait)."})
	m.fetchWaiters = prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_fetch_waiters",
		Help: "Queue Fetch calls long-polling on this leader (QueueFetchRequest.wait_ms)."})
	reg.MustRegister(m.leader, m.applyLatency, m.proposals, m.waiters, m.fetchWaiters, &raftCollector{n: n})
	m.schedules = newScheduleMetrics(reg)
	return m
}

// raftCollector reads Raft and FSM state at scrape time.
type raftCollector struct{ n *Node }

var (
	descState     = prometheus.NewDesc("coordd_raft_state", "Raft state of this node (1 for the current state: follower, candidate, leader, shutdown).", []string{"state"}, nil)
	descTerm      = prometheus.NewDesc("coordd_raft_term", "Current Raft term.", nil, nil)
	descCommit    = prometheus.NewDesc("coordd_raft_commit_index", "Raft commit index.", nil, nil)
	descApplied   = prometheus.NewDesc("coordd_raft_applied_index", "Raft applied index.", nil, nil)
	descLastIndex = prometheus.NewDesc("coordd_raft_last_index", "Last index in the Raft log.", nil, nil)
	descLive      = prometheus.NewDesc("coordd_live_leases", "Leases held at the applied lease time.", nil, nil)
	descRecords   = prometheus.NewDesc("coordd_fsm_records", "Records in the state machine, by family.", []string{"family"}, nil)
	descClock     = prometheus.NewDesc("coordd_cluster_time_seconds", "Lease time as applied by this node (the name is from before \"lease time\").", nil, nil)
	descLag       = prometheus.NewDesc("coordd_lease_clock_lag_seconds",
		"Calendar time minus lease time: on the leader its clocks now, elsewhere the last applied stamps.", nil, nil)
)

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTerm, descCommit, descApplied, descLastIndex, descLive, descRecords, descClock, descLag} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.n.raft
	if r == nil {
		return
	}
	st := r.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, b2f(s == st), metriclabel.Value(s.String()))
	}
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(r.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(r.CommitIndex()))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(r.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(descLastIndex, prometheus.GaugeValue, float64(r.LastIndex()))
	f := c.n.fsm
	clock := f.LeaseTime()
	ch <- prometheus.MustNewConstMetric(descClock, prometheus.GaugeValue, float64(clock)/1000)
	ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(f.LiveLeases(clock)))
	if lease, cal := c.n.times(); cal > 0 {
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(cal-lease)/1000)
	}
	l, w, res, idem := f.Counts()
	for fam, n := range map[string]int{"leases": l, "windows": w, "resources": res, "idempotency": idem, "queue_jobs": f.QueueJobCount()} {
		ch <- prometheus.MustNewConstMetric(descRecords, prometheus.GaugeValue, float64(n), fam)
	}
}

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
	c := m.proposals.WithLabelValues(metriclabel.Value(t.String(), "COMMAND_TYPE_"), outcome)
	m.proposalCounters.Store(k, c)
	return c
}
