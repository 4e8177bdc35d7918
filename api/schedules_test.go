package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func field(err error) string { return coorderr.Metadata(err)["field"] }

func reason(err error) string { return coorderr.WireReason(err) }

func newSchedulesTest(t *testing.T) (*fakeNode, *Server, *schedules) {
	t.Helper()
	n := newFakeNode()
	s := newTestServer(t, n)
	return n, s, &schedules{s: s}
}

// mustPut puts spec, failing the test if it is refused.
func mustPut(t *testing.T, h *schedules, spec *coordv1.ScheduleSpec) {
	t.Helper()
	if _, err := h.PutSchedule(context.Background(), &coordv1.PutScheduleRequest{Spec: spec}); err != nil {
		t.Fatalf("put %s: %v", spec.GetName(), err)
	}
}

func everyMinute(name string) *coordv1.ScheduleSpec {
	return &coordv1.ScheduleSpec{Name: name, Schedule: "@every 1m", Job: &coordv1.JobTemplate{Kind: "report", Queue: "reports"},
		Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW}
}

// materialise applies what the leader would for sc through calendar time
// through: the occurrences at the given instants.
func materialise(t *testing.T, n *fakeNode, name string, through int64, at ...int64) {
	t.Helper()
	sc, _ := n.fsm.Schedule(name)
	it := &fsmv1.ScheduleMaterialisation{Name: name, Revision: sc.Revision, FromMs: sc.Mark, ThroughMs: through, NextDueMs: through + 60_000}
	for _, a := range at {
		it.Create = append(it.Create, &fsmv1.ScheduleOccurrence{AtMs: a, Window: time.UnixMilli(a).UTC().Format("2006-01-02T15:04")})
	}
	r := n.apply(&fsmv1.MaterialiseSchedules{Items: []*fsmv1.ScheduleMaterialisation{it}}).(*fsm.MaterialiseResult)
	if r.Items[0].Stale {
		t.Fatalf("stale item %+v", it)
	}
}

func TestPutScheduleValidatesAndFillsDefaults(t *testing.T) {
	n, _, h := newSchedulesTest(t)
	ctx := context.Background()
	for _, c := range []struct {
		spec  *coordv1.ScheduleSpec
		field string
	}{
		{nil, "spec"},
		{&coordv1.ScheduleSpec{Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k"}}, "name"},
		{&coordv1.ScheduleSpec{Name: "a/b", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k"}}, "name"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "61 * * * *", Job: &coordv1.JobTemplate{Kind: "k"}}, "schedule"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "", Job: &coordv1.JobTemplate{Kind: "k"}}, "schedule"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", TimeZone: "Mars/Olympus", Job: &coordv1.JobTemplate{Kind: "k"}}, "time_zone"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", TimeZone: "Local", Job: &coordv1.JobTemplate{Kind: "k"}}, "time_zone"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", WindowShiftDays: 400, Job: &coordv1.JobTemplate{Kind: "k"}}, "window_shift_days"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", WindowLayout: "2006/manual-", Job: &coordv1.JobTemplate{Kind: "k"}}, "window_layout"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily"}, "job"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{}}, "job.kind"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", BackoffFactor: 0.5}}, "job.backoff_factor"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", MaxAttempts: 1000}}, "job.max_attempts"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", Args: make([]byte, 70_000)}}, "job.args"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", Labels: map[string]string{"coordd.window": "x"}}}, "job.labels"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", StartingDeadline: pbtime.Dur(-1), Job: &coordv1.JobTemplate{Kind: "k"}}, "starting_deadline"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Overlap: 9, Job: &coordv1.JobTemplate{Kind: "k"}}, "overlap"},
		// The one job-spec check, text rules included (a queue no Fetch may
		// name would block a FORBID schedule forever).
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", Queue: "ctl\x01q"}}, "job.queue"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "a\nb"}}, "job.kind"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", Labels: map[string]string{"k\x00": "v"}}}, "job.labels"},
		{&coordv1.ScheduleSpec{Name: "a", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", Queue: strings.Repeat("q", 129)}}, "job.queue"},
	} {
		_, err := h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: c.spec})
		if status.Code(err) != codes.InvalidArgument || field(err) != c.field {
			t.Errorf("%v: want INVALID_ARGUMENT on %s, got %v (field %q)", c.spec, c.field, err, field(err))
		}
	}
	if list, _ := n.fsm.ListSchedules("", "", 10, true); len(list) != 0 {
		t.Fatalf("bad specs stored: %+v", list)
	}
	resp, err := h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "close", Schedule: "5 0 * * *",
		TimeZone: "America/Sao_Paulo", Job: &coordv1.JobTemplate{Kind: "close-day"}}})
	if err != nil || !resp.GetCreated() || !resp.GetChanged() {
		t.Fatalf("put: %v %v", resp, err)
	}
	sp := resp.GetSchedule().GetSpec()
	if sp.GetCatchUpMs() != (24*time.Hour).Milliseconds() || sp.GetCompleteWithinMs() != (24*time.Hour).Milliseconds() ||
		sp.GetOverlap() != coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID || sp.GetJob().GetQueue() != "default" ||
		sp.GetJob().GetMaxAttempts() != 25 || sp.GetJob().GetBackoffFactor() != 2 || resp.GetSchedule().GetIntervalMs() != (24*time.Hour).Milliseconds() {
		t.Fatalf("defaults: %v", resp.GetSchedule())
	}
	// An every-second schedule's horizon is an hour.
	resp, err = h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "sec", Schedule: "@every 1s",
		Job: &coordv1.JobTemplate{Kind: "k"}}})
	if err != nil || resp.GetSchedule().GetSpec().GetCatchUpMs() != time.Hour.Milliseconds() ||
		resp.GetSchedule().GetSpec().GetCompleteWithinMs() != 1000 {
		t.Fatalf("every second: %v %v", resp, err)
	}
	// The same spec again: unchanged.
	resp, err = h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "sec", Schedule: "@every 1s",
		Job: &coordv1.JobTemplate{Kind: "k"}}})
	if err != nil || resp.GetChanged() || resp.GetCreated() {
		t.Fatalf("same again: %v %v", resp, err)
	}
}

func TestGetScheduleNextAndRecent(t *testing.T) {
	n, _, h := newSchedulesTest(t)
	ctx := context.Background()
	n.calendar = time.Date(2026, 9, 24, 12, 0, 30, 0, time.UTC).UnixMilli()
	mustPut(t, h, everyMinute("rep"))
	cal0 := n.calendar
	n.calendar += 3 * 60_000
	materialise(t, n, "rep", n.calendar, cal0+30_000, cal0+90_000, cal0+150_000)
	got, err := h.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: "rep", Next: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetNext()) != 3 || got.GetNext()[0].GetAtMs() != cal0+210_000 || got.GetNext()[0].GetWindow() != "2026-09-24T12:04" {
		t.Fatalf("next %v", got.GetNext())
	}
	if len(got.GetRecent()) != 3 || got.GetRecent()[0].GetWindow() != "2026-09-24T12:03" ||
		got.GetRecent()[0].GetJobState() != coordv1.JobState_JOB_STATE_AVAILABLE || got.GetRecent()[2].GetOverdue() != true ||
		got.GetRecent()[0].GetOverdue() {
		t.Fatalf("recent (newest first, the oldest overdue after its minute) %v", got.GetRecent())
	}
	if _, err := h.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("missing: %v", err)
	}
	if _, err := h.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: "rep", Next: 101}); field(err) != "next" {
		t.Fatalf("next 101: %v", err)
	}
}

func TestTriggerPauseResumeDelete(t *testing.T) {
	n, _, h := newSchedulesTest(t)
	ctx := context.Background()
	n.calendar = time.Date(2026, 9, 24, 12, 0, 30, 123e6, time.UTC).UnixMilli()
	forbid := everyMinute("rep")
	forbid.Overlap = coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID
	mustPut(t, h, forbid)
	tr, err := h.TriggerSchedule(ctx, &coordv1.TriggerScheduleRequest{Name: "rep"})
	if err != nil {
		t.Fatal(err)
	}
	if o := tr.GetOccurrence(); !o.GetManual() || o.GetJobId() == 0 || o.GetWindow() != "2026-09-24T12:00/manual-1790251230123" ||
		o.GetJobState() != coordv1.JobState_JOB_STATE_AVAILABLE {
		t.Fatalf("trigger %v", o)
	}
	// FORBID (the default) with that job not final: refused.
	n.calendar += 1000
	_, err = h.TriggerSchedule(ctx, &coordv1.TriggerScheduleRequest{Name: "rep"})
	if status.Code(err) != codes.FailedPrecondition || reason(err) != "SCHEDULE_OVERLAP" {
		t.Fatalf("second trigger: %v", err)
	}
	p, err := h.PauseSchedule(ctx, &coordv1.PauseScheduleRequest{Name: "rep"})
	if err != nil || !p.GetChanged() || !p.GetSchedule().GetPaused() || p.GetSchedule().GetNextDueMs() != 0 {
		t.Fatalf("pause %v %v", p, err)
	}
	r, err := h.ResumeSchedule(ctx, &coordv1.ResumeScheduleRequest{Name: "rep"})
	if err != nil || !r.GetChanged() || r.GetSchedule().GetPaused() {
		t.Fatalf("resume %v %v", r, err)
	}
	d, err := h.DeleteSchedule(ctx, &coordv1.DeleteScheduleRequest{Name: "rep"})
	if err != nil || !d.GetChanged() || !d.GetSchedule().GetDeleted() {
		t.Fatalf("delete %v %v", d, err)
	}
	if d, err := h.DeleteSchedule(ctx, &coordv1.DeleteScheduleRequest{Name: "rep"}); err != nil || d.GetChanged() {
		t.Fatalf("delete again %v %v", d, err)
	}
	g, err := h.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: "rep"})
	if err != nil || !g.GetSchedule().GetDeleted() || len(g.GetRecent()) != 1 || len(g.GetNext()) != 0 {
		t.Fatalf("tombstone %v %v", g, err)
	}
	for _, call := range []func() error{
		func() error { _, err := h.PauseSchedule(ctx, &coordv1.PauseScheduleRequest{Name: "rep"}); return err },
		func() error {
			_, err := h.TriggerSchedule(ctx, &coordv1.TriggerScheduleRequest{Name: "rep"})
			return err
		},
		func() error {
			_, err := h.ResumeSchedule(ctx, &coordv1.ResumeScheduleRequest{Name: "nope"})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.FailedPrecondition || reason(err) != "SCHEDULE_NOT_FOUND" {
			t.Fatalf("on a tombstone or missing schedule: %v", err)
		}
	}
	list, err := h.ListSchedules(ctx, &coordv1.ListSchedulesRequest{})
	if err != nil || len(list.GetSchedules()) != 0 {
		t.Fatalf("list without deleted %v %v", list, err)
	}
}

// Overdue is judged on calendar time; stuck leases on lease time. The fake
// node's lease time lags its calendar by decades: an occurrence is overdue
// by calendar time, not by the lagging lease clock.
func TestListOverdueOnCalendarTime(t *testing.T) {
	n, s, h := newSchedulesTest(t)
	ctx := context.Background()
	cal0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC).UnixMilli()
	n.calendar = cal0
	mustPut(t, h, everyMinute("a"))
	mustPut(t, h, everyMinute("b"))
	n.calendar = cal0 + 150_000
	materialise(t, n, "a", n.calendar, cal0+30_000, cal0+90_000)
	materialise(t, n, "b", n.calendar, cal0+30_000, cal0+90_000)
	// 12:02:40: the 12:01 jobs are overdue (due one interval after), not
	// the 12:02 ones.
	n.calendar = cal0 + 130_000
	od, err := h.ListOverdue(ctx, &coordv1.ListOverdueRequest{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if od.GetTotal() != 2 || len(od.GetOccurrences()) != 1 || od.GetNextPageToken() == "" || len(od.GetTopSchedules()) != 2 ||
		od.GetOccurrences()[0].GetWindow() != "2026-03-01T12:01" || od.GetOccurrences()[0].GetOverdueMs() != 40_000 {
		t.Fatalf("first page %v", od)
	}
	od2, err := h.ListOverdue(ctx, &coordv1.ListOverdueRequest{PageSize: 1, PageToken: od.GetNextPageToken()})
	if err != nil || len(od2.GetOccurrences()) != 1 || od2.GetNextPageToken() != "" || od2.GetOccurrences()[0].GetSchedule() == od.GetOccurrences()[0].GetSchedule() {
		t.Fatalf("second page %v %v", od2, err)
	}
	only, err := h.ListOverdue(ctx, &coordv1.ListOverdueRequest{Schedule: "b"})
	if err != nil || only.GetTotal() != 1 || len(only.GetOccurrences()) != 1 || only.GetOccurrences()[0].GetSchedule() != "b" {
		t.Fatalf("filtered %v %v", only, err)
	}
	if _, err := h.ListOverdue(ctx, &coordv1.ListOverdueRequest{PageToken: "%%"}); field(err) != "page_token" {
		t.Fatalf("bad token %v", err)
	}
	// The monitor's metrics: per queue, bounded.
	s.observeAbsence(n.fsm.Overdue(n.calendar), nil, nil, n.fsm)
	if v := gaugeValue(t, s, "coordd_schedule_overdue_occurrences", "reports"); v != 2 {
		t.Fatalf("overdue gauge %v", v)
	}
}

func gaugeValue(t *testing.T, s *Server, name, label string) float64 {
	t.Helper()
	mfs, err := s.cfg.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// Every Schedules method has an entry in the access table.
func TestSchedulesMethodsInTheAccessTable(t *testing.T) {
	for _, m := range coordv1.Schedules_ServiceDesc.Methods {
		full := "/" + coordv1.Schedules_ServiceDesc.ServiceName + "/" + m.MethodName
		if _, ok := methods[full]; !ok {
			t.Errorf("%s is not in the access table", full)
		}
	}
	if q := putScheduleQueue(&coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Job: &coordv1.JobTemplate{}}}); q != "default" {
		t.Fatalf("put's queue %q", q)
	}
	if !strings.HasPrefix(coordv1.Schedules_ServiceDesc.ServiceName, "coord.v1.") {
		t.Fatal(coordv1.Schedules_ServiceDesc.ServiceName)
	}
}

// A queue submit may not use the labels schedules put on their jobs (the
// overdue index trusts them).
func TestSubmitRefusesScheduleLabels(t *testing.T) {
	_, _, q := newQueueTest(t)
	_, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{
		{Kind: "k", Labels: map[string]string{"coordd.schedule": "x"}}}})
	if status.Code(err) != codes.InvalidArgument || field(err) != "labels" {
		t.Fatalf("submit with a reserved label: %v", err)
	}
}

// A one-shot put just after its time still owes its occurrence: the mark
// of the new schedule is just before it (the catch-up horizon decides).
func TestPutOneShotJustAfterItsTime(t *testing.T) {
	n, _, h := newSchedulesTest(t)
	at := time.UnixMilli(n.calendar - 5_000).UTC()
	resp, err := h.PutSchedule(context.Background(), &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{
		Name: "once", Schedule: "@once " + at.Format(time.RFC3339Nano), Job: &coordv1.JobTemplate{Kind: "k"}}})
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.GetSchedule().GetLastMaterialisedMs(); m != at.UnixMilli()-1 {
		t.Fatalf("mark %d, want %d (just before the one-shot)", m, at.UnixMilli()-1)
	}
	// A recurring schedule owes only what comes after its creation.
	resp, err = h.PutSchedule(context.Background(), &coordv1.PutScheduleRequest{Spec: everyMinute("rec")})
	if err != nil || resp.GetSchedule().GetLastMaterialisedMs() != n.calendar {
		t.Fatalf("recurring: %v %v", resp, err)
	}
}

// Changing a schedule needs the rights on the existing schedule's queue,
// not only on the queue of the request: another tenant can neither replace
// nor pause, resume, trigger or delete it, and its refusals do not name
// that queue. A put that moves the schedule between a change's check and
// its apply is caught by the command's guard, and the change checked again.
func TestScheduleChangesNeedTheExistingSchedulesQueue(t *testing.T) {
	n, s, h := newSchedulesTest(t)
	useACL(t, s, `rules:
  - {name: reports, identities: [reports-svc], ops: [job, read], prefixes: [reports]}
  - {name: billing, identities: [billing-svc], ops: [job, read], prefixes: [billing]}
  - {name: mover, identities: [mover], ops: [job], prefixes: [billing, reports]}
  - {name: operators, identities: [ops], ops: [admin]}`)
	// put runs the access table's check (the new queue) and the handler,
	// as the guard and the service do.
	put := func(id, name, queue string) error {
		spec := everyMinute(name)
		spec.Job.Queue = queue
		req := &coordv1.PutScheduleRequest{Spec: spec}
		if err := s.authorizeMethod(auth.Caller{Identity: id}, coordv1.Schedules_PutSchedule_FullMethodName, req); err != nil {
			return toStatus(err)
		}
		_, err := h.PutSchedule(caller(id), req)
		return err
	}
	changes := map[string]func(id, name string) error{
		"pause": func(id, name string) error {
			_, err := h.PauseSchedule(caller(id), &coordv1.PauseScheduleRequest{Name: name})
			return err
		},
		"resume": func(id, name string) error {
			_, err := h.ResumeSchedule(caller(id), &coordv1.ResumeScheduleRequest{Name: name})
			return err
		},
		"trigger": func(id, name string) error {
			_, err := h.TriggerSchedule(caller(id), &coordv1.TriggerScheduleRequest{Name: name})
			return err
		},
		"delete": func(id, name string) error {
			_, err := h.DeleteSchedule(caller(id), &coordv1.DeleteScheduleRequest{Name: name})
			return err
		},
	}
	deniedQuietly := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied || reason(err) != "PERMISSION_DENIED" {
			t.Fatalf("%s: want PERMISSION_DENIED, got %v", what, err)
		}
		if msg := status.Convert(err).Message(); strings.Contains(msg, `"reports"`) || coorderr.Metadata(err)["name"] != "" {
			t.Fatalf("%s: the refusal names the schedule's queue: %v %v", what, msg, coorderr.Metadata(err))
		}
	}
	if err := put("reports-svc", "reports-hourly", "reports"); err != nil {
		t.Fatal(err)
	}
	deniedQuietly("billing replaces", put("billing-svc", "reports-hourly", "billing"))
	for what, change := range changes {
		deniedQuietly("billing "+what, change("billing-svc", "reports-hourly"))
	}
	if sc, _ := n.fsm.Schedule("reports-hourly"); sc.Revision != 1 || sc.Spec.Job.Queue != "reports" || sc.Deleted || sc.Paused {
		t.Fatalf("the schedule changed: %+v", sc)
	}
	// Its tenant and an operator manage it; the tenant may move it only to
	// a queue it may use.
	for _, what := range []string{"pause", "resume", "trigger"} {
		if err := changes[what]("ops", "reports-hourly"); err != nil {
			t.Fatalf("ops %s: %v", what, err)
		}
	}
	if err := put("reports-svc", "reports-hourly", "billing"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("reports moves it to billing: %v", err)
	}
	// A put moving the schedule between a pause's check and its apply:
	// the guard refuses the stale pause, which is checked again and denied.
	if err := put("mover", "shared", "billing"); err != nil {
		t.Fatal(err)
	}
	moved := false
	n.beforePropose = func(body any) {
		if p, ok := body.(*fsmv1.PauseSchedule); ok && !moved {
			moved = true
			mover := everyMinute("shared")
			sp, err := s.compileSpec(mover)
			if err != nil {
				t.Fatal(err)
			}
			n.apply(&fsmv1.PutSchedule{Name: "shared", Spec: sp, Identity: "mover"}) // now in reports
			if p.GetGuard().GetQueue() != "billing" {
				t.Errorf("pause guarded by %v", p.GetGuard())
			}
		}
	}
	deniedQuietly("billing pauses a schedule moved meanwhile", changes["pause"]("billing-svc", "shared"))
	n.beforePropose = nil
	if sc, _ := n.fsm.Schedule("shared"); !moved || sc.Paused || sc.Spec.Job.Queue != "reports" {
		t.Fatalf("moved %v, schedule %+v", moved, sc)
	}
	// Reading a schedule also needs read on its queue: billing-svc may read
	// names under "billing", but not this one's record (reports' jobs).
	if err := put("mover", "billing-report", "reports"); err != nil {
		t.Fatal(err)
	}
	_, err := h.GetSchedule(caller("billing-svc"), &coordv1.GetScheduleRequest{Name: "billing-report"})
	deniedQuietly("billing reads a schedule of reports", err)
	if _, err := h.GetSchedule(caller("billing-svc"), &coordv1.GetScheduleRequest{Name: "shared2"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a missing schedule: %v", err)
	}
	// A tombstone belongs to no one: after its tenant deleted it, the name
	// is free.
	if err := changes["delete"]("reports-svc", "reports-hourly"); err != nil {
		t.Fatal(err)
	}
	if err := put("billing-svc", "reports-hourly", "billing"); err != nil {
		t.Fatalf("put over a tombstone: %v", err)
	}
}

// The DST policy: the server stores the one it resolved (cronie's rule:
// a wildcard minute or hour is a cadence), keeps an explicit one, refuses
// unknown values, and shows the resolved policy for a spec stored without
// one (put before the field existed).
func TestPutScheduleDSTPolicy(t *testing.T) {
	n, srv, h := newSchedulesTest(t)
	ctx := context.Background()
	job := &coordv1.JobTemplate{Kind: "k"}
	if _, err := h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "a", Schedule: "@daily",
		DstPolicy: 9, Job: job}}); status.Code(err) != codes.InvalidArgument || field(err) != "dst_policy" {
		t.Fatalf("unknown policy: %v", err)
	}
	for _, c := range []struct {
		name, expr string
		give, want coordv1.ScheduleDstPolicy
	}{
		{"quarter", "*/15 * * * *", 0, coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE},
		{"hourly", "@hourly", 0, coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE},
		{"fixed", "30 1 * * *", 0, coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_WALL_TIME},
		{"quarter-wall", "*/15 * * * *", coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_WALL_TIME, coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_WALL_TIME},
		{"fixed-cadence", "30 1 * * *", coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE, coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE},
		{"every", "@every 1m", 0, coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_UNSPECIFIED},
	} {
		spec := &coordv1.ScheduleSpec{Name: c.name, Schedule: c.expr, TimeZone: "Europe/Berlin", DstPolicy: c.give, Job: job}
		resp, err := h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec})
		if err != nil || resp.GetSchedule().GetSpec().GetDstPolicy() != c.want {
			t.Fatalf("%s: %v %v", c.name, resp, err)
		}
		if sc, _ := n.fsm.Schedule(c.name); coordv1.ScheduleDstPolicy(sc.Spec.DSTPolicy) != c.want {
			t.Fatalf("%s: stored %s", c.name, sc.Spec.DSTPolicy)
		}
		if again, err := h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec}); err != nil || again.GetChanged() {
			t.Fatalf("%s again: %v %v", c.name, again, err)
		}
	}
	// Stored without a policy (an older log): shown resolved.
	sp, err := srv.compileSpec(&coordv1.ScheduleSpec{Name: "old", Schedule: "0 * * * *", TimeZone: "Europe/Berlin", Job: job})
	if err != nil {
		t.Fatal(err)
	}
	sp.DstPolicy = fsmv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_UNSPECIFIED
	if r, ok := n.apply(&fsmv1.PutSchedule{Name: "old", Spec: sp}).(*fsm.ScheduleResult); !ok || r.Schedule.Spec.DSTPolicy != fsm.DSTAuto {
		t.Fatalf("old put: %+v", r)
	}
	got, err := h.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: "old"})
	if err != nil || got.GetSchedule().GetSpec().GetDstPolicy() != coordv1.ScheduleDstPolicy_SCHEDULE_DST_POLICY_CADENCE {
		t.Fatalf("old get: %v %v", got, err)
	}
}

// next_due_ms is the next occurrence, also right after a create and a
// resume (it showed the creation time: when the materialiser looks next).
func TestScheduleNextDueIsTheNextOccurrence(t *testing.T) {
	n, _, h := newSchedulesTest(t)
	ctx := context.Background()
	n.calendar = time.Date(2026, 9, 24, 12, 0, 0, 0, time.UTC).UnixMilli()
	resp, err := h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "close", Schedule: "5 0 * * *",
		TimeZone: "America/Sao_Paulo", Job: &coordv1.JobTemplate{Kind: "close-day"}}})
	want := time.Date(2026, 9, 25, 3, 5, 0, 0, time.UTC).UnixMilli() // 00:05 -03
	if err != nil || resp.GetSchedule().GetNextDueMs() != want {
		t.Fatalf("after create: next_due %d, want %d (%v)", resp.GetSchedule().GetNextDueMs(), want, err)
	}
	if _, err := h.PauseSchedule(ctx, &coordv1.PauseScheduleRequest{Name: "close"}); err != nil {
		t.Fatal(err)
	}
	n.calendar += 2 * 86400_000 // resumed on 2026-09-26 at 12:00Z: the next is 2026-09-27 00:05 -03
	r, err := h.ResumeSchedule(ctx, &coordv1.ResumeScheduleRequest{Name: "close"})
	if want := want + 2*86400_000; err != nil || r.GetSchedule().GetNextDueMs() != want {
		t.Fatalf("after resume: next_due %d, want %d (%v)", r.GetSchedule().GetNextDueMs(), want, err)
	}
	got, err := h.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: "close", Next: 1})
	if err != nil || got.GetSchedule().GetNextDueMs() != got.GetNext()[0].GetAtMs() {
		t.Fatalf("get: %v %v", got, err)
	}
	p, _ := h.PauseSchedule(ctx, &coordv1.PauseScheduleRequest{Name: "close"})
	if p.GetSchedule().GetNextDueMs() != 0 {
		t.Fatalf("paused: next_due %d", p.GetSchedule().GetNextDueMs())
	}
}
