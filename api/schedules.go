package api

import (
	"context"
	"errors"
	"math"
	"regexp"
	"sync"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/schedule"
)

// schedules implements coord.v1.Schedules: handlers validate (the
// expression is compiled here, on the leader the call runs on: the FSM
// never parses it), fill in defaults, and propose; the leader's
// materialiser (node) makes the occurrences.
type schedules struct {
	coordv1.UnimplementedSchedulesServer
	s *Server
}

// maxNextOccurrences bounds GetSchedule's next.
const maxNextOccurrences = 100

var scheduleNameRE = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

func checkScheduleName(field, v string) error {
	switch {
	case v == "":
		return invalidArg(field, "must not be empty")
	case len(v) > fsm.MaxScheduleNameBytes:
		return invalidArg(field, "is %d bytes; the limit is %d", len(v), fsm.MaxScheduleNameBytes)
	case !scheduleNameRE.MatchString(v):
		return invalidArg(field, "%q: use letters, digits, '.', '_', ':' and '-'", v)
	}
	return nil
}

func schedulesOnLeader[Req, Resp any](s *Server, ctx context.Context,
	call func(coordv1.SchedulesClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	local func() (Resp, error)) (Resp, error) {
	return onLeader(s, ctx, coordv1.NewSchedulesClient, call, req, local)
}

// calendars caches compiled calendars by spec.
type calendars struct {
	mu sync.Mutex
	m  map[schedule.Spec]*schedule.Calendar
}

func (c *calendars) get(sp schedule.Spec) (*schedule.Calendar, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cal, ok := c.m[sp]; ok {
		return cal, nil
	}
	cal, err := schedule.Compile(sp)
	if err != nil {
		return nil, err
	}
	if c.m == nil || len(c.m) > 10_000 {
		c.m = map[schedule.Spec]*schedule.Calendar{}
	}
	c.m[sp] = cal
	return cal, nil
}

func calendarSpec(sp *fsm.ScheduleSpec) schedule.Spec {
	return schedule.Spec{Expr: sp.Expr, TimeZone: sp.TimeZone,
		Window: schedule.Window{Layout: sp.WindowLayout, ShiftDays: int(sp.WindowShiftDays)},
		DST:    schedule.DSTPolicy(sp.DSTPolicy)} // the same values (schedule.DSTPolicy)
}

// compileSpec validates a wire spec and turns it into the FSM's, with the
// defaults filled in. No rule here depends on time, so any node may check
// a spec as it enters.
func (s *Server) compileSpec(in *coordv1.ScheduleSpec) (*fsmv1.ScheduleSpec, error) {
	if in == nil {
		return nil, invalidArg("spec", "is required")
	}
	if err := checkScheduleName("name", in.GetName()); err != nil {
		return nil, err
	}
	if in.GetJob() == nil {
		return nil, invalidArg("job", "is required (its kind, at least)")
	}
	if p := in.GetDstPolicy(); p < coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_UNSPECIFIED || p > coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE {
		return nil, invalidArg("dst_policy", "unknown value %d", p)
	}
	c, err := s.calendars.get(schedule.Spec{Expr: in.GetSchedule(), TimeZone: in.GetTimeZone(),
		Window: schedule.Window{Layout: in.GetWindowLayout(), ShiftDays: int(in.GetWindowShiftDays())},
		DST:    schedule.DSTPolicy(in.GetDstPolicy())})
	if err != nil {
		var ie *schedule.InvalidError
		if errors.As(err, &ie) {
			return nil, invalidArg(ie.Field, "%s", ie.Reason)
		}
		return nil, invalidArg("schedule", "%v", err)
	}
	job, field, problem := wireJobSpec(in.GetJob(), nil)
	if field == "" {
		field, problem = s.checkDelivery(job.GetTarget())
	}
	if field != "" {
		return nil, invalidArg("job."+field, "job.%s %s", field, problem)
	}
	interval := c.Schedule().Interval()
	out := &fsmv1.ScheduleSpec{
		Expr: in.GetSchedule(), TimeZone: in.GetTimeZone(), Job: job, WindowLayout: in.GetWindowLayout(),
		WindowShiftDays: in.GetWindowShiftDays(), StartingDeadlineMs: in.GetStartingDeadlineMs(),
		CatchUpMs: in.GetCatchUpMs(), CompleteWithinMs: in.GetCompleteWithinMs(), Overlap: fsmv1.ScheduleOverlap(in.GetOverlap()),
		// The DST policy as resolved for the expression (cronie's rule when
		// none is given), so the log says what the schedule does.
		DstPolicy: fsmv1.ScheduleDstPolicy(c.Schedule().DST()),
	}
	if out.CatchUpMs == 0 {
		out.CatchUpMs = fsm.DefaultCatchUp(interval).Milliseconds()
	}
	if out.CompleteWithinMs == 0 {
		out.CompleteWithinMs = fsm.DefaultCompleteWithin(interval).Milliseconds()
	}
	if out.Overlap == fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_UNSPECIFIED {
		out.Overlap = fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID
	}
	if field, problem := fsm.CheckScheduleSpec(in.GetName(), out); field != "" {
		return nil, invalidArg(field, "%s", problem)
	}
	return out, nil
}

func (s *Server) scheduleToProto(sc fsm.Schedule) *coordv1.Schedule {
	sp := &sc.Spec
	t := &sp.Job
	out := &coordv1.Schedule{
		Spec: &coordv1.ScheduleSpec{
			Name: sc.Name, Schedule: sp.Expr, TimeZone: sp.TimeZone, WindowLayout: sp.WindowLayout,
			WindowShiftDays: sp.WindowShiftDays, StartingDeadline: pbtime.Dur(sp.StartingDeadlineMs), CatchUp: pbtime.Dur(sp.CatchUpMs),
			CompleteWithin: pbtime.Dur(sp.CompleteWithinMs), Overlap: coordv1.ScheduleOverlap(sp.Overlap),
			DstPolicy: coordv1.ScheduleDstPolicy(sp.DSTPolicy),
			Job: &coordv1.JobTemplate{Queue: t.Queue, Kind: t.Kind, Args: t.Args, Priority: t.Priority,
				MaxAttempts: t.MaxAttempts, BackoffInitial: pbtime.Dur(t.BackoffMs), BackoffMax: pbtime.Dur(t.BackoffMaxMs),
				BackoffFactor: float64(t.BackoffPermille) / 1000, VisibilityTimeout: pbtime.Dur(t.VisibilityMs), Target: targetToProto(t.Target)},
		},
		Revision: sc.Revision, Paused: sc.Paused, PausedAt: pbtime.At(sc.PausedAt), PausedBy: sc.PausedBy,
		Deleted: sc.Deleted, DeletedAt: pbtime.At(sc.DeletedAt), DeletedBy: sc.DeletedBy, CreatedBy: sc.CreatedBy,
		CreatedAt: pbtime.At(sc.CreatedAt), UpdatedBy: sc.UpdatedBy, UpdatedAt: pbtime.At(sc.UpdatedAt), LastMaterialised: pbtime.At(sc.Mark),
		JobsCreated: sc.JobsMade, OccurrencesSkipped: sc.SkipCount, LastJobId: sc.LastJobID,
	}
	if len(t.Labels) > 0 {
		out.Spec.Job.Labels = make(map[string]string, len(t.Labels))
		for _, l := range t.Labels {
			out.Spec.Job.Labels[l.Key] = l.Value
		}
	}
	if c, err := s.calendars.get(calendarSpec(sp)); err == nil {
		out.Interval = pbtime.Dur(c.Schedule().Interval().Milliseconds())
		out.Spec.DstPolicy = coordv1.ScheduleDstPolicy(c.Schedule().DST()) // resolved, also for a spec stored without one
		if sc.Active() {
			// The next occurrence not yet made — what a user means by
			// "next due" — not when the materialiser looks next (sc.NextDue:
			// at once after a create, resume or update).
			if o := c.Next(max(sc.Mark, sc.ResumedAt), 1); len(o) == 1 {
				out.NextDue = pbtime.At(o[0].At)
			}
		}
	}
	return out
}

// occurrenceToProto renders a history entry with its job's state at
// calendar time cal.
func occurrenceToProto(st *fsm.FSM, sc *fsm.Schedule, e fsm.HistoryEntry, cal int64) *coordv1.ScheduleOccurrence {
	o := &coordv1.ScheduleOccurrence{At: pbtime.At(e.At), Window: e.Window, DstGap: e.DSTGap, Manual: e.Manual, JobId: e.JobID,
		Duplicate: e.Duplicate, Skipped: coordv1.ScheduleSkipReason(e.Skipped), Count: e.Count, LastAt: pbtime.At(e.Last),
		LastWindow: e.LastWindow, RecordedAt: pbtime.At(e.RecordedAt)}
	if e.JobID != 0 {
		o.Due = pbtime.At(e.At + sc.Spec.CompleteWithinMs)
		if j, ok := st.QueueJob(e.JobID); ok {
			o.JobState, o.Attempts = coordv1.JobState(j.State), j.Attempts
			o.Overdue = !j.State.Final() && o.GetDueMs() < cal && !sc.Deleted
		}
	}
	return o
}

func (h *schedules) PutSchedule(ctx context.Context, req *coordv1.PutScheduleRequest) (*coordv1.PutScheduleResponse, error) {
	s := h.s
	if _, err := s.compileSpec(req.GetSpec()); err != nil {
		return nil, toStatus(err)
	}
	return schedulesOnLeader(s, ctx, coordv1.SchedulesClient.PutSchedule, req, func() (*coordv1.PutScheduleResponse, error) {
		sp, err := s.compileSpec(req.GetSpec())
		if err != nil {
			return nil, err
		}
		put := &fsmv1.PutSchedule{Name: req.GetSpec().GetName(), Spec: sp, Identity: auth.IdentityOf(ctx), SpecRules: fsm.JobSpecRules,
			CreateOnly: req.GetCreateOnly(), ExpectedRevision: req.GetExpectedRevision(), MaxSchedules: s.cfg.Limits.SchedulesPerIdentity}
		if err := s.allowJobBytes(ctx, len(sp.GetJob().GetArgs())); err != nil {
			return nil, err
		}
		newSpec := fsm.ScheduleSpec{Expr: sp.GetExpr(), TimeZone: sp.GetTimeZone(), WindowLayout: sp.GetWindowLayout(),
			WindowShiftDays: sp.GetWindowShiftDays(), DSTPolicy: fsm.DSTPolicy(sp.GetDstPolicy()), Job: fsm.JobTemplate{Args: sp.GetJob().GetArgs()}}
		if c, err := s.calendars.get(calendarSpec(&newSpec)); err == nil && c.Schedule().OneShot() {
			// A new one-shot owes its occurrence even when put just after
			// it (periodic.At(now)): its mark is just before it, and the
			// catch-up horizon decides as for any missed occurrence.
			if o := c.Next(math.MinInt64/2, 1); len(o) == 1 {
				put.MarkMs = o[0].At - 1
			}
		}
		// The access table checked the new queue; replacing a live
		// schedule also needs the rights on its queue (checked here, on
		// the leader, and held by the command's guard). The rates of the
		// owner's schedules are judged here too, one put at a time.
		if lim := s.cfg.Limits; lim.ScheduleJobsPerSecond > 0 || lim.JobBytesPerSecond > 0 {
			s.schedulePuts.Lock()
			defer s.schedulePuts.Unlock()
		}
		r, err := guardedChange(ctx, s.node.PutSchedule, func() (*fsmv1.PutSchedule, error) {
			st, _, err := s.node.Read(ctx, false)
			if err != nil {
				return nil, err
			}
			sc, ok := st.Schedule(put.GetName())
			if ok && !sc.Deleted {
				if err := s.authorizeExisting(ctx, sc.Spec.Job.Queue, "schedule "+sc.Name); err != nil {
					return nil, err
				}
			}
			put.Guard = scheduleGuard(sc, ok)
			owner := put.GetIdentity()
			if ok && !sc.Deleted {
				owner = sc.CreatedBy // a schedule counts for the identity that created it
			}
			if err := s.scheduleRates(ctx, st, owner, put.GetName(), &newSpec); err != nil {
				return nil, err
			}
			return put, nil
		})
		if rej := (*fsm.Rejection)(nil); errors.As(err, &rej) && rej.Reason == coorderr.ScheduleQuota {
			s.metrics.limited.WithLabelValues("schedules").Inc()
		}
		if err != nil {
			return nil, err
		}
		if r.Changed {
			s.log.Info("schedule put", "schedule", r.Schedule.Name, "created", r.Created, "expr", sp.GetExpr(),
				"time_zone", sp.GetTimeZone(), "queue", sp.GetJob().GetQueue(), "kind", sp.GetJob().GetKind(),
				"by", auth.IdentityOf(ctx))
		}
		return &coordv1.PutScheduleResponse{Schedule: s.scheduleToProto(r.Schedule), Created: r.Created, Changed: r.Changed}, nil
	})
}

// scheduleRates judges, on the leader, the peak rates of owner's schedules
// as a put of name with spec would leave them (auth.Limiter.ScheduleRates:
// jobs/s, and args bytes/s); members and "" (no TLS) are not limited.
func (s *Server) scheduleRates(ctx context.Context, st *fsm.FSM, owner, name string, spec *fsm.ScheduleSpec) error {
	lim := s.cfg.Limits
	if owner == "" || auth.CallerOf(ctx).Member || (lim.ScheduleJobsPerSecond <= 0 && lim.JobBytesPerSecond <= 0) {
		return nil
	}
	jobs, bytes := s.peakRate(spec)
	for _, sc := range st.SchedulesCreatedBy(owner) {
		if sc.Name != name {
			j, b := s.peakRate(&sc.Spec)
			jobs, bytes = jobs+j, bytes+b
		}
	}
	err := s.limits.ScheduleRates(owner, jobs, bytes)
	if err != nil {
		s.metrics.limited.WithLabelValues("schedule_rates").Inc()
	}
	return err
}

// peakRate is a schedule's rate of jobs at its shortest interval, and that
// weighted by its template's args bytes (0 for a one-shot).
func (s *Server) peakRate(spec *fsm.ScheduleSpec) (jobs, bytes float64) {
	c, err := s.calendars.get(calendarSpec(spec))
	if err != nil || c.Schedule().OneShot() || c.Schedule().Interval() <= 0 {
		return 0, 0
	}
	jobs = 1 / c.Schedule().Interval().Seconds()
	return jobs, jobs * float64(len(spec.Job.Args))
}

func (h *schedules) GetSchedule(ctx context.Context, req *coordv1.GetScheduleRequest) (*coordv1.GetScheduleResponse, error) {
	s := h.s
	next := int(req.GetNext())
	if err := checkScheduleName("name", req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if next < 0 || next > maxNextOccurrences {
		return nil, toStatus(invalidArg("next", "%d is outside [0, %d]", next, maxNextOccurrences))
	}
	if next == 0 {
		next = 5
	}
	return stateRead(s, ctx, coordv1.NewSchedulesClient, coordv1.SchedulesClient.GetSchedule, req, func(st *fsm.FSM, _ int64) (*coordv1.GetScheduleResponse, error) {
		cal := s.node.CalendarTime()
		sc, ok := st.Schedule(req.GetName())
		if !ok {
			return nil, &notFoundError{what: "schedule " + req.GetName()}
		}
		// The access table checked the name; the record shows its queue's
		// jobs, so reading it also needs read on that queue.
		if err := hideName(s.authorizeQueue(ctx, auth.OpRead, sc.Spec.Job.Queue), "schedule "+sc.Name); err != nil {
			return nil, err
		}
		out := &coordv1.GetScheduleResponse{Schedule: s.scheduleToProto(sc), CalendarTime: pbtime.At(cal)}
		if c, err := s.calendars.get(calendarSpec(&sc.Spec)); err == nil && !sc.Deleted {
			for _, o := range c.Next(max(cal, sc.Mark), next) {
				out.Next = append(out.Next, &coordv1.ScheduleOccurrence{At: pbtime.At(o.At), Window: o.Window, DstGap: o.DSTGap,
					Due: pbtime.At(o.At + sc.Spec.CompleteWithinMs)})
			}
		}
		for i := len(sc.History) - 1; i >= 0; i-- {
			out.Recent = append(out.Recent, occurrenceToProto(st, &sc, sc.History[i], cal))
		}
		for i := len(sc.Skips) - 1; i >= 0; i-- {
			out.Skipped = append(out.Skipped, occurrenceToProto(st, &sc, sc.Skips[i], cal))
		}
		return out, nil
	})
}

func (h *schedules) ListSchedules(ctx context.Context, req *coordv1.ListSchedulesRequest) (*coordv1.ListSchedulesResponse, error) {
	s := h.s
	size, err := pageSize(req.GetPageSize())
	after, terr := decodePageToken(req.GetPageToken())
	if err = firstErr(err, terr, checkName("prefix", req.GetPrefix(), false)); err != nil {
		return nil, toStatus(err)
	}
	return stateRead(s, ctx, coordv1.NewSchedulesClient, coordv1.SchedulesClient.ListSchedules, req, func(st *fsm.FSM, _ int64) (*coordv1.ListSchedulesResponse, error) {
		list, more := st.ListSchedules(req.GetPrefix(), after, size, req.GetShowDeleted())
		out := &coordv1.ListSchedulesResponse{CalendarTime: pbtime.At(s.node.CalendarTime())}
		for _, sc := range list {
			out.Schedules = append(out.Schedules, s.scheduleToProto(sc))
		}
		if more {
			out.NextPageToken = encodePageToken(list[len(list)-1].Name)
		}
		return out, nil
	})
}

// current reads a schedule on the leader for a change to it, and checks
// the caller may manage it (authorizeExisting: the job op on its queue, or
// admin). A tombstone counts as missing unless tombstoneOK. The guard is
// the one of a command checked against it (scheduleGuard).
func (s *Server) current(ctx context.Context, name string, tombstoneOK bool) (fsm.Schedule, *fsmv1.ScheduleGuard, error) {
	st, _, err := s.node.Read(ctx, false)
	if err != nil {
		return fsm.Schedule{}, nil, err
	}
	sc, ok := st.Schedule(name)
	if !ok || (sc.Deleted && !tombstoneOK) {
		return fsm.Schedule{}, nil, &fsm.Rejection{Reason: coorderr.ScheduleNotFound, Metadata: map[string]string{"schedule": name},
			Message: "schedule " + name + " does not exist"}
	}
	if err := s.authorizeExisting(ctx, sc.Spec.Job.Queue, "schedule "+name); err != nil {
		return fsm.Schedule{}, nil, err
	}
	return sc, scheduleGuard(sc, ok), nil
}

// scheduleGuard is the guard of a command authorised against the schedule
// sc as read (found: it exists, maybe as a tombstone): its queue when it is
// live, "" when there is no live schedule (fsmv1.ScheduleGuard).
func scheduleGuard(sc fsm.Schedule, found bool) *fsmv1.ScheduleGuard {
	if !found || sc.Deleted {
		return &fsmv1.ScheduleGuard{}
	}
	return &fsmv1.ScheduleGuard{Queue: sc.Spec.Job.Queue}
}

// maxGuardAttempts bounds how often a change is checked again when the
// schedule moved to another queue between the leader's check and the apply.
const maxGuardAttempts = 3

// guardedChange checks and commits a change of a schedule on the leader:
// check reads the schedule, authorizes the caller on it and builds the
// command with its guard; commit commits it. When the FSM refuses the
// guard (a concurrent put moved the schedule to another queue after the
// check), the change is checked again against the schedule as it is now.
func guardedChange[C, R any](ctx context.Context, commit func(context.Context, C) (R, error), check func() (C, error)) (R, error) {
	for attempt := 1; ; attempt++ {
		cmd, err := check()
		if err != nil {
			var zero R
			return zero, err
		}
		r, err := commit(ctx, cmd)
		var rej *fsm.Rejection
		if attempt < maxGuardAttempts && errors.As(err, &rej) && rej.Reason == coorderr.PermissionDenied {
			continue
		}
		return r, err
	}
}

func (h *schedules) PauseSchedule(ctx context.Context, req *coordv1.PauseScheduleRequest) (*coordv1.PauseScheduleResponse, error) {
	return pauseCall(h, ctx, coordv1.SchedulesClient.PauseSchedule, req, true,
		func(sc *coordv1.Schedule, changed bool) *coordv1.PauseScheduleResponse {
			return &coordv1.PauseScheduleResponse{Schedule: sc, Changed: changed}
		})
}

func (h *schedules) ResumeSchedule(ctx context.Context, req *coordv1.ResumeScheduleRequest) (*coordv1.ResumeScheduleResponse, error) {
	return pauseCall(h, ctx, coordv1.SchedulesClient.ResumeSchedule, req, false,
		func(sc *coordv1.Schedule, changed bool) *coordv1.ResumeScheduleResponse {
			return &coordv1.ResumeScheduleResponse{Schedule: sc, Changed: changed}
		})
}

// pauseCall serves PauseSchedule and ResumeSchedule: on the leader, it
// pauses or resumes the named schedule and answers it with whether that
// changed it.
func pauseCall[Req interface{ GetName() string }, Resp any](h *schedules, ctx context.Context,
	call func(coordv1.SchedulesClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, paused bool,
	resp func(sc *coordv1.Schedule, changed bool) Resp) (Resp, error) {
	var zero Resp
	name := req.GetName()
	if err := checkScheduleName("name", name); err != nil {
		return zero, toStatus(err)
	}
	return schedulesOnLeader(h.s, ctx, call, req, func() (Resp, error) {
		r, err := guardedChange(ctx, h.s.node.PauseSchedule, func() (*fsmv1.PauseSchedule, error) {
			_, guard, err := h.s.current(ctx, name, false)
			return &fsmv1.PauseSchedule{Name: name, Paused: paused, Identity: auth.IdentityOf(ctx), Guard: guard}, err
		})
		if err != nil {
			return zero, err
		}
		if r.Changed {
			h.s.log.Info("schedule paused", "schedule", name, "paused", paused, "by", auth.IdentityOf(ctx))
		}
		return resp(h.s.scheduleToProto(r.Schedule), r.Changed), nil
	})
}

func (h *schedules) TriggerSchedule(ctx context.Context, req *coordv1.TriggerScheduleRequest) (*coordv1.TriggerScheduleResponse, error) {
	s := h.s
	if err := checkScheduleName("name", req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return schedulesOnLeader(s, ctx, coordv1.SchedulesClient.TriggerSchedule, req, func() (*coordv1.TriggerScheduleResponse, error) {
		var o schedule.Occurrence
		r, err := guardedChange(ctx, s.node.TriggerSchedule, func() (*fsmv1.TriggerSchedule, error) {
			sc, guard, err := s.current(ctx, req.GetName(), false)
			if err != nil {
				return nil, err
			}
			c, err := s.calendars.get(calendarSpec(&sc.Spec))
			if err != nil {
				return nil, invalidArg("schedule", "%v", err)
			}
			o = c.Trigger(s.node.CalendarTime())
			return &fsmv1.TriggerSchedule{Name: sc.Name, Window: o.Window, AtMs: o.At, Identity: auth.IdentityOf(ctx), Guard: guard}, nil
		})
		if err != nil {
			return nil, err
		}
		s.log.Info("schedule triggered", "schedule", req.GetName(), "window", o.Window, "job_id", r.Entry.JobID, "by", auth.IdentityOf(ctx))
		st, _, err := s.node.Read(ctx, true)
		if err != nil {
			return nil, err
		}
		return &coordv1.TriggerScheduleResponse{Schedule: s.scheduleToProto(r.Schedule),
			Occurrence: occurrenceToProto(st, &r.Schedule, r.Entry, s.node.CalendarTime())}, nil
	})
}

func (h *schedules) DeleteSchedule(ctx context.Context, req *coordv1.DeleteScheduleRequest) (*coordv1.DeleteScheduleResponse, error) {
	s := h.s
	if err := checkScheduleName("name", req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return schedulesOnLeader(s, ctx, coordv1.SchedulesClient.DeleteSchedule, req, func() (*coordv1.DeleteScheduleResponse, error) {
		r, err := guardedChange(ctx, s.node.DeleteSchedule, func() (*fsmv1.DeleteSchedule, error) {
			_, guard, err := s.current(ctx, req.GetName(), true)
			return &fsmv1.DeleteSchedule{Name: req.GetName(), Identity: auth.IdentityOf(ctx), Guard: guard}, err
		})
		if err != nil {
			return nil, err
		}
		if r.Changed {
			s.log.Info("schedule deleted", "schedule", req.GetName(), "by", auth.IdentityOf(ctx))
		}
		return &coordv1.DeleteScheduleResponse{Schedule: s.scheduleToProto(r.Schedule), Changed: r.Changed}, nil
	})
}
