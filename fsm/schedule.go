package fsm

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/btree"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Schedules: recurring jobs. A schedule is a named cron expression (or
// @every, @once) in a time zone with a job template; the leader's
// materialiser turns each due occurrence into one queue job, in the same
// log entry as the schedule's new last-materialised mark (DESIGN.md,
// "Schedules"). The FSM never parses an expression: occurrences, windows
// and next due times are computed by the leader (package schedule) and
// stamped into the commands. Files: schedule.go (records, limits,
// indexes), schedule_cmds.go (commands), schedule_reads.go,
// schedule_snapshot.go.

// Limits of schedules. Like the queue's, they only ever grow.
const (
	MaxScheduleNameBytes = 128
	MaxScheduleExprBytes = 256
	MaxScheduleZoneBytes = 64
	MaxWindowLayoutBytes = 64
	MaxWindowBytes       = 128
	MaxScheduleHistory   = 32 // history entries kept per schedule (oldest go first)
	MaxScheduleSkips     = 16 // skipped ranges kept per schedule, beside the history
	// MaxScheduleDurationMs bounds starting deadline, catch-up horizon and
	// complete-within.
	MaxScheduleDurationMs = 366 * 24 * 3600 * 1000
	// MaxTemplateLabels leaves room for the labels every scheduled job gets.
	MaxTemplateLabels = MaxJobLabels - 3
	// MaxMaterialiseItems and MaxMaterialiseOccurrences bound one
	// MaterialiseSchedules command.
	MaxMaterialiseItems       = 10_000
	MaxMaterialiseOccurrences = 10_000
)

// Labels every job made by a schedule carries (ReservedLabelPrefix is
// reserved: a template may not use it).
const (
	ReservedLabelPrefix = "coordd."
	LabelSchedule       = "coordd.schedule"
	LabelWindow         = "coordd.window"
	LabelOccurrence     = "coordd.occurrence_ms"
)

// DefaultCatchUp is the catch-up horizon of a schedule that sets none
// (the server fills it in): at least an hour, and at least one interval.
// An outage shorter than the horizon loses nothing (the missed
// occurrences are made when a leader is back), and with one interval the
// last occurrence before the leader came back is always owed: a daily
// close missed by a three-hour outage still runs that day. Older
// occurrences are recorded as skipped (HORIZON), counted, never made in a
// burst.
func DefaultCatchUp(interval time.Duration) time.Duration { return max(time.Hour, interval) }

// DefaultCompleteWithin is when an occurrence whose job is not final
// becomes overdue, for a schedule that sets none: one interval (an hour
// for a one-shot).
func DefaultCompleteWithin(interval time.Duration) time.Duration { return cmp.Or(interval, time.Hour) }

// ScheduleUniqueKey is the unique key of the job of a schedule's window:
// an occurrence is at most one job.
func ScheduleUniqueKey(name, window string) string { return "schedule:" + name + "/" + window }

// Overlap says what an occurrence does when the previous one's job is not
// final. Values are fsmv1.ScheduleOverlap's, named in enums_gen.go.
type Overlap uint8

func (o Overlap) String() string {
	return strings.TrimPrefix(fsmv1.ScheduleOverlap(o).String(), "SCHEDULE_OVERLAP_")
}

// DSTPolicy is what a schedule's cron expression does at DST changes.
// Values are fsmv1.ScheduleDstPolicy's, named in enums_gen.go (DSTAuto:
// by the expression, resolved by the leader's calendar, package schedule).
type DSTPolicy uint8

func (p DSTPolicy) String() string {
	return strings.TrimPrefix(fsmv1.ScheduleDstPolicy(p).String(), "SCHEDULE_DST_POLICY_")
}

// SkipReason says why occurrences made no job. Values are
// fsmv1.ScheduleSkipReason's, named in enums_gen.go (SkipNone: not skipped).
type SkipReason uint8

func (r SkipReason) String() string {
	return strings.TrimPrefix(fsmv1.ScheduleSkipReason(r).String(), "SCHEDULE_SKIP_REASON_")
}

// JobTemplate is what every job of a schedule is made from.
type JobTemplate struct {
	Queue           string
	Kind            string
	Args            []byte
	Labels          []Label // sorted by key
	Priority        int32
	MaxAttempts     int32
	BackoffMs       int64
	BackoffMaxMs    int64
	BackoffPermille uint32
	VisibilityMs    int64
	Target          *fsmv1.HttpTarget // shared, never written
	MaxRunMs        int64             // queue_maxrun.go
}

// ScheduleSpec is a schedule's definition (defaults filled in by the
// server before proposing).
type ScheduleSpec struct {
	Expr               string
	TimeZone           string
	Job                JobTemplate
	WindowLayout       string
	WindowShiftDays    int32
	StartingDeadlineMs int64
	CatchUpMs          int64
	CompleteWithinMs   int64
	Overlap            Overlap
	DSTPolicy          DSTPolicy
}

func (a *ScheduleSpec) equal(b *ScheduleSpec) bool {
	ja, jb := &a.Job, &b.Job
	return a.Expr == b.Expr && a.TimeZone == b.TimeZone && a.WindowLayout == b.WindowLayout &&
		a.WindowShiftDays == b.WindowShiftDays && a.StartingDeadlineMs == b.StartingDeadlineMs &&
		a.CatchUpMs == b.CatchUpMs && a.CompleteWithinMs == b.CompleteWithinMs && a.Overlap == b.Overlap && a.DSTPolicy == b.DSTPolicy &&
		ja.Queue == jb.Queue && ja.Kind == jb.Kind && bytes.Equal(ja.Args, jb.Args) && slices.Equal(ja.Labels, jb.Labels) &&
		ja.Priority == jb.Priority && ja.MaxAttempts == jb.MaxAttempts && ja.BackoffMs == jb.BackoffMs &&
		ja.BackoffMaxMs == jb.BackoffMaxMs && ja.BackoffPermille == jb.BackoffPermille && ja.VisibilityMs == jb.VisibilityMs
}

// Schedule is a schedule object. Records are immutable once stored (a
// change stores a copy; the history slice is copied when it changes).
// Times are calendar ms.
type Schedule struct {
	Name string
	Spec ScheduleSpec
	// Revision grows with every change other than a materialisation
	// (put with a new spec, pause, resume, delete): a materialisation
	// computed from an older revision is stale.
	Revision uint64
	// Mark is the last-materialised mark: every occurrence up to it was
	// made a job or recorded as skipped.
	Mark int64
	// NextDue is when the leader materialises the schedule next (0: never
	// again, e.g. after a one-shot's occurrence).
	NextDue   int64
	Paused    bool
	PausedAt  int64
	PausedBy  string
	ResumedAt int64 // a resume whose PAUSED range is not recorded yet
	Deleted   bool
	DeletedAt int64
	DeletedBy string
	CreatedBy string
	CreatedAt int64
	UpdatedBy string
	UpdatedAt int64
	// LastJobID is the job of the latest occurrence (the one overlap is
	// judged against).
	LastJobID uint64
	JobsMade  uint64         // jobs created
	SkipCount uint64         // occurrences skipped, all reasons
	History   []HistoryEntry // oldest first, at most MaxScheduleHistory
	// Skips are the last skipped ranges (at most MaxScheduleSkips), also
	// those that many jobs since pushed out of History.
	Skips []HistoryEntry
}

// HistoryEntry is one occurrence that made a job, or one run of skipped
// occurrences (Skipped != SkipNone: At..Last, Count of them).
type HistoryEntry struct {
	At         int64
	Window     string
	JobID      uint64
	DSTGap     bool
	Manual     bool
	Duplicate  bool // the occurrence's unique key named an existing job
	Skipped    SkipReason
	Last       int64
	LastWindow string
	Count      int64
	RecordedAt int64
}

// Active reports whether the materialiser looks at the schedule.
func (sc *Schedule) Active() bool { return !sc.Deleted && !sc.Paused && sc.NextDue > 0 }

func lessSchedule(a, b *Schedule) bool { return a.Name < b.Name }

// scheduleIndex is derived from the schedules and the queue's jobs:
// rebuilt after a restore, not in snapshots or the digest.
type scheduleIndex struct {
	due  *btree.BTreeG[nameTime] // active schedules by next due time
	tomb *btree.BTreeG[nameTime] // tombstones by deletion time
	// open holds jobs made by schedules that are not final, by occurrence
	// time: what can be overdue.
	open *btree.BTreeG[timeKey]
	// byCreator holds the names of the schedules that are not deleted per
	// identity that created them (none for ""): what PutSchedule's
	// max_schedules judges, and the leader's rate quotas read.
	byCreator map[string]map[string]struct{}
}

func newScheduleIndex() *scheduleIndex {
	return &scheduleIndex{
		due:  btree.NewG(btreeDegree, lessNameTime),
		tomb: btree.NewG(btreeDegree, lessNameTime),
		open: btree.NewG(btreeDegree, lessTime),

		byCreator: map[string]map[string]struct{}{},
	}
}

func (x *scheduleIndex) add(sc *Schedule) {
	if sc.Active() {
		x.due.ReplaceOrInsert(nameTime{sc.NextDue, sc.Name})
	}
	if sc.Deleted {
		x.tomb.ReplaceOrInsert(nameTime{sc.DeletedAt, sc.Name})
	} else if sc.CreatedBy != "" {
		set := x.byCreator[sc.CreatedBy]
		if set == nil {
			set = map[string]struct{}{}
			x.byCreator[sc.CreatedBy] = set
		}
		set[sc.Name] = struct{}{}
	}
}

func (x *scheduleIndex) remove(sc *Schedule) {
	if sc.Active() {
		x.due.Delete(nameTime{sc.NextDue, sc.Name})
	}
	if sc.Deleted {
		x.tomb.Delete(nameTime{sc.DeletedAt, sc.Name})
	} else if set := x.byCreator[sc.CreatedBy]; set != nil {
		delete(set, sc.Name)
		if len(set) == 0 {
			delete(x.byCreator, sc.CreatedBy)
		}
	}
}

func (s *state) schedule(name string) *Schedule { return find(s.schedules, &Schedule{Name: name}) }

// putScheduleRecord stores sc in place of old (nil: new) and moves its
// index entries.
func (s *state) putScheduleRecord(old, sc *Schedule) {
	if old != nil {
		s.sidx.remove(old)
	}
	s.schedules.ReplaceOrInsert(sc)
	s.sidx.add(sc)
	s.emitSchedule(EventPut, sc)
}

// scheduledJobOccurrence returns the occurrence time of a job made by a
// schedule (from its labels), or false for any other job.
func scheduledJobOccurrence(j *QueueJob) (int64, bool) {
	sched, _ := j.label(LabelSchedule)
	occ, _ := j.label(LabelOccurrence)
	if sched == "" || occ == "" {
		return 0, false
	}
	at, err := strconv.ParseInt(occ, 10, 64)
	return at, err == nil
}

// scheduledJobMoved keeps the open index when a job changes state (the
// queue calls it for every replaced job): a job of a schedule is in it
// while it is not final.
func (s *state) scheduledJobMoved(old, n *QueueJob) {
	wasOpen, isOpen := !old.State.Final(), !n.State.Final()
	if wasOpen == isOpen {
		return
	}
	at, ok := scheduledJobOccurrence(n)
	if !ok {
		return
	}
	if isOpen {
		s.sidx.open.ReplaceOrInsert(timeKey{at, n.ID})
	} else {
		s.sidx.open.Delete(timeKey{at, n.ID})
	}
}

// templateFromSpec converts a wire job template, labels sorted.
func templateFromSpec(sp *fsmv1.QueueJobSpec) JobTemplate {
	return JobTemplate{
		Queue: sp.GetQueue(), Kind: sp.GetKind(), Args: sp.GetArgs(), Labels: sortedLabels(sp.GetLabels()),
		Priority: sp.GetPriority(), MaxAttempts: sp.GetMaxAttempts(), BackoffMs: sp.GetBackoffInitialMs(),
		BackoffMaxMs: sp.GetBackoffMaxMs(), BackoffPermille: sp.GetBackoffFactorPermille(), VisibilityMs: sp.GetVisibilityTimeoutMs(),
		Target: sp.GetTarget(), MaxRunMs: sp.GetMaxRunMs(),
	}
}

// JobSpec is the template as a wire spec (no run_at or unique key).
func (t *JobTemplate) JobSpec() *fsmv1.QueueJobSpec {
	sp := &fsmv1.QueueJobSpec{
		Queue: t.Queue, Kind: t.Kind, Args: t.Args, Priority: t.Priority, MaxAttempts: t.MaxAttempts,
		BackoffInitialMs: t.BackoffMs, BackoffMaxMs: t.BackoffMaxMs, BackoffFactorPermille: t.BackoffPermille,
		VisibilityTimeoutMs: t.VisibilityMs, Target: t.Target, MaxRunMs: t.MaxRunMs,
	}
	for _, l := range t.Labels {
		sp.Labels = append(sp.Labels, &fsmv1.JobLabel{Key: l.Key, Value: l.Value})
	}
	return sp
}

// CheckScheduleSpec checks what the FSM can check of a schedule's spec
// (the server has compiled the expression; the FSM never parses it). It
// returns the offending field and what is wrong, or "" when valid. Field
// names are the API's (job.* for the template). The template is checked by
// CheckJobSpec, the one job-spec check; nothing here depends on time.
func CheckScheduleSpec(name string, sp *fsmv1.ScheduleSpec) (field, problem string) {
	return checkScheduleSpec(name, sp, JobSpecRules)
}

// checkScheduleSpec is CheckScheduleSpec by the job-spec rules of version
// rules (PutSchedule.spec_rules).
func checkScheduleSpec(name string, sp *fsmv1.ScheduleSpec, rules uint32) (field, problem string) {
	switch {
	case name == "" || len(name) > MaxScheduleNameBytes:
		return "name", fmt.Sprintf("must be 1 to %d bytes", MaxScheduleNameBytes)
	case sp == nil:
		return "spec", "is required"
	case sp.GetExpr() == "" || len(sp.GetExpr()) > MaxScheduleExprBytes:
		return "schedule", fmt.Sprintf("must be 1 to %d bytes", MaxScheduleExprBytes)
	case len(sp.GetTimeZone()) > MaxScheduleZoneBytes:
		return "time_zone", fmt.Sprintf("is longer than %d bytes", MaxScheduleZoneBytes)
	case len(sp.GetWindowLayout()) > MaxWindowLayoutBytes:
		return "window_layout", fmt.Sprintf("is longer than %d bytes", MaxWindowLayoutBytes)
	case sp.GetWindowShiftDays() < -366 || sp.GetWindowShiftDays() > 366:
		return "window_shift_days", fmt.Sprintf("%d is outside [-366, 366]", sp.GetWindowShiftDays())
	case sp.GetStartingDeadlineMs() < 0 || sp.GetStartingDeadlineMs() > MaxScheduleDurationMs:
		return "starting_deadline", fmt.Sprintf("%s is outside [0s, %s]", Dur(sp.GetStartingDeadlineMs()), Dur(MaxScheduleDurationMs))
	case sp.GetCatchUpMs() < 0 || sp.GetCatchUpMs() > MaxScheduleDurationMs:
		return "catch_up", fmt.Sprintf("%s is outside [0s, %s]", Dur(sp.GetCatchUpMs()), Dur(MaxScheduleDurationMs))
	case sp.GetCompleteWithinMs() < 0 || sp.GetCompleteWithinMs() > MaxScheduleDurationMs:
		return "complete_within", fmt.Sprintf("%s is outside [0s, %s]", Dur(sp.GetCompleteWithinMs()), Dur(MaxScheduleDurationMs))
	case sp.GetOverlap() < fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID || sp.GetOverlap() > fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_REPLACE:
		return "overlap", fmt.Sprintf("unknown value %d", sp.GetOverlap())
	case sp.GetDstPolicy() < fsmv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_UNSPECIFIED || sp.GetDstPolicy() > fsmv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE:
		return "dst_policy", fmt.Sprintf("unknown value %d", sp.GetDstPolicy())
	case sp.GetJob() == nil:
		return "job", "is required"
	case sp.GetJob().GetRunAtMs() != 0:
		return "job.run_at", "is set per occurrence"
	case sp.GetJob().GetUniqueKey() != "":
		return "job.unique_key", "is set per occurrence (schedule and window)"
	case len(sp.GetJob().GetLabels()) > MaxTemplateLabels:
		return "job.labels", fmt.Sprintf("%d labels; the limit is %d", len(sp.GetJob().GetLabels()), MaxTemplateLabels)
	}
	for _, l := range sp.GetJob().GetLabels() {
		if problem := reservedLabel(l.GetKey()); rules == 0 && problem != "" { // (1 and later: checkJobSpec's)
			return "job.labels", problem
		}
	}
	if field, problem := checkJobSpec(sp.GetJob(), rules); field != "" {
		return "job." + field, problem
	}
	return "", ""
}

func specFromWire(sp *fsmv1.ScheduleSpec) ScheduleSpec {
	return ScheduleSpec{
		Expr: sp.GetExpr(), TimeZone: sp.GetTimeZone(), Job: templateFromSpec(sp.GetJob()), WindowLayout: sp.GetWindowLayout(),
		WindowShiftDays: sp.GetWindowShiftDays(), StartingDeadlineMs: sp.GetStartingDeadlineMs(), CatchUpMs: sp.GetCatchUpMs(),
		CompleteWithinMs: sp.GetCompleteWithinMs(), Overlap: Overlap(sp.GetOverlap()), DSTPolicy: DSTPolicy(sp.GetDstPolicy()),
	}
}

// Wire returns the spec as a wire message.
func (sp *ScheduleSpec) Wire() *fsmv1.ScheduleSpec {
	return &fsmv1.ScheduleSpec{
		Expr: sp.Expr, TimeZone: sp.TimeZone, Job: sp.Job.JobSpec(), WindowLayout: sp.WindowLayout,
		WindowShiftDays: sp.WindowShiftDays, StartingDeadlineMs: sp.StartingDeadlineMs, CatchUpMs: sp.CatchUpMs,
		CompleteWithinMs: sp.CompleteWithinMs, Overlap: fsmv1.ScheduleOverlap(sp.Overlap), DstPolicy: fsmv1.ScheduleDstPolicy(sp.DSTPolicy),
	}
}
