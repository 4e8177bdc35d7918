package api

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"sort"
	"time"

	"github.com/coordd/coordd/internal/metriclabel"
	"github.com/coordd/coordd/internal/pbtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/leader"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Monitoring by absence (monitor.go): what did not happen. The leader
// judges, on calendar time, which occurrences of schedules are overdue (a
// job not final by occurrence + complete_within, or an occurrence due and
// not even made), and on lease time which leases look stuck. It is a read
// of the FSM: nothing here is replicated. ListOverdue answers from the
// same computation; metrics are bounded: per queue, never per job or
// schedule (the top offenders are in ListOverdue).

const (
	// maxOverdueQueues bounds the queue label of the overdue gauge; the
	// queues beyond it count under "other".
	maxOverdueQueues = 100
	// maxTopSchedules and maxStuckLeases bound ListOverdue's first page.
	maxTopSchedules = 10
	maxStuckLeases  = 100
	// maxLate bounds the occurrences not made that a pass reports.
	maxLate = 1000
)

// stuckLeases lists leases whose holder looks stuck at lease time now:
// HELD_TOO_LONG (this generation older than MaxLeaseAge) or SILENT (expired
// without a release within that age).
func (s *Server) stuckLeases(st *fsm.FSM, now int64) []*coordv1.StuckLease {
	var out []*coordv1.StuckLease
	maxAge := s.cfg.MaxLeaseAge.Milliseconds()
	st.EachLease(func(l fsm.Lease) {
		switch {
		case l.Live(now) && now-l.AcquiredAt > maxAge:
			out = append(out, &coordv1.StuckLease{Lease: leaseToProto(l, s.stampAt(now)), Reason: "HELD_TOO_LONG"})
		case !l.Released && !l.Live(now) && now-l.ExpiresAt < maxAge:
			out = append(out, &coordv1.StuckLease{Lease: leaseToProto(l, s.stampAt(now)), Reason: "SILENT"})
		}
	})
	return out
}

func overdueToProto(o fsm.OverdueJob, cal int64) *coordv1.OverdueOccurrence {
	return &coordv1.OverdueOccurrence{Schedule: o.Schedule, Window: o.Window, At: pbtime.At(o.At), Due: pbtime.At(o.Due), Overdue: pbtime.Dur(cal - o.Due),
		JobId: o.JobID, JobState: coordv1.JobState(o.State), Queue: o.Queue, Attempts: o.Attempts}
}

func encodeOverdueToken(c fsm.OverdueCursor) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(c.At))
	binary.BigEndian.PutUint64(b[8:], c.ID)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeOverdueToken(tok string) (fsm.OverdueCursor, error) {
	if tok == "" {
		return fsm.OverdueCursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 16 {
		return fsm.OverdueCursor{}, invalidArg("page_token", "is not a token this server issued")
	}
	return fsm.OverdueCursor{At: int64(binary.BigEndian.Uint64(b[:8])), ID: binary.BigEndian.Uint64(b[8:])}, nil
}

func (h *schedules) ListOverdue(ctx context.Context, req *coordv1.ListOverdueRequest) (*coordv1.ListOverdueResponse, error) {
	s := h.s
	size, err := pageSize(req.GetPageSize())
	cursor, terr := decodeOverdueToken(req.GetPageToken())
	if req.GetSchedule() != "" && err == nil {
		err = checkScheduleName("schedule", req.GetSchedule())
	}
	if err = firstErr(err, terr); err != nil {
		return nil, toStatus(err)
	}
	return schedulesOnLeader(s, ctx, coordv1.SchedulesClient.ListOverdue, req, func() (*coordv1.ListOverdueResponse, error) {
		st, now, err := s.node.Read(ctx, false)
		if err != nil {
			return nil, err
		}
		cal := s.node.CalendarTime()
		out := &coordv1.ListOverdueResponse{CalendarTime: pbtime.At(cal)}
		jobs, next, more := st.OverdueJobs(cal, req.GetSchedule(), cursor, size)
		for _, o := range jobs {
			out.Occurrences = append(out.Occurrences, overdueToProto(o, cal))
		}
		if more {
			out.NextPageToken = encodeOverdueToken(next)
		}
		if req.GetPageToken() != "" {
			return out, nil
		}
		// The first page: occurrences not even made (before the others:
		// the leader is behind), the total and the top offenders, stuck
		// leases.
		var late []*coordv1.OverdueOccurrence
		for _, o := range st.LateSchedules(cal, maxLate) {
			if req.GetSchedule() == "" || o.Schedule == req.GetSchedule() {
				late = append(late, overdueToProto(o, cal))
			}
		}
		out.Occurrences = append(late, out.Occurrences...)
		sum := st.Overdue(cal)
		out.Total = int64(sum.Total + len(late))
		if req.GetSchedule() != "" {
			out.Total = int64(sum.PerSchedule[req.GetSchedule()] + len(late))
		}
		for _, name := range sum.Top(maxTopSchedules) {
			out.TopSchedules = append(out.TopSchedules, &coordv1.OverdueSchedule{Schedule: name,
				Overdue: int64(sum.PerSchedule[name]), OldestAt: pbtime.At(sum.Oldest[name])})
		}
		stuck := s.stuckLeases(st, now)
		out.StuckLeases = stuck[:min(len(stuck), maxStuckLeases)]
		return out, nil
	})
}

// absenceMonitor is the absence monitor, a leader service (node/leader):
// while this node leads, every MonitorInterval it judges overdue
// occurrences on calendar time and stuck leases on lease time, and
// publishes them; when leadership ends it clears the gauges, so alerts
// never count anything twice.
type absenceMonitor struct{ s *Server }

func (absenceMonitor) Name() string { return "absence-monitor" }

func (m absenceMonitor) Run(ctx context.Context, l leader.Leadership) error {
	s := m.s
	defer s.monitor.clear()
	return leader.Every(ctx, s.cfg.Clock, s.cfg.MonitorInterval, func() {
		st, _, err := s.node.Read(ctx, true) // this leader's own state, judged on its clocks
		if err != nil {
			return
		}
		cal := l.CalendarTime()
		s.observeAbsence(st.Overdue(cal), st.LateSchedules(cal, maxLate), s.stuckLeases(st, l.LeaseTime()), st)
	})
}

// monitor runs on the leader: gauges and one log line per schedule that
// becomes overdue and per newly stuck lease.
type monitor struct {
	overdue   *prometheus.GaugeVec
	late      prometheus.Gauge
	schedules *prometheus.GaugeVec
	stuck     *prometheus.GaugeVec
	reported  map[string]bool
}

func newMonitorMetrics(reg *prometheus.Registry) *monitor {
	f := promauto.With(reg) // registers what it makes
	return &monitor{
		overdue: f.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_schedule_overdue_occurrences",
			Help: "Occurrences of schedules whose job is not final by occurrence + complete_within, per queue (the first 100 queues; the rest count as \"other\"; leader only)."}, []string{"queue"}),
		late: f.NewGauge(prometheus.GaugeOpts{Name: "coordd_schedule_late_occurrences",
			Help: "Occurrences of schedules due by more than complete_within and not made yet (the leader is behind; leader only)."}),
		schedules: f.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_schedules",
			Help: "Schedules by state: active, paused, deleted (tombstones kept for their history; leader only)."}, []string{"state"}),
		stuck: f.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_stuck_leases",
			Help: "Leases held longer than the maximum age (held_too_long) or whose renewals stopped (silent)."}, []string{"reason"}),
		reported: map[string]bool{},
	}
}

// observeAbsence publishes one pass; only the leader calls it.
func (s *Server) observeAbsence(sum fsm.OverdueSummary, late []fsm.OverdueJob, stuck []*coordv1.StuckLease, st *fsm.FSM) {
	m := s.monitor
	m.overdue.Reset()
	queues := make([]string, 0, len(sum.PerQueue))
	for q := range sum.PerQueue {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	for i, q := range queues {
		label := q
		if i >= maxOverdueQueues {
			label = "other"
		}
		m.overdue.WithLabelValues(label).Add(float64(sum.PerQueue[q]))
	}
	m.late.Set(float64(len(late)))
	active, paused, deleted := st.ScheduleCounts()
	m.schedules.WithLabelValues("active").Set(float64(active))
	m.schedules.WithLabelValues("paused").Set(float64(paused))
	m.schedules.WithLabelValues("deleted").Set(float64(deleted))
	m.stuck.Reset()
	m.stuck.WithLabelValues("held_too_long").Set(0)
	m.stuck.WithLabelValues("silent").Set(0)
	seen := map[string]bool{}
	for _, name := range sum.Top(len(sum.PerSchedule)) {
		k := "schedule/" + name
		seen[k] = true
		if !m.reported[k] {
			s.log.Warn("schedule has overdue occurrences", "schedule", name, "overdue", sum.PerSchedule[name],
				"oldest", time.UnixMilli(sum.Oldest[name]).UTC().Format(time.RFC3339))
		}
	}
	for _, o := range late {
		k := "late/" + o.Schedule
		seen[k] = true
		if !m.reported[k] {
			s.log.Warn("schedule occurrence not made in time: the leader is behind", "schedule", o.Schedule,
				"occurrence", time.UnixMilli(o.At).UTC().Format(time.RFC3339))
		}
	}
	for _, l := range stuck {
		m.stuck.WithLabelValues(metriclabel.Value(l.GetReason())).Inc()
		k := "lease/" + l.GetReason() + "/" + l.GetLease().GetName() + "/" + u64(l.GetLease().GetGeneration())
		seen[k] = true
		if !m.reported[k] {
			s.log.Warn("lease looks stuck", "lease", l.GetLease().GetName(), "reason", l.GetReason(),
				"owner", l.GetLease().GetOwner(), "generation", l.GetLease().GetGeneration(),
				"held", pbtime.Duration(l.GetLease().GetHeld()),
				"renewed_ago", pbtime.Duration(l.GetLease().GetRenewedAgo()))
		}
	}
	m.reported = seen
}

// clear drops the gauges when this node stops leading: only the leader
// reports absence, so alerts never count anything twice.
func (m *monitor) clear() {
	m.overdue.Reset()
	m.late.Set(0)
	m.schedules.Reset()
	m.stuck.Reset()
}
