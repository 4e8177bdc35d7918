package api

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/schedule"
)

// jobs implements coord.v1.Jobs.
type jobs struct {
	coordv1.UnimplementedJobsServer
	s *Server
}

func jobsOnLeader[Req, Resp any](s *Server, ctx context.Context,
	call func(coordv1.JobsClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	local func() (Resp, error)) (Resp, error) {
	return onLeader(s, ctx, coordv1.NewJobsClient, call, req, local)
}

func (s *Server) jobToProto(j fsm.Job) *coordv1.Job {
	out := &coordv1.Job{
		Spec: &coordv1.JobSpec{
			Name: j.Name, Schedule: j.Schedule, TimeZone: j.TimeZone, CompleteWithinMs: j.CompleteWithinMs, TtlMs: j.TTLMs,
			WindowLayout: j.WindowLayout, WindowShiftDays: j.WindowShiftDays, StartingDeadlineMs: j.StartingDeadlineMs,
			CatchUpMs: j.CatchUpMs, Concurrency: coordv1.JobConcurrency(j.Concurrency),
		},
		RegisteredAt: j.RegisteredAt, UpdatedAt: j.UpdatedAt, RegisteredBy: j.RegisteredBy,
		LastCompletedAt: j.LastCompletedAt, LastCompletedWindow: j.LastCompletedWindow,
	}
	if sched, err := s.schedules.get(j.Schedule, j.TimeZone); err == nil {
		out.IntervalMs = sched.Interval().Milliseconds()
	}
	return out
}

func (s *Server) checkJobSpec(spec *coordv1.JobSpec) error {
	if spec == nil {
		return invalidArg("spec", "is required")
	}
	if err := firstErr(checkName("spec.name", spec.GetName(), true), checkName("spec.time_zone", spec.GetTimeZone(), false),
		checkName("spec.window_layout", spec.GetWindowLayout(), false)); err != nil {
		return err
	}
	if _, err := schedule.Parse(spec.GetSchedule(), spec.GetTimeZone()); err != nil {
		return invalidArg("spec.schedule", "%v", err)
	}
	if spec.GetTtlMs() != 0 {
		if err := s.checkTTL("spec.ttl_ms", spec.GetTtlMs(), false); err != nil {
			return err
		}
	}
	for field, v := range map[string]int64{"spec.complete_within_ms": spec.GetCompleteWithinMs(),
		"spec.starting_deadline_ms": spec.GetStartingDeadlineMs(), "spec.catch_up_ms": spec.GetCatchUpMs()} {
		if v < 0 || v > (366*24*time.Hour).Milliseconds() {
			return invalidArg(field, "%d is outside [0, 1 year]", v)
		}
	}
	if d := spec.GetWindowShiftDays(); d < -366 || d > 366 {
		return invalidArg("spec.window_shift_days", "%d is outside [-366, 366]", d)
	}
	if _, ok := coordv1.JobConcurrency_name[int32(spec.GetConcurrency())]; !ok {
		return invalidArg("spec.concurrency", "unknown value %d", spec.GetConcurrency())
	}
	return nil
}

func (j *jobs) RegisterJob(ctx context.Context, req *coordv1.RegisterJobRequest) (*coordv1.RegisterJobResponse, error) {
	s := j.s
	if err := firstErr(s.checkJobSpec(req.GetSpec()), checkName("registered_by", req.GetRegisteredBy(), false)); err != nil {
		return nil, toStatus(err)
	}
	return jobsOnLeader(s, ctx, coordv1.JobsClient.RegisterJob, req, func() (*coordv1.RegisterJobResponse, error) {
		sp := req.GetSpec()
		r, err := propose[*fsm.JobResult](ctx, s.node, &fsmv1.RegisterJob{Job: &fsmv1.JobRecord{
			Name: sp.GetName(), Schedule: sp.GetSchedule(), TimeZone: sp.GetTimeZone(), CompleteWithinMs: sp.GetCompleteWithinMs(),
			TtlMs: sp.GetTtlMs(), WindowLayout: sp.GetWindowLayout(), WindowShiftDays: sp.GetWindowShiftDays(),
			StartingDeadlineMs: sp.GetStartingDeadlineMs(), CatchUpMs: sp.GetCatchUpMs(), Concurrency: int32(sp.GetConcurrency()),
			RegisteredBy: req.GetRegisteredBy(),
		}})
		if err != nil {
			return nil, err
		}
		if r.Changed {
			s.log.Info("job registered", "job", sp.GetName(), "schedule", sp.GetSchedule(), "time_zone", sp.GetTimeZone(),
				"by", req.GetRegisteredBy())
		}
		return &coordv1.RegisterJobResponse{Job: s.jobToProto(r.Job), Changed: r.Changed}, nil
	})
}

func (j *jobs) ListJobs(ctx context.Context, req *coordv1.ListJobsRequest) (*coordv1.ListJobsResponse, error) {
	s := j.s
	return jobsOnLeader(s, ctx, coordv1.JobsClient.ListJobs, req, func() (*coordv1.ListJobsResponse, error) {
		st, _, err := s.node.Read(ctx, false)
		if err != nil {
			return nil, err
		}
		out := &coordv1.ListJobsResponse{}
		for _, job := range st.Jobs() {
			out.Jobs = append(out.Jobs, s.jobToProto(job))
		}
		return out, nil
	})
}

func (j *jobs) JobStatus(ctx context.Context, req *coordv1.JobStatusRequest) (*coordv1.JobStatusResponse, error) {
	s := j.s
	if err := checkName("name", req.GetName(), true); err != nil {
		return nil, toStatus(err)
	}
	limit := int(req.GetLimit())
	if limit < 0 || limit > MaxPageSize {
		return nil, toStatus(invalidArg("limit", "%d is outside [0, %d]", limit, MaxPageSize))
	}
	if limit == 0 {
		limit = 20
	}
	return jobsOnLeader(s, ctx, coordv1.JobsClient.JobStatus, req, func() (*coordv1.JobStatusResponse, error) {
		st, _, err := s.node.Read(ctx, false)
		if err != nil {
			return nil, err
		}
		now := s.node.Calendar() // windows and occurrences are calendar time
		job, ok := st.Job(req.GetName())
		if !ok {
			return nil, &notFoundError{what: "job " + req.GetName()}
		}
		out := &coordv1.JobStatusResponse{Job: s.jobToProto(job)}
		for _, w := range st.RecentWindows(job.Name, limit) {
			out.Windows = append(out.Windows, windowToProto(w))
		}
		od, sched := s.jobOverdue(st, job, now)
		out.Overdue = od
		if sched != nil {
			t := time.UnixMilli(now)
			for i := 0; i < 5; i++ {
				if t = sched.Next(t); t.IsZero() {
					break
				}
				out.NextOccurrences = append(out.NextOccurrences, t.UnixMilli())
			}
		}
		return out, nil
	})
}

func (j *jobs) ListOverdue(ctx context.Context, req *coordv1.ListOverdueRequest) (*coordv1.ListOverdueResponse, error) {
	s := j.s
	return jobsOnLeader(s, ctx, coordv1.JobsClient.ListOverdue, req, func() (*coordv1.ListOverdueResponse, error) {
		st, now, err := s.node.Read(ctx, false)
		if err != nil {
			return nil, err
		}
		a := s.computeAbsence(st, now, s.node.Calendar())
		return &coordv1.ListOverdueResponse{Windows: a.overdue, StuckLeases: a.stuck, SlowWindows: a.slow}, nil
	})
}
