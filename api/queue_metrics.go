package api

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/metriclabel"
)

// Queue metrics, per queue with bounded cardinality: no per-job series,
// and at most MaxQueueSeries queues get series of their own; the others
// are summed under queue="_other" (the histogram: the first
// MaxQueueSeries queue names this node sees; the gauges and counters: the
// first MaxQueueSeries by name).
//
// Counts per state and the counters come from this node's FSM at scrape
// time (every node reports its replica; the counters restart when a node
// restarts or installs a snapshot, as Prometheus counters may). The start
// lag is observed where jobs are handed out: on the leader.
const (
	MaxQueueSeries = 100
	otherQueues    = "_other"
)

type queueMetrics struct {
	startLag *prometheus.HistogramVec
	refusals *prometheus.CounterVec

	mu    sync.Mutex
	names map[string]prometheus.Observer // queues with series of their own
}

func newQueueMetrics(reg *prometheus.Registry, s *Server) *queueMetrics {
	m := &queueMetrics{names: map[string]prometheus.Observer{}}
	m.startLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coordd_queue_start_lag_seconds",
		Help: "Time from a job's run_at to its hand-out to a worker (calendar time), on the leader; " +
			"hand-outs after a lapsed attempt are not observed.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"queue"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_queue_attempt_refusals_total",
		Help: "Heartbeat, Complete and Fail items refused, by reason (expired, lost, job_cancelled, ...)."},
		[]string{"reason"})
	reg.MustRegister(m.startLag, m.refusals, &queueCollector{s: s}, &pausedCollector{s: s})
	return m
}

// observeStart records the start lag of a job just handed out (attempt a).
func (m *queueMetrics) observeStart(j *fsm.QueueJob, a *fsm.Attempt) {
	if a == nil || (len(j.Log) >= 2 && j.Log[len(j.Log)-2].Outcome == fsm.AttemptLapsed) {
		return // a lapse keeps run_at: its lag would be the visibility timeout
	}
	m.observer(j.Queue).Observe(float64(max(0, a.StartedAt-j.RunAt)) / 1000)
}

func (m *queueMetrics) observer(queue string) prometheus.Observer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.names[queue]; ok {
		return o
	}
	if len(m.names) >= MaxQueueSeries {
		return m.startLag.WithLabelValues(otherQueues)
	}
	o := m.startLag.WithLabelValues(queue)
	m.names[queue] = o
	return o
}

func (m *queueMetrics) refused(rej *fsm.Rejection) {
	m.refusals.WithLabelValues(metriclabel.Value(coorderr.Name(rej.Reason), "ATTEMPT_")).Inc()
}

// queueCollector reads the queue's counts from this node's FSM at scrape
// time.
type queueCollector struct{ s *Server }

var (
	descQueueJobs = prometheus.NewDesc("coordd_queue_jobs", "Queued jobs by queue and state, in this node's replica.",
		[]string{"queue", "state"}, nil)
	descQueueOldest = prometheus.NewDesc("coordd_queue_oldest_available_age_seconds",
		"How long the oldest available job of a queue has been due (dispatch lag); 0 when none is available.", []string{"queue"}, nil)
	// descQueueCounters are the per-queue counters and how to read each.
	descQueueCounters = []struct {
		desc *prometheus.Desc
		get  func(fsm.QueueCounters) uint64
	}{
		{perQueue("coordd_queue_jobs_submitted_total", "Jobs submitted"), func(c fsm.QueueCounters) uint64 { return c.Submitted }},
		{perQueue("coordd_queue_attempts_total", "Attempts handed out"), func(c fsm.QueueCounters) uint64 { return c.Attempts }},
		{perQueue("coordd_queue_jobs_succeeded_total", "Jobs completed"), func(c fsm.QueueCounters) uint64 { return c.Succeeded }},
		{perQueue("coordd_queue_failures_total", "Attempts that failed or lapsed"), func(c fsm.QueueCounters) uint64 { return c.Failures }},
		{perQueue("coordd_queue_lapses_total", "Attempts whose visibility timeout passed without a heartbeat"),
			func(c fsm.QueueCounters) uint64 { return c.Lapses }},
		{perQueue("coordd_queue_jobs_dead_total", "Jobs that died (failed without retry or out of attempts)"),
			func(c fsm.QueueCounters) uint64 { return c.Dead }},
		{perQueue("coordd_queue_jobs_cancelled_total", "Jobs cancelled"), func(c fsm.QueueCounters) uint64 { return c.Cancelled }},
	}
)

// perQueue describes a counter by queue (help says what it counts).
func perQueue(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help+", by queue.", []string{"queue"}, nil)
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descQueueJobs
	ch <- descQueueOldest
	ch <- descQueueConcurrencyLimit
	ch <- descQueueRateLimit
	for _, d := range descQueueCounters {
		ch <- d.desc
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	st, _, err := c.s.node.Read(context.Background(), true)
	if err != nil || st == nil {
		return
	}
	stats := st.QueueStats("", c.s.node.CalendarTime())
	collectLimits(ch, st)            // queue_limits.go
	if len(stats) > MaxQueueSeries { // sorted by name: the rest are summed
		other := fsm.QueueStats{Queue: otherQueues}
		for _, x := range stats[MaxQueueSeries:] {
			other.Scheduled += x.Scheduled
			other.Available += x.Available
			other.Running += x.Running
			other.Retryable += x.Retryable
			other.Succeeded += x.Succeeded
			other.Cancelled += x.Cancelled
			other.Dead += x.Dead
			other.OldestAvailableAgeMs = max(other.OldestAvailableAgeMs, x.OldestAvailableAgeMs)
			other.Submitted += x.Submitted
			other.Attempts += x.Attempts
			other.QueueCounters.Succeeded += x.QueueCounters.Succeeded
			other.Failures += x.Failures
			other.Lapses += x.Lapses
			other.QueueCounters.Dead += x.QueueCounters.Dead
			other.QueueCounters.Cancelled += x.QueueCounters.Cancelled
		}
		stats = append(stats[:MaxQueueSeries:MaxQueueSeries], other)
	}
	for _, x := range stats {
		for state, n := range map[string]uint64{"scheduled": x.Scheduled, "available": x.Available, "running": x.Running,
			"retryable": x.Retryable, "succeeded": x.Succeeded, "cancelled": x.Cancelled, "dead": x.Dead} {
			ch <- prometheus.MustNewConstMetric(descQueueJobs, prometheus.GaugeValue, float64(n), x.Queue, state)
		}
		ch <- prometheus.MustNewConstMetric(descQueueOldest, prometheus.GaugeValue, float64(x.OldestAvailableAgeMs)/1000, x.Queue)
		for _, d := range descQueueCounters {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.get(x.QueueCounters)), x.Queue)
		}
	}
}
