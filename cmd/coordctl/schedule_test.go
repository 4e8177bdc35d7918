package main

import (
	"context"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// scriptedSchedules is a coord.v1.Schedules on loopback with canned
// answers; it records the requests coordctl sends.
type scriptedSchedules struct {
	coordv1.UnimplementedSchedulesServer
	requestLog
}

// The sample: a 00:05 São Paulo close (2026-09-25T10:00:00Z is 07:00 -03).
func sampleSchedule() *coordv1.Schedule {
	return &coordv1.Schedule{
		Spec: &coordv1.ScheduleSpec{Name: "daily-close", Schedule: "5 0 * * *", TimeZone: "America/Sao_Paulo",
			Job: &coordv1.JobTemplate{Queue: "billing", Kind: "close-day", Args: []byte(`{"stores":4}`), MaxAttempts: 25,
				BackoffInitial: pbtime.Dur(1000), BackoffMax: pbtime.Dur(3_600_000), BackoffFactor: 2, VisibilityTimeout: pbtime.Dur(30_000),
				Labels: map[string]string{"team": "finance"}},
			WindowShiftDays: -1, CatchUp: pbtime.Dur(86_400_000), CompleteWithin: pbtime.Dur(7_200_000),
			Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID},
		Revision: 3, CreatedBy: "ops", CreatedAt: pbtime.At(calNow - 3*86_400_000), UpdatedBy: "ops", UpdatedAt: pbtime.At(calNow - 86_400_000),
		LastMaterialised: pbtime.At(calNow - 1000), NextDue: pbtime.At(1_790_391_900_000), Interval: pbtime.Dur(86_400_000), JobsCreated: 3,
		OccurrencesSkipped: 1, LastJobId: 42,
	}
}

func (s *scriptedSchedules) PutSchedule(_ context.Context, r *coordv1.PutScheduleRequest) (*coordv1.PutScheduleResponse, error) {
	s.record(r)
	return &coordv1.PutScheduleResponse{Schedule: sampleSchedule(), Created: r.GetSpec().GetName() == "daily-close", Changed: true}, nil
}

func (s *scriptedSchedules) GetSchedule(_ context.Context, r *coordv1.GetScheduleRequest) (*coordv1.GetScheduleResponse, error) {
	s.record(r)
	if r.GetName() != "daily-close" {
		return nil, coorderr.New(codes.NotFound, coorderr.NotFound, "schedule "+r.GetName()+" not found", nil)
	}
	return &coordv1.GetScheduleResponse{Schedule: sampleSchedule(), CalendarTime: pbtime.At(calNow),
		Next: []*coordv1.ScheduleOccurrence{
			{At: pbtime.At(1_790_391_900_000), Window: "2026-09-25", Due: pbtime.At(1_790_399_100_000)},
			{At: pbtime.At(1_790_478_300_000), Window: "2026-09-26", Due: pbtime.At(1_790_485_500_000)},
		},
		Recent: []*coordv1.ScheduleOccurrence{
			{At: pbtime.At(1_790_305_500_000), Window: "2026-09-24", JobId: 42, JobState: coordv1.JobState_JOB_STATE_RUNNING, Attempts: 2,
				Due: pbtime.At(1_790_312_700_000), Overdue: true},
			{At: pbtime.At(1_790_219_100_000), Window: "2026-09-23/manual-1790219100000", Manual: true, JobId: 41,
				JobState: coordv1.JobState_JOB_STATE_SUCCEEDED, Attempts: 1},
			{At: pbtime.At(1_790_132_700_000), Window: "2026-09-22", Skipped: coordv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_HORIZON,
				Count: 3, LastAt: pbtime.At(1_790_132_700_000), LastWindow: "2026-09-20"},
			{At: pbtime.At(1_790_046_300_000), Window: "2026-09-21", JobId: 40, DstGap: true},
		},
		Skipped: []*coordv1.ScheduleOccurrence{{At: pbtime.At(1_790_132_700_000), Window: "2026-09-22",
			Skipped: coordv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_HORIZON, Count: 3, LastWindow: "2026-09-20"}},
	}, nil
}

func (s *scriptedSchedules) ListSchedules(_ context.Context, r *coordv1.ListSchedulesRequest) (*coordv1.ListSchedulesResponse, error) {
	s.record(r)
	b := sampleSchedule()
	b.Spec = &coordv1.ScheduleSpec{Name: "heartbeat", Schedule: "@every 30s", Job: &coordv1.JobTemplate{Queue: "default", Kind: "ping"}}
	b.Paused, b.NextDue, b.LastJobId, b.JobsCreated, b.OccurrencesSkipped = true, nil, 0, 0, 0
	return &coordv1.ListSchedulesResponse{Schedules: []*coordv1.Schedule{sampleSchedule(), b}, NextPageToken: "aGVhcnRiZWF0",
		CalendarTime: pbtime.At(calNow)}, nil
}

func (s *scriptedSchedules) PauseSchedule(_ context.Context, r *coordv1.PauseScheduleRequest) (*coordv1.PauseScheduleResponse, error) {
	s.record(r)
	sc := sampleSchedule()
	sc.Paused, sc.PausedAt, sc.PausedBy, sc.NextDue = true, pbtime.At(calNow), "ops", nil
	return &coordv1.PauseScheduleResponse{Schedule: sc, Changed: true}, nil
}

func (s *scriptedSchedules) ResumeSchedule(_ context.Context, r *coordv1.ResumeScheduleRequest) (*coordv1.ResumeScheduleResponse, error) {
	s.record(r)
	return &coordv1.ResumeScheduleResponse{Schedule: sampleSchedule()}, nil
}

func (s *scriptedSchedules) TriggerSchedule(_ context.Context, r *coordv1.TriggerScheduleRequest) (*coordv1.TriggerScheduleResponse, error) {
	s.record(r)
	if r.GetName() == "busy" {
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.ScheduleOverlap,
			`schedule "busy" forbids overlap and the job of its previous occurrence (42) is RUNNING`,
			map[string]string{"schedule": "busy", "job_id": "42", "state": "RUNNING"})
	}
	return &coordv1.TriggerScheduleResponse{Schedule: sampleSchedule(), Occurrence: &coordv1.ScheduleOccurrence{At: pbtime.At(calNow),
		Window: "2026-09-24/manual-1790330400000", Manual: true, JobId: 43, JobState: coordv1.JobState_JOB_STATE_AVAILABLE}}, nil
}

func (s *scriptedSchedules) DeleteSchedule(_ context.Context, r *coordv1.DeleteScheduleRequest) (*coordv1.DeleteScheduleResponse, error) {
	s.record(r)
	sc := sampleSchedule()
	sc.Deleted, sc.DeletedAt, sc.DeletedBy, sc.NextDue = true, pbtime.At(calNow), "ops", nil
	return &coordv1.DeleteScheduleResponse{Schedule: sc, Changed: true}, nil
}

func (s *scriptedSchedules) ListOverdue(_ context.Context, r *coordv1.ListOverdueRequest) (*coordv1.ListOverdueResponse, error) {
	s.record(r)
	if r.GetSchedule() == "quiet" {
		return &coordv1.ListOverdueResponse{CalendarTime: pbtime.At(calNow)}, nil
	}
	return &coordv1.ListOverdueResponse{CalendarTime: pbtime.At(calNow), Total: 3, NextPageToken: "AAAB",
		Occurrences: []*coordv1.OverdueOccurrence{
			{Schedule: "sync", At: pbtime.At(calNow - 300_000), Due: pbtime.At(calNow - 240_000), Overdue: pbtime.Dur(240_000), Queue: "default"},
			{Schedule: "daily-close", Window: "2026-09-24", At: pbtime.At(1_790_305_500_000), Due: pbtime.At(1_790_312_700_000),
				Overdue: pbtime.Dur(calNow - 1_790_312_700_000), JobId: 42, JobState: coordv1.JobState_JOB_STATE_RUNNING, Queue: "billing", Attempts: 2},
		},
		TopSchedules: []*coordv1.OverdueSchedule{{Schedule: "daily-close", Overdue: 2, OldestAt: pbtime.At(1_790_219_100_000)},
			{Schedule: "sync", Overdue: 1, OldestAt: pbtime.At(calNow - 300_000)}},
		StuckLeases: []*coordv1.StuckLease{{Reason: "HELD_TOO_LONG", Lease: &coordv1.Lease{Name: "legacy-close", Owner: "billing-7",
			Generation: 3, Held: pbtime.Dur(9 * 86_400_000), RenewedAgo: pbtime.Dur(1000)}}},
	}, nil
}

func startScriptedSchedules(t *testing.T) (*scriptedSchedules, []string) {
	t.Helper()
	s := &scriptedSchedules{}
	return s, serveScripted(t, func(srv *grpc.Server) { coordv1.RegisterSchedulesServer(srv, s) })
}

// The schedule commands' tables, on a scripted server.
func TestScheduleCommandsGolden(t *testing.T) {
	_, eps := startScriptedSchedules(t)
	goldenTranscript(t, "schedule", eps, [][]string{
		{"schedule", "create", "daily-close", "--schedule", "5 0 * * *", "--tz", "America/Sao_Paulo", "--kind", "close-day",
			"--queue", "billing", "--window-shift-days", "-1", "--complete-within", "2h"},
		{"schedule", "get", "daily-close"},
		{"schedule", "list"},
		{"schedule", "pause", "daily-close"},
		{"schedule", "resume", "daily-close"},
		{"schedule", "trigger", "daily-close"},
		{"schedule", "delete", "daily-close"},
		{"job", "overdue"},
		{"job", "overdue", "--schedule", "quiet"},
	})

	// -o json is the RPC's response as the HTTP API writes it.
	doc := ctlJSON(t, eps, "schedule", "get", "daily-close")
	if field(doc, "schedule", "spec", "name") != "daily-close" || field(doc, "calendar_time") != "2026-09-25T10:00:00Z" ||
		field(doc, "schedule", "spec", "overlap") != "FORBID" ||
		len(doc["recent"].([]any)) != 4 {
		t.Fatalf("get json: %v", doc)
	}
}

// Flags map onto the request.
func TestScheduleCreateRequest(t *testing.T) {
	s, eps := startScriptedSchedules(t)
	ctlOK(t, eps, "schedule", "create", "report", "--schedule", "0 6 * * MON-FRI", "--tz", "Europe/Berlin", "--kind", "report",
		"--queue", "ops", "--args", `{"to":"ops"}`, "--overlap", "replace", "--starting-deadline", "10m", "--catch-up", "6h",
		"--complete-within", "1h", "--window-layout", "2006-01-02", "--window-shift-days", "1", "--max-attempts", "3",
		"--priority", "7", "--visibility-timeout", "2m", "--label", "team=ops", "--label", "tier=1")
	put := s.reqs[len(s.reqs)-2].(*coordv1.PutScheduleRequest) // then the next occurrences are read
	if !put.GetCreateOnly() || put.GetExpectedRevision() != 0 {
		t.Fatalf("create sent %v", put)
	}
	got := put.GetSpec()
	want := &coordv1.ScheduleSpec{Name: "report", Schedule: "0 6 * * MON-FRI", TimeZone: "Europe/Berlin",
		Job: &coordv1.JobTemplate{Queue: "ops", Kind: "report", Args: []byte(`{"to":"ops"}`), MaxAttempts: 3, Priority: 7,
			VisibilityTimeout: pbtime.Dur(120_000), Labels: map[string]string{"team": "ops", "tier": "1"}},
		WindowLayout: "2006-01-02", WindowShiftDays: 1, StartingDeadline: pbtime.Dur(600_000), CatchUp: pbtime.Dur(21_600_000),
		CompleteWithin: pbtime.Dur(3_600_000), Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_REPLACE}
	if !proto.Equal(got, want) {
		t.Fatalf("sent %v\nwant %v", got, want)
	}
	ctlOK(t, eps, "schedule", "list", "--prefix", "bill", "--deleted", "--limit", "5", "--page-token", "x")
	if r := s.last().(*coordv1.ListSchedulesRequest); r.GetPrefix() != "bill" || !r.GetShowDeleted() || r.GetPageSize() != 5 ||
		r.GetPageToken() != "x" {
		t.Fatalf("list %v", r)
	}
	if r := ctl(t, eps, "job", "overdue", "--schedule", "daily-close", "--limit", "7", "--page-token", "AAAB"); r.code != exitOverdue {
		t.Fatalf("job overdue listing something: exit %d, want %d", r.code, exitOverdue)
	}
	if r := s.last().(*coordv1.ListOverdueRequest); r.GetSchedule() != "daily-close" || r.GetPageSize() != 7 || r.GetPageToken() != "AAAB" {
		t.Fatalf("overdue %v", r)
	}
}

// Bad flags are usage errors (exit 2) found before any call; refusals
// exit 1 with the reason and its facts.
func TestScheduleCommandErrors(t *testing.T) {
	s, eps := startScriptedSchedules(t)
	wantUsageErrors(t, eps, &s.requestLog, [][]string{
		{"schedule", "create", "x", "--kind", "k"},
		{"schedule", "create", "x", "--schedule", "@daily"},
		{"schedule", "create", "x", "--schedule", "@daily", "--kind", "k", "--args", "{"},
		{"schedule", "create", "x", "--schedule", "@daily", "--kind", "k", "--overlap", "sometimes"},
		{"schedule", "create", "x", "--schedule", "@daily", "--kind", "k", "--catch-up", "-1h"},
		{"schedule", "create", "x", "--schedule", "@daily", "--kind", "k", "--label", "nokey"},
		{"schedule", "create"},
		{"schedule", "update", "x"},
		{"schedule", "update", "x", "--catch-up", "-1h"},
		{"schedule", "apply"},
		{"schedule", "apply", "-f", "x.yaml", "extra"},
		{"schedule", "get"},
		{"schedule", "get", "x", "--next", "0"},
		{"schedule", "list", "--limit", "2000"},
		{"schedule", "trigger", "a", "b"},
		{"job", "overdue", "--limit", "0"},
	})
	r := ctl(t, eps, "schedule", "trigger", "busy")
	if r.code != exitError || !strings.Contains(r.errOut, "SCHEDULE_OVERLAP") || !strings.Contains(r.errOut, "job_id=42") {
		t.Fatalf("exit %d: %q", r.code, r.errOut)
	}
	r = ctl(t, eps, "schedule", "get", "nope")
	if r.code != exitError || !strings.Contains(r.errOut, "schedule nope not found") {
		t.Fatalf("exit %d: %q", r.code, r.errOut)
	}
}
