package node

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/metriclabel"
	"github.com/coordd/coordd/internal/tracectx"
	"github.com/coordd/coordd/node/leader"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	"github.com/coordd/coordd/schedule"
)

// The materialiser: while this node leads, it turns the due occurrences of
// schedules into queue jobs (DESIGN.md, "Schedules"). It works on calendar
// time. Each round takes the schedules whose next due time has come (the
// FSM's next-due index: never a scan of all schedules), computes with the
// schedule package what is due for each since its last-materialised mark
// (schedule.Calendar.Due: created, or skipped with a reason), and proposes
// ONE MaterialiseSchedules command for all of them: the jobs, the skipped
// ranges, the new marks and next due times in one log entry. The FSM
// applies an item only to the schedule state it was computed from, so an
// occurrence becomes at most one job whatever the failovers and retries.
// Then the loop sleeps until the earliest next due time. The loop is the
// materialise service (node/leader/materialise.go); the rounds are here.

const (
	// maxSchedulesPerRound and maxOccurrencesPerRound bound one round's
	// entry; a round that hits them is followed by another at once.
	maxSchedulesPerRound   = 5000
	maxOccurrencesPerRound = fsm.MaxMaterialiseOccurrences
	// maxOccurrencesPerSchedule bounds what one schedule makes in a round
	// (schedule.Calendar.Due's max): a long catch-up goes in several
	// rounds, each with its own mark.
	maxOccurrencesPerSchedule = 1000
)

// compiledSchedule caches a schedule's calendar for one revision.
type compiledSchedule struct {
	revision uint64
	cal      *schedule.Calendar
	err      error
}

// materialiser is the state of one leadership's rounds.
type materialiser struct {
	n     *Node
	cache map[string]compiledSchedule
}

// compile returns the calendar of sc, compiled once per revision.
func (m *materialiser) compile(sc *fsm.Schedule) (*schedule.Calendar, error) {
	if c, ok := m.cache[sc.Name]; ok && c.revision == sc.Revision {
		return c.cal, c.err
	}
	cal, err := schedule.Compile(schedule.Spec{Expr: sc.Spec.Expr, TimeZone: sc.Spec.TimeZone,
		Window: schedule.Window{Layout: sc.Spec.WindowLayout, ShiftDays: int(sc.Spec.WindowShiftDays)},
		DST:    schedule.DSTPolicy(sc.Spec.DSTPolicy)}) // from the log: every leader resolves it alike
	if len(m.cache) > 4*maxSchedulesPerRound {
		clear(m.cache) // deleted schedules' entries go too
	}
	m.cache[sc.Name] = compiledSchedule{revision: sc.Revision, cal: cal, err: err}
	return cal, err
}

// materialiseRounds returns the round function of one leadership's
// materialiser (node/leader/materialise.go runs the loop): its own cache
// of compiled calendars and of schedules that do not compile here.
func (n *Node) materialiseRounds() leader.RoundFunc {
	m := &materialiser{n: n, cache: map[string]compiledSchedule{}}
	broken := map[string]uint64{} // schedules that do not compile here, by revision (logged once)
	var tracer trace.Tracer
	if n.cfg.TracerProvider != nil {
		tracer = n.cfg.TracerProvider.Tracer("github.com/coordd/coordd/node")
	}
	return func(now int64) ([]*fsmv1.ScheduleMaterialisation, bool) {
		items, more := m.round(n.fsm.DueSchedules(now, maxSchedulesPerRound), now, broken)
		traceOccurrences(tracer, items)
		return items, more
	}
}

// traceOccurrences starts a new trace for each occurrence to be made (a
// span of the leader, ended at once) and gives the occurrence its context,
// which its job keeps (docs/tracing.md). A nil tracer: nothing. An item
// the FSM finds stale makes no job, and its spans lead nowhere.
func traceOccurrences(tracer trace.Tracer, items []*fsmv1.ScheduleMaterialisation) {
	if tracer == nil {
		return
	}
	ctx := context.Background()
	for _, it := range items {
		for _, o := range it.GetCreate() {
			_, span := tracer.Start(ctx, "coordd.schedule.occurrence", trace.WithNewRoot(), trace.WithAttributes(
				attribute.String("coordd.schedule", it.GetName()), attribute.Int64("coordd.schedule.occurrence_ms", o.GetAtMs()),
				attribute.String("coordd.schedule.window", o.GetWindow())))
			o.TraceParent, o.TraceState = tracectx.Format(span.SpanContext())
			span.End()
		}
	}
}

// wakeMaterialiser tells the materialiser that a schedule may be due
// sooner (a put, resume or trigger on this leader).
func (n *Node) wakeMaterialiser() { n.materialise.Poke() }

// round computes the items for the due schedules at calendar time now.
// more: a bound was hit, another round should follow at once.
func (m *materialiser) round(due []fsm.Schedule, now int64, broken map[string]uint64) (items []*fsmv1.ScheduleMaterialisation, more bool) {
	budget := maxOccurrencesPerRound
	for i := range due {
		sc := &due[i]
		cal, err := m.compile(sc)
		if err != nil {
			if broken[sc.Name] != sc.Revision {
				broken[sc.Name] = sc.Revision
				m.n.log.Error("schedule does not compile on this leader; not materialised", "schedule", sc.Name,
					"revision", sc.Revision, "err", err)
			}
			continue
		}
		it, err := materialiseItem(sc, cal, now, min(maxOccurrencesPerSchedule, budget))
		if err != nil {
			if broken[sc.Name] != sc.Revision {
				broken[sc.Name] = sc.Revision
				m.n.log.Error("schedule cannot be materialised", "schedule", sc.Name, "err", err)
			}
			continue
		}
		items = append(items, it)
		budget -= len(it.GetCreate())
		if budget <= 0 && i < len(due)-1 {
			return items, true
		}
	}
	return items, len(due) == maxSchedulesPerRound
}

// materialiseItem computes what is due for one schedule at calendar time
// now, from its mark: the PAUSED range of a resume not yet recorded, then
// schedule.Calendar.Due from the resume (or the mark) with the schedule's
// horizon and starting deadline, at most max occurrences.
func materialiseItem(sc *fsm.Schedule, cal *schedule.Calendar, now int64, maxCreate int) (*fsmv1.ScheduleMaterialisation, error) {
	it := &fsmv1.ScheduleMaterialisation{Name: sc.Name, Revision: sc.Revision, FromMs: sc.Mark}
	from := sc.Mark
	if r := min(sc.ResumedAt, now); r > from {
		if c := cal.Count(from, r); c > 0 {
			first, last := cal.Next(from, 1), cal.Prev(r+1, 1)
			if len(first) == 1 && len(last) == 1 {
				it.Skipped = append(it.Skipped, &fsmv1.ScheduleSkip{Reason: fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_PAUSED,
					FirstMs: first[0].At, LastMs: last[0].At, Count: c, FirstWindow: first[0].Window, LastWindow: last[0].Window})
			}
		}
		from = r
	}
	horizon := time.Duration(sc.Spec.CatchUpMs) * time.Millisecond
	if horizon == 0 {
		horizon = fsm.DefaultCatchUp(cal.Schedule().Interval())
	}
	d, err := cal.Due(from, now, horizon, time.Duration(sc.Spec.StartingDeadlineMs)*time.Millisecond, max(maxCreate, 1))
	if err != nil {
		return nil, err
	}
	for _, k := range d.Skipped {
		it.Skipped = append(it.Skipped, &fsmv1.ScheduleSkip{Reason: skipReason(k.Reason), FirstMs: k.First, LastMs: k.Last,
			Count: k.Count, FirstWindow: k.FirstWindow, LastWindow: k.LastWindow})
	}
	for _, o := range d.Create {
		it.Create = append(it.Create, &fsmv1.ScheduleOccurrence{AtMs: o.At, Window: o.Window, DstGap: o.DSTGap})
	}
	it.ThroughMs = max(d.Through, from)
	switch next := cal.Next(it.ThroughMs, 1); {
	case d.More:
		it.NextDueMs = it.ThroughMs + 1 // more is due now
	case len(next) == 1:
		it.NextDueMs = next[0].At
	}
	return it, nil
}

func skipReason(r schedule.Reason) fsmv1.ScheduleSkipReason {
	switch r {
	case schedule.SkipHorizon:
		return fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_HORIZON
	case schedule.SkipDeadline:
		return fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_DEADLINE
	case schedule.SkipDSTGap:
		return fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_DST_GAP
	case schedule.SkipDSTRepeat:
		return fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_DST_REPEAT
	}
	return fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_UNSPECIFIED
}

// scheduleMetrics are the materialiser's collectors (bounded: no label per
// schedule or job).
type scheduleMetrics struct {
	created  prometheus.Counter
	skipped  *prometheus.CounterVec
	stale    prometheus.Counter
	lag      prometheus.Histogram
	cancels  prometheus.Counter
	duplicat prometheus.Counter
}

func newScheduleMetrics(reg *prometheus.Registry) *scheduleMetrics {
	f := promauto.With(reg) // registers what it makes
	return &scheduleMetrics{
		created: f.NewCounter(prometheus.CounterOpts{Name: "coordd_schedule_jobs_created_total",
			Help: "Jobs made by schedules (materialised occurrences and triggers are counted by the leader that made them)."}),
		skipped: f.NewCounterVec(prometheus.CounterOpts{Name: "coordd_schedule_occurrences_skipped_total",
			Help: "Occurrences of schedules recorded as skipped, by reason (horizon, deadline, dst_gap, dst_repeat, paused, overlap)."}, []string{"reason"}),
		stale: f.NewCounter(prometheus.CounterOpts{Name: "coordd_schedule_stale_items_total",
			Help: "Materialisations refused because the schedule changed since they were computed (no effect)."}),
		lag: f.NewHistogram(prometheus.HistogramOpts{Name: "coordd_schedule_materialise_lag_seconds",
			Help:    "Calendar time from an occurrence to the commit of its job.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		cancels: f.NewCounter(prometheus.CounterOpts{Name: "coordd_schedule_jobs_replaced_total",
			Help: "Jobs cancelled by the next occurrence of a REPLACE schedule."}),
		duplicat: f.NewCounter(prometheus.CounterOpts{Name: "coordd_schedule_duplicate_occurrences_total",
			Help: "Occurrences whose unique key (schedule, window) named an existing job: recorded, not made twice."}),
	}
}

// materialised counts what a round did.
func (m *metrics) materialised(items []*fsmv1.ScheduleMaterialisation, res *fsm.MaterialiseResult, now int64) {
	sm := m.schedules
	for i, it := range items {
		if i >= len(res.Items) {
			break
		}
		out := res.Items[i]
		if out.Stale {
			sm.stale.Inc()
			continue
		}
		sm.created.Add(float64(out.Created))
		sm.cancels.Add(float64(out.Cancelled))
		sm.duplicat.Add(float64(out.Duplicates))
		var byLeader int64
		for _, k := range it.GetSkipped() {
			sm.skipped.WithLabelValues(metriclabel.Value(fsm.SkipReason(k.GetReason()).String())).Add(float64(k.GetCount()))
			byLeader += k.GetCount()
		}
		if overlap := out.Skipped - byLeader; overlap > 0 {
			sm.skipped.WithLabelValues(metriclabel.Value(fsm.SkipOverlap.String())).Add(float64(overlap))
		}
		for _, o := range it.GetCreate() {
			sm.lag.Observe(float64(max(0, now-o.GetAtMs())) / 1000)
		}
	}
}
