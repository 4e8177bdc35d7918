package api

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/fsm"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/schedule"
)

// Monitoring by absence (monitor.go): the leader computes which expected
// windows of registered jobs are not completed by occurrence +
// complete_within (also windows nobody ever claimed) and which runs took
// more than half their interval on calendar time (the leader's wall
// clock, node.Calendar), and which leases look stuck on lease time. It is
// a read of the FSM: nothing here is replicated.

// absence is one pass of the computation.
type absence struct {
	overdue  []*coordv1.OverdueWindow
	stuck    []*coordv1.StuckLease
	slow     []*coordv1.SlowWindow
	perJob   map[string]int
	lastDone map[string]int64 // job -> last completion (calendar ms)
}

// schedules caches parsed schedules by expression and zone.
type schedules struct {
	mu sync.Mutex
	m  map[[2]string]*schedule.Schedule
}

func (c *schedules) get(expr, tz string) (*schedule.Schedule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := [2]string{expr, tz}
	if s, ok := c.m[k]; ok {
		return s, nil
	}
	s, err := schedule.Parse(expr, tz)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[[2]string]*schedule.Schedule{}
	}
	c.m[k] = s
	return s, nil
}

// completeWithin is the job's due delay: its own, else one interval (an
// hour for one-shot jobs).
func completeWithin(j fsm.Job, s *schedule.Schedule) time.Duration {
	if j.CompleteWithinMs > 0 {
		return time.Duration(j.CompleteWithinMs) * time.Millisecond
	}
	if s.Interval() > 0 {
		return s.Interval()
	}
	return time.Hour
}

// jobOverdue lists the expected windows of one job that are overdue at
// calendar time now.
func (s *Server) jobOverdue(st *fsm.FSM, j fsm.Job, now int64) ([]*coordv1.OverdueWindow, *schedule.Schedule) {
	sched, err := s.schedules.get(j.Schedule, j.TimeZone)
	if err != nil {
		return nil, nil
	}
	cw := completeWithin(j, sched)
	from := max(j.RegisteredAt, now-s.cfg.OverdueLookback.Milliseconds())
	to := now - cw.Milliseconds()
	if to <= from {
		return nil, sched
	}
	var out []*coordv1.OverdueWindow
	seen := map[string]bool{}
	win := schedule.Window{Layout: j.WindowLayout, ShiftDays: int(j.WindowShiftDays)}
	for _, occ := range sched.Between(time.UnixMilli(from), time.UnixMilli(to), maxOccurrencesPerJob) {
		key := sched.Key(occ, win)
		if seen[key] {
			continue // a wall time that happened twice (DST): one window
		}
		seen[key] = true
		w, ok := st.Window(j.Name, key)
		if ok && w.Completed {
			continue
		}
		due := occ.Add(cw).UnixMilli()
		out = append(out, &coordv1.OverdueWindow{Job: j.Name, Window: key, Occurrence: occ.UnixMilli(), Due: due,
			OverdueMs: now - due, Claimed: ok, Attempts: w.Attempts, Owner: w.Owner})
	}
	return out, sched
}

// maxOccurrencesPerJob bounds the occurrences examined per job and pass.
const maxOccurrencesPerJob = 200

// computeAbsence judges windows at calendar time cal and leases at lease
// time now.
func (s *Server) computeAbsence(st *fsm.FSM, now, cal int64) absence {
	a := absence{perJob: map[string]int{}, lastDone: map[string]int64{}}
	for _, j := range st.Jobs() {
		od, sched := s.jobOverdue(st, j, cal)
		a.overdue = append(a.overdue, od...)
		a.perJob[j.Name] = len(od)
		a.lastDone[j.Name] = j.LastCompletedAt
		if sched == nil || sched.Interval() <= 0 {
			continue
		}
		for _, w := range st.RecentWindows(j.Name, 20) {
			if d := w.CompletedAt - w.FirstStartedAt; w.Completed && d > sched.Interval().Milliseconds()/2 {
				a.slow = append(a.slow, &coordv1.SlowWindow{Job: j.Name, Window: w.Window, DurationMs: d,
					IntervalMs: sched.Interval().Milliseconds()})
			}
		}
	}
	maxAge := s.cfg.MaxLeaseAge.Milliseconds()
	st.EachLease(func(l fsm.Lease) {
		switch {
		case l.Live(now) && now-l.AcquiredAt > maxAge:
			a.stuck = append(a.stuck, &coordv1.StuckLease{Lease: leaseToProto(l, now), Reason: "HELD_TOO_LONG"})
		case !l.Released && !l.Live(now) && now-l.ExpiresAt < maxAge:
			a.stuck = append(a.stuck, &coordv1.StuckLease{Lease: leaseToProto(l, now), Reason: "SILENT"})
		}
	})
	sort.SliceStable(a.overdue, func(i, k int) bool { return a.overdue[i].GetOccurrence() < a.overdue[k].GetOccurrence() })
	return a
}

// runMonitor is the absence monitor: while this node leads (the node runs
// it through WhileLeading), every MonitorInterval it computes absence
// (windows on calendar time, leases on lease time) and publishes it; when
// leadership ends it clears the gauges, so alerts never count a window
// twice.
func (s *Server) runMonitor(ctx context.Context, now func() int64) {
	defer s.monitor.clear()
	t := s.cfg.Clock.NewTicker(s.cfg.MonitorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		st, _, err := s.node.Read(ctx, true) // this leader's own state; now is its clock
		if err != nil {
			continue
		}
		s.observeAbsence(s.computeAbsence(st, now(), s.node.Calendar()))
	}
}

// monitor runs on the leader: gauges and one log line per newly overdue
// window and newly stuck lease.
type monitor struct {
	overdue  *prometheus.GaugeVec
	lastDone *prometheus.GaugeVec
	slow     *prometheus.GaugeVec
	stuck    *prometheus.GaugeVec
	reported map[string]bool
}

func newMonitorMetrics(reg *prometheus.Registry) *monitor {
	m := &monitor{
		overdue: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_job_overdue_windows",
			Help: "Expected windows of a job not completed by occurrence + complete_within (leader only)."}, []string{"job"}),
		lastDone: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_job_last_completed_timestamp_seconds",
			Help: "Calendar time of the job's last completed window."}, []string{"job"}),
		slow: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_job_slow_windows",
			Help: "Recent windows whose run took more than half the job's interval."}, []string{"job"}),
		stuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_stuck_leases",
			Help: "Leases held longer than the maximum age (HELD_TOO_LONG) or whose renewals stopped (SILENT)."}, []string{"reason"}),
		reported: map[string]bool{},
	}
	reg.MustRegister(m.overdue, m.lastDone, m.slow, m.stuck)
	return m
}

// observe publishes one pass; only the leader calls it.
func (s *Server) observeAbsence(a absence) {
	m := s.monitor
	m.overdue.Reset()
	m.lastDone.Reset()
	m.slow.Reset()
	for job, n := range a.perJob {
		m.overdue.WithLabelValues(job).Set(float64(n))
		if t := a.lastDone[job]; t > 0 {
			m.lastDone.WithLabelValues(job).Set(float64(t) / 1000)
		}
		m.slow.WithLabelValues(job).Set(0)
	}
	for _, w := range a.slow {
		m.slow.WithLabelValues(w.GetJob()).Inc()
	}
	m.stuck.Reset()
	m.stuck.WithLabelValues("HELD_TOO_LONG").Set(0)
	m.stuck.WithLabelValues("SILENT").Set(0)
	now := map[string]bool{}
	for _, w := range a.overdue {
		k := "window/" + w.GetJob() + "/" + w.GetWindow()
		now[k] = true
		if !m.reported[k] {
			s.log.Warn("window overdue", "job", w.GetJob(), "window", w.GetWindow(),
				"occurrence", time.UnixMilli(w.GetOccurrence()).UTC().Format(time.RFC3339),
				"overdue_by", time.Duration(w.GetOverdueMs())*time.Millisecond, "claimed", w.GetClaimed(),
				"attempts", w.GetAttempts(), "owner", w.GetOwner())
		}
	}
	for _, l := range a.stuck {
		m.stuck.WithLabelValues(l.GetReason()).Inc()
		k := "lease/" + l.GetReason() + "/" + l.GetLease().GetName() + "/" + u64(l.GetLease().GetGeneration())
		now[k] = true
		if !m.reported[k] {
			s.log.Warn("lease looks stuck", "lease", l.GetLease().GetName(), "reason", l.GetReason(),
				"owner", l.GetLease().GetOwner(), "generation", l.GetLease().GetGeneration(),
				"held", time.Duration(l.GetLease().GetHeldMs())*time.Millisecond,
				"renewed_ago", time.Duration(l.GetLease().GetRenewedAgoMs())*time.Millisecond)
		}
	}
	m.reported = now
}

// clear drops the gauges when this node stops leading: only the leader
// reports absence, so alerts never count a window twice.
func (m *monitor) clear() {
	m.overdue.Reset()
	m.lastDone.Reset()
	m.slow.Reset()
	m.stuck.Reset()
}
