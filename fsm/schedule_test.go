package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Schedule tests run in virtual calendar time from t0. The FSM never
// parses the expression: the items below are what the leader would have
// computed for an "@every 1m" schedule (occurrences on whole minutes).

const minute = int64(60_000)

func sspec(overlap fsmv1.ScheduleOverlap, mods ...func(*fsmv1.ScheduleSpec)) *fsmv1.ScheduleSpec {
	s := &fsmv1.ScheduleSpec{Expr: "@every 1m", TimeZone: "UTC", Job: jspec("reports", "send-report", vis(3_600_000)),
		CompleteWithinMs: 5 * minute, Overlap: overlap}
	for _, m := range mods {
		m(s)
	}
	return s
}

func putSched(t testing.TB, f *FSM, cal int64, name string, sp *fsmv1.ScheduleSpec) ScheduleResult {
	t.Helper()
	out := runAt(t, f, 0, cal, &fsmv1.PutSchedule{Name: name, Spec: sp, Identity: "alice"})
	r, ok := out.(*ScheduleResult)
	if !ok {
		t.Fatalf("put %s at %d: %#v", name, cal, out)
	}
	return *r
}

func getSched(t testing.TB, f *FSM, name string) Schedule {
	t.Helper()
	return lookup(t, f.Schedule, name, "schedule")
}

// reportsWithOneJob is a new FSM with schedule "reports" (with the given
// overlap policy) put at t0 and its first occurrence, minute 1,
// materialised at t0+minute.
func reportsWithOneJob(t testing.TB, overlap fsmv1.ScheduleOverlap) *FSM {
	t.Helper()
	f := New()
	putSched(t, f, t0, "reports", sspec(overlap))
	materialiseAt(t, f, t0+minute, item(getSched(t, f, "reports"), 1, occs(1)))
	return f
}

// occs are occurrences at the given minutes after t0 (window "m<k>").
func occs(minutes ...int64) []*fsmv1.ScheduleOccurrence {
	var out []*fsmv1.ScheduleOccurrence
	for _, m := range minutes {
		out = append(out, &fsmv1.ScheduleOccurrence{AtMs: t0 + m*minute, Window: fmt.Sprintf("m%d", m)})
	}
	return out
}

// item is what the leader would propose for sc through minute through.
func item(sc Schedule, through int64, create []*fsmv1.ScheduleOccurrence, skipped ...*fsmv1.ScheduleSkip) *fsmv1.ScheduleMaterialisation {
	return &fsmv1.ScheduleMaterialisation{Name: sc.Name, Revision: sc.Revision, FromMs: sc.Mark, ThroughMs: t0 + through*minute,
		NextDueMs: t0 + (through+1)*minute, Create: create, Skipped: skipped}
}

func materialiseAt(t testing.TB, f *FSM, cal int64, items ...*fsmv1.ScheduleMaterialisation) []MaterialiseOutcome {
	t.Helper()
	out := runAt(t, f, 0, cal, &fsmv1.MaterialiseSchedules{Items: items})
	r, ok := out.(*MaterialiseResult)
	if !ok {
		t.Fatalf("materialise at %d: %#v", cal, out)
	}
	return r.Items
}

func label(j QueueJob, key string) string {
	for _, l := range j.Labels {
		if l.Key == key {
			return l.Value
		}
	}
	return ""
}

func TestSchedulePutIsAnIdempotentUpsert(t *testing.T) {
	f := New()
	r := putSched(t, f, t0, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID))
	if !r.Created || !r.Changed || r.Schedule.Revision != 1 || r.Schedule.Mark != t0 || r.Schedule.NextDue != t0 ||
		r.Schedule.CreatedBy != "alice" || r.Schedule.CreatedAt != t0 {
		t.Fatalf("create: %+v", r)
	}
	if due := f.DueSchedules(t0, 10); len(due) != 1 || due[0].Name != "reports" {
		t.Fatalf("a new schedule is due at once (the leader computes its first occurrence): %+v", due)
	}
	// The same spec again: nothing changes (every replica of a service may
	// put its schedules at start).
	r = putSched(t, f, t0+10, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID))
	if r.Changed || r.Created || r.Schedule.Revision != 1 || r.Schedule.UpdatedAt != t0 {
		t.Fatalf("same spec again: %+v", r)
	}
	// Materialise, then update: the mark and history stay, the revision
	// grows, and the schedule is due at once (its next occurrence may move).
	materialiseAt(t, f, t0+minute, item(getSched(t, f, "reports"), 1, occs(1)))
	r = putSched(t, f, t0+minute+5, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	if !r.Changed || r.Created || r.Schedule.Revision != 2 || r.Schedule.Mark != t0+minute || len(r.Schedule.History) != 1 ||
		r.Schedule.NextDue != t0+minute+5 || r.Schedule.Spec.Overlap != OverlapAllow {
		t.Fatalf("update: %+v", r)
	}
	// Bad specs are refused with the field, nothing stored.
	for _, c := range []struct {
		name  string
		spec  *fsmv1.ScheduleSpec
		field string
	}{
		{"", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID), "name"},
		{"x", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) { s.Expr = "" }), "schedule"},
		{"x", sspec(0), "overlap"},
		{"x", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) { s.Job.Kind = "" }), "job.kind"},
		{"x", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) { s.Job.UniqueKey = "k" }), "job.unique_key"},
		{"x", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) {
			s.Job.Labels = []*fsmv1.JobLabel{{Key: "coordd.window", Value: "w"}}
		}), "job.labels"},
		{"x", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) { s.CatchUpMs = -1 }), "catch_up"},
		{"x", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) { s.Job = nil }), "job"},
	} {
		out := runAt(t, f, 0, t0+2*minute, &fsmv1.PutSchedule{Name: c.name, Spec: c.spec})
		rej, ok := out.(*Rejection)
		if !ok || rej.Reason != coorderr.InvalidArgument || rej.Metadata["field"] != c.field {
			t.Errorf("put %q: want INVALID_ARGUMENT on %s, got %#v", c.name, c.field, out)
		}
	}
	if _, ok := f.Schedule("x"); ok {
		t.Fatal("a refused put stored a schedule")
	}
}

// A template is checked by the job-spec rules the entry names: by the
// current ones (the text rules: a control character in the queue would
// make jobs no Fetch may name), and an entry written before spec_rules
// existed replays as it did.
func TestPutScheduleJudgesTemplateByItsRules(t *testing.T) {
	for _, c := range []struct {
		field string
		mod   func(*fsmv1.QueueJobSpec)
	}{
		{"job.queue", func(j *fsmv1.QueueJobSpec) { j.Queue = "ctl\x01q" }},
		{"job.kind", func(j *fsmv1.QueueJobSpec) { j.Kind = "a\nb" }},
		{"job.labels", func(j *fsmv1.QueueJobSpec) { j.Labels = []*fsmv1.JobLabel{{Key: "k\x00", Value: "v"}} }},
	} {
		f := New()
		sp := sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) { c.mod(s.Job) })
		out := runAt(t, f, 0, t0, &fsmv1.PutSchedule{Name: "x", Spec: sp, SpecRules: JobSpecRules})
		if rej, ok := out.(*Rejection); !ok || rej.Reason != coorderr.InvalidArgument || rej.Metadata["field"] != c.field {
			t.Errorf("%s: want INVALID_ARGUMENT on it, got %#v", c.field, out)
		}
		if r, ok := runAt(t, f, 0, t0, &fsmv1.PutSchedule{Name: "x", Spec: sp}).(*ScheduleResult); !ok || r.Schedule.Name != "x" {
			t.Errorf("%s: an entry of spec_rules 0 replays differently: %#v", c.field, r)
		}
	}
}

func TestScheduleMaterialisesEachOccurrenceOnce(t *testing.T) {
	f := New()
	putSched(t, f, t0, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	sc := getSched(t, f, "reports")
	it := item(sc, 3, occs(1, 2, 3))
	out := materialiseAt(t, f, t0+3*minute+20, it)
	if out[0].Stale || out[0].Created != 3 {
		t.Fatalf("first materialisation: %+v", out)
	}
	sc = getSched(t, f, "reports")
	if sc.Mark != t0+3*minute || sc.NextDue != t0+4*minute || sc.JobsMade != 3 || len(sc.History) != 3 {
		t.Fatalf("after: %+v", sc)
	}
	for i, e := range sc.History {
		j := jobState(t, f, e.JobID)
		win := fmt.Sprintf("m%d", i+1)
		if e.Window != win || j.UniqueKey != ScheduleUniqueKey("reports", win) || j.Queue != "reports" || j.Kind != "send-report" ||
			j.RunAt != t0+int64(i+1)*minute || j.State != JobAvailable || label(j, LabelSchedule) != "reports" ||
			label(j, LabelWindow) != win || label(j, LabelOccurrence) != fmt.Sprint(t0+int64(i+1)*minute) ||
			!bytes.Equal(j.Args, []byte(`{"n":1}`)) {
			t.Fatalf("occurrence %d: entry %+v, job %+v", i+1, e, j)
		}
	}
	// The same item again (a retry after an unknown outcome, a late entry
	// of a deposed leader) is stale: the mark moved.
	if out := materialiseAt(t, f, t0+3*minute+30, it); !out[0].Stale {
		t.Fatalf("repeated item applied: %+v", out)
	}
	// An item computed from an older revision is stale too, even with the
	// current mark.
	putSched(t, f, t0+3*minute+40, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW, func(s *fsmv1.ScheduleSpec) {
		s.CompleteWithinMs = minute
	}))
	old := item(sc, 4, occs(4))
	if out := materialiseAt(t, f, t0+4*minute, old); !out[0].Stale {
		t.Fatalf("item of revision %d applied at revision %d: %+v", sc.Revision, getSched(t, f, "reports").Revision, out)
	}
	// An occurrence whose unique key names an existing job (made before by
	// another path) records that job, no second one.
	sc = getSched(t, f, "reports")
	out = materialiseAt(t, f, t0+4*minute, item(sc, 4, append(occs(3), occs(4)...)))
	sc = getSched(t, f, "reports")
	if out[0].Created != 1 || out[0].Duplicates != 1 || f.QueueJobCount() != 4 {
		t.Fatalf("duplicate occurrence: %+v, %d jobs", out, f.QueueJobCount())
	}
	if e := sc.History[len(sc.History)-2]; !e.Duplicate || e.JobID != sc.History[2].JobID {
		t.Fatalf("duplicate entry %+v", e)
	}
}

func TestScheduleRecordsSkippedRanges(t *testing.T) {
	f := New()
	putSched(t, f, t0, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	sc := getSched(t, f, "reports")
	// A 3-day outage with a 1-day horizon, per the leader: one HORIZON
	// record for the first two days, the last day's occurrences created (a
	// few here), in time order in the history.
	const day = 1440
	hz := &fsmv1.ScheduleSkip{Reason: fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_HORIZON, FirstMs: t0 + minute,
		LastMs: t0 + 2*day*minute, Count: 2 * day, FirstWindow: "m1", LastWindow: fmt.Sprintf("m%d", 2*day)}
	dl := &fsmv1.ScheduleSkip{Reason: fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_DEADLINE, FirstMs: t0 + (2*day+1)*minute,
		LastMs: t0 + (3*day-2)*minute, Count: day - 2, FirstWindow: "a", LastWindow: "b"}
	out := materialiseAt(t, f, t0+3*day*minute, item(sc, 3*day, occs(3*day-1, 3*day), hz, dl))
	if out[0].Created != 2 || out[0].Skipped != 3*day-2 {
		t.Fatalf("outcome %+v", out)
	}
	sc = getSched(t, f, "reports")
	var got []string
	for _, e := range sc.History {
		if e.Skipped != SkipNone {
			got = append(got, fmt.Sprintf("%s×%d %s..%s", e.Skipped, e.Count, e.Window, e.LastWindow))
		} else {
			got = append(got, e.Window)
		}
	}
	want := []string{"HORIZON×2880 m1..m2880", "DEADLINE×1438 a..b", "m4319", "m4320"}
	if !slices.Equal(got, want) || sc.SkipCount != 3*day-2 || sc.JobsMade != 2 {
		t.Fatalf("history %q (skipped %d, made %d), want %q", got, sc.SkipCount, sc.JobsMade, want)
	}
}

func TestScheduleForbidSkipsWhileTheJobRuns(t *testing.T) {
	f := reportsWithOneJob(t, fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID)
	first := getSched(t, f, "reports").LastJobID
	fetch(t, f, t0+minute+10, "w1", 1, "reports")
	// The job outlives its interval: the next occurrences are skipped
	// (OVERLAP), merged into one range across materialisations.
	for m := int64(2); m <= 4; m++ {
		out := materialiseAt(t, f, t0+m*minute, item(getSched(t, f, "reports"), m, occs(m)))
		if out[0].Created != 0 || out[0].Skipped != 1 {
			t.Fatalf("minute %d: %+v", m, out)
		}
	}
	sc := getSched(t, f, "reports")
	if n := len(sc.History); n != 2 || sc.History[1].Skipped != SkipOverlap || sc.History[1].Count != 3 ||
		sc.History[1].Window != "m2" || sc.History[1].LastWindow != "m4" || sc.LastJobID != first {
		t.Fatalf("history %+v", sc.History)
	}
	if len(sc.Skips) != 1 || sc.Skips[0] != sc.History[1] {
		t.Fatalf("skips %+v, want the merged OVERLAP run", sc.Skips)
	}
	// The job completes: the next occurrence runs.
	if _, ok := one(t, complete(f, t, t0+4*minute+30, "w1", first, 1, "")).(*JobOutcome); !ok {
		t.Fatal("completion refused")
	}
	out := materialiseAt(t, f, t0+5*minute, item(getSched(t, f, "reports"), 5, occs(5)))
	sc = getSched(t, f, "reports")
	if out[0].Created != 1 || sc.LastJobID == first || len(sc.History) != 3 || sc.SkipCount != 3 {
		t.Fatalf("after completion: %+v %+v", out, sc)
	}
	// Several due in one round (catch-up): the first runs, the rest overlap.
	out = materialiseAt(t, f, t0+8*minute, item(getSched(t, f, "reports"), 8, occs(6, 7, 8)))
	if out[0].Created != 0 || out[0].Skipped != 3 {
		t.Fatalf("job of minute 5 still available, so 6..8 overlap: %+v", out)
	}
}

func TestScheduleReplaceCancelsTheRunningJob(t *testing.T) {
	f := reportsWithOneJob(t, fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_REPLACE)
	first := getSched(t, f, "reports").LastJobID
	fetch(t, f, t0+minute+10, "w1", 1, "reports")
	out := materialiseAt(t, f, t0+2*minute, item(getSched(t, f, "reports"), 2, occs(2)))
	if out[0].Created != 1 || out[0].Cancelled != 1 {
		t.Fatalf("replace: %+v", out)
	}
	j := jobState(t, f, first)
	if j.State != JobCancelled || j.Log[0].Outcome != AttemptCancelled || !strings.Contains(j.Log[0].Error, "replaced") {
		t.Fatalf("replaced job %+v", j)
	}
	// The old worker's completion is refused: its attempt is over.
	if rej, ok := one(t, complete(f, t, t0+2*minute+1, "w1", first, 1, "")).(*Rejection); !ok || rej.Reason != coorderr.JobCancelled {
		t.Fatalf("completion of the replaced attempt: %#v", rej)
	}
	// ALLOW makes both.
	g := reportsWithOneJob(t, fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)
	fetch(t, g, t0+minute+10, "w1", 1, "reports")
	if out := materialiseAt(t, g, t0+2*minute, item(getSched(t, g, "reports"), 2, occs(2))); out[0].Created != 1 || out[0].Cancelled != 0 {
		t.Fatalf("allow: %+v", out)
	}
}

func TestSchedulePauseAndResumeWithoutABurst(t *testing.T) {
	f := reportsWithOneJob(t, fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)
	before := getSched(t, f, "reports")
	r := runAt(t, f, 0, t0+minute+1, &fsmv1.PauseSchedule{Name: "reports", Paused: true, Identity: "ops"}).(*ScheduleResult)
	if !r.Changed || !r.Schedule.Paused || r.Schedule.PausedBy != "ops" || r.Schedule.Revision != before.Revision+1 {
		t.Fatalf("pause: %+v", r)
	}
	if due := f.DueSchedules(t0+100*minute, 10); len(due) != 0 {
		t.Fatalf("a paused schedule is due: %+v", due)
	}
	// An item the leader computed before the pause is stale.
	if out := materialiseAt(t, f, t0+2*minute, item(before, 2, occs(2))); !out[0].Stale {
		t.Fatalf("item of before the pause applied: %+v", out)
	}
	// Pausing again changes nothing.
	if r := runAt(t, f, 0, t0+3*minute, &fsmv1.PauseSchedule{Name: "reports", Paused: true}).(*ScheduleResult); r.Changed {
		t.Fatalf("second pause: %+v", r)
	}
	// Resume at minute 60: due at once, the missed range is the leader's to
	// record (one PAUSED record), no job for what was missed.
	r = runAt(t, f, 0, t0+60*minute+5, &fsmv1.PauseSchedule{Name: "reports", Paused: false, Identity: "ops"}).(*ScheduleResult)
	if !r.Changed || r.Schedule.Paused || r.Schedule.ResumedAt != t0+60*minute+5 || r.Schedule.NextDue != t0+60*minute+5 {
		t.Fatalf("resume: %+v", r)
	}
	sc := getSched(t, f, "reports")
	paused := &fsmv1.ScheduleSkip{Reason: fsmv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_PAUSED, FirstMs: t0 + 2*minute,
		LastMs: t0 + 60*minute, Count: 59, FirstWindow: "m2", LastWindow: "m60"}
	it := item(sc, 60, nil, paused)
	it.ThroughMs = t0 + 60*minute + 10 // now
	out := materialiseAt(t, f, t0+60*minute+10, it)
	sc = getSched(t, f, "reports")
	if out[0].Created != 0 || out[0].Skipped != 59 || sc.ResumedAt != 0 || sc.Mark != t0+60*minute+10 || f.QueueJobCount() != 1 {
		t.Fatalf("after resume: %+v %+v", out, sc)
	}
	if e := sc.History[len(sc.History)-1]; e.Skipped != SkipPaused || e.Count != 59 {
		t.Fatalf("paused range %+v", e)
	}
	// Pause, resume and trigger of an unknown schedule.
	for _, body := range []any{&fsmv1.PauseSchedule{Name: "nope", Paused: true}, &fsmv1.PauseSchedule{Name: "nope"},
		&fsmv1.TriggerSchedule{Name: "nope", Window: "w", AtMs: t0}, &fsmv1.DeleteSchedule{Name: "nope"}} {
		if rej, ok := runAt(t, f, 0, t0+61*minute, body).(*Rejection); !ok || rej.Reason != coorderr.ScheduleNotFound {
			t.Fatalf("%T of an unknown schedule: %#v", body, rej)
		}
	}
}

func TestScheduleTrigger(t *testing.T) {
	f := New()
	putSched(t, f, t0, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID))
	trig := func(cal int64, window string) any {
		return runAt(t, f, 0, cal, &fsmv1.TriggerSchedule{Name: "reports", Window: window, AtMs: cal, Identity: "ops"})
	}
	r, ok := trig(t0+30_000, "m0/manual-1").(*TriggerResult)
	if !ok || !r.Entry.Manual || r.Entry.JobID == 0 || r.Schedule.Mark != t0 || r.Schedule.LastJobID != r.Entry.JobID {
		t.Fatalf("trigger: %#v", r)
	}
	if j := jobState(t, f, r.Entry.JobID); j.State != JobAvailable || label(j, LabelWindow) != "m0/manual-1" {
		t.Fatalf("triggered job %+v", j)
	}
	// FORBID: a second trigger while that job is not final is refused.
	rej, ok := trig(t0+31_000, "m0/manual-2").(*Rejection)
	if !ok || rej.Reason != coorderr.ScheduleOverlap || rej.Metadata["job_id"] != fmt.Sprint(r.Entry.JobID) {
		t.Fatalf("trigger over a running job: %#v", rej)
	}
	// Paused schedules can be triggered.
	fetch(t, f, t0+32_000, "w", 1, "reports")
	complete(f, t, t0+33_000, "w", r.Entry.JobID, 1, "")
	runAt(t, f, 0, t0+34_000, &fsmv1.PauseSchedule{Name: "reports", Paused: true})
	r2, ok := trig(t0+35_000, "m0/manual-3").(*TriggerResult)
	if !ok || r2.Entry.JobID == r.Entry.JobID {
		t.Fatalf("trigger of a paused schedule: %#v", r2)
	}
	// A retried trigger with the same stamp (the same window) is the same
	// occurrence.
	complete(f, t, t0+36_000, "w", r2.Entry.JobID, 1, "") // not fetched: refused, still available
	runAt(t, f, 0, t0+37_000, &fsmv1.CancelJobs{JobIds: []uint64{r2.Entry.JobID}})
	r3, ok := trig(t0+38_000, "m0/manual-3").(*TriggerResult)
	if !ok || !r3.Entry.Duplicate || r3.Entry.JobID != r2.Entry.JobID {
		t.Fatalf("retried trigger: %#v", r3)
	}
}

func TestScheduleDeleteKeepsHistoryUntilPruned(t *testing.T) {
	f := reportsWithOneJob(t, fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)
	live := getSched(t, f, "reports")
	r := runAt(t, f, 0, t0+2*minute, &fsmv1.DeleteSchedule{Name: "reports", Identity: "ops"}).(*ScheduleResult)
	if !r.Changed || !r.Schedule.Deleted || r.Schedule.DeletedBy != "ops" || len(r.Schedule.History) != 1 {
		t.Fatalf("delete: %+v", r)
	}
	if r := runAt(t, f, 0, t0+2*minute, &fsmv1.DeleteSchedule{Name: "reports"}).(*ScheduleResult); r.Changed {
		t.Fatalf("second delete: %+v", r)
	}
	if out := materialiseAt(t, f, t0+3*minute, item(live, 3, occs(2, 3))); !out[0].Stale {
		t.Fatalf("materialised a deleted schedule: %+v", out)
	}
	if list, _ := f.ListSchedules("", "", 10, false); len(list) != 0 {
		t.Fatalf("listed tombstones: %+v", list)
	}
	if list, _ := f.ListSchedules("", "", 10, true); len(list) != 1 || !list[0].Deleted {
		t.Fatalf("tombstones with deleted: %+v", list)
	}
	// Trigger and pause of a deleted schedule are refused.
	if rej, ok := runAt(t, f, 0, t0+3*minute, &fsmv1.TriggerSchedule{Name: "reports", Window: "w", AtMs: t0}).(*Rejection); !ok ||
		rej.Reason != coorderr.ScheduleNotFound {
		t.Fatalf("trigger of a tombstone: %#v", rej)
	}
	// Retention: a prune before the deletion keeps it; after, it goes.
	runAt(t, f, 0, t0+4*minute, &fsmv1.Prune{JobsCutoffMs: t0 + 2*minute})
	if _, ok := f.Schedule("reports"); !ok {
		t.Fatal("tombstone pruned before its time")
	}
	if r := runAt(t, f, 0, t0+5*minute, &fsmv1.Prune{JobsCutoffMs: t0 + 2*minute + 1}).(*PruneResult); r.Schedules != 1 {
		t.Fatalf("prune: %+v", r)
	}
	if _, ok := f.Schedule("reports"); ok {
		t.Fatal("tombstone kept past retention")
	}
	// A put over a tombstone is a new schedule, its revision above the old.
	putSched(t, f, t0+5*minute, "again", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	runAt(t, f, 0, t0+6*minute, &fsmv1.DeleteSchedule{Name: "again"})
	r2 := putSched(t, f, t0+7*minute, "again", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	if !r2.Created || r2.Schedule.Revision != 3 || r2.Schedule.Mark != t0+7*minute || r2.Schedule.Deleted || len(r2.Schedule.History) != 0 {
		t.Fatalf("put over a tombstone: %+v", r2)
	}
}

func TestScheduleHistoryKeepsTheLastEntries(t *testing.T) {
	f := New()
	putSched(t, f, t0, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	var ms []int64
	for m := int64(1); m <= MaxScheduleHistory+8; m++ {
		ms = append(ms, m)
	}
	materialiseAt(t, f, t0+int64(len(ms))*minute, item(getSched(t, f, "reports"), int64(len(ms)), occs(ms...)))
	sc := getSched(t, f, "reports")
	if len(sc.History) != MaxScheduleHistory || sc.History[0].Window != "m9" || sc.JobsMade != uint64(len(ms)) {
		t.Fatalf("history of %d, first %s", len(sc.History), sc.History[0].Window)
	}
}

func TestScheduleOverdueJobs(t *testing.T) {
	f := New()
	putSched(t, f, t0, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)) // complete within 5 min
	materialiseAt(t, f, t0+3*minute, item(getSched(t, f, "reports"), 3, occs(1, 2, 3)))
	jobs := getSched(t, f, "reports").History
	fetch(t, f, t0+3*minute, "w", 1, "reports")
	complete(f, t, t0+4*minute, "w", jobs[0].JobID, 1, "")
	// At minute 7.5: 2 is overdue (due at 7), 3 is not (due at 8), 1 is done.
	cal := t0 + 7*minute + 30_000
	od, _, more := f.OverdueJobs(cal, "", OverdueCursor{}, 10)
	if len(od) != 1 || more || od[0].JobID != jobs[1].JobID || od[0].Window != "m2" || od[0].Due != t0+7*minute ||
		od[0].State != JobAvailable || od[0].Queue != "reports" {
		t.Fatalf("overdue at 7.5: %+v", od)
	}
	// Paged at minute 9: both, oldest first, one per page.
	cal = t0 + 9*minute
	p1, cur, more := f.OverdueJobs(cal, "", OverdueCursor{}, 1)
	p2, _, more2 := f.OverdueJobs(cal, "", cur, 1)
	if len(p1) != 1 || !more || p1[0].Window != "m2" || len(p2) != 1 || more2 || p2[0].Window != "m3" {
		t.Fatalf("pages %+v %+v", p1, p2)
	}
	sum := f.Overdue(cal)
	if sum.Total != 2 || sum.PerQueue["reports"] != 2 || sum.PerSchedule["reports"] != 2 || sum.Oldest["reports"] != t0+2*minute {
		t.Fatalf("summary %+v", sum)
	}
	// Late: the schedule is due at minute 4 and nothing was made (the
	// leader is behind) -> reported at 4 + 5 min.
	if late := f.LateSchedules(t0+9*minute+1, 10); len(late) != 1 || late[0].At != t0+4*minute {
		t.Fatalf("late %+v", late)
	}
	// Jobs of a deleted schedule are no longer overdue (they do not alert
	// forever).
	runAt(t, f, 0, cal, &fsmv1.DeleteSchedule{Name: "reports"})
	if od, _, _ := f.OverdueJobs(cal+1, "", OverdueCursor{}, 10); len(od) != 0 {
		t.Fatalf("overdue of a deleted schedule: %+v", od)
	}
}

func TestScheduleSnapshotRoundTrip(t *testing.T) {
	f := New()
	putSched(t, f, t0, "a", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, func(s *fsmv1.ScheduleSpec) { labels("team", "ops")(s.Job) }))
	putSched(t, f, t0, "b", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	putSched(t, f, t0, "c", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_REPLACE))
	materialiseAt(t, f, t0+2*minute, item(getSched(t, f, "a"), 2, occs(1, 2)), item(getSched(t, f, "b"), 2, occs(1, 2)))
	runAt(t, f, 0, t0+2*minute, &fsmv1.PauseSchedule{Name: "c", Paused: true})
	putSched(t, f, t0+2*minute, "d", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW))
	runAt(t, f, 0, t0+2*minute, &fsmv1.DeleteSchedule{Name: "d"})
	g := restored(t, f)
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs after restore")
	}
	cal := t0 + 10*minute
	for _, x := range []*FSM{f, g} {
		due := x.DueSchedules(cal, 10)
		od, _, _ := x.OverdueJobs(cal, "", OverdueCursor{}, 10)
		if len(due) != 2 || due[0].Name != "a" || due[1].Name != "b" || len(od) != 3 {
			t.Fatalf("after restore: due %+v, overdue %+v", due, od)
		}
		if r := runAt(t, x, 0, cal, &fsmv1.Prune{JobsCutoffMs: cal}).(*PruneResult); r.Schedules != 1 {
			t.Fatalf("prune of the tombstone after restore: %+v", r)
		}
	}
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs after continuing")
	}
}

// A change carrying a guard applies only while the live schedule's queue
// is the one the leader authorised it against ("" = no live schedule); a
// change without a guard (older entries) is not checked.
func TestScheduleGuardHoldsTheAuthorisedQueue(t *testing.T) {
	f := New()
	putSched(t, f, t0, "reports", sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)) // queue "reports"
	billing := sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW, func(s *fsmv1.ScheduleSpec) { s.Job.Queue = "billing" })
	stale := &fsmv1.ScheduleGuard{Queue: "billing"}
	none := &fsmv1.ScheduleGuard{}
	for _, cmd := range []any{
		&fsmv1.PutSchedule{Name: "reports", Spec: billing, Identity: "b", Guard: none},
		&fsmv1.PutSchedule{Name: "reports", Spec: billing, Identity: "b", Guard: stale},
		&fsmv1.PauseSchedule{Name: "reports", Paused: true, Identity: "b", Guard: stale},
		&fsmv1.TriggerSchedule{Name: "reports", Window: "w", AtMs: t0, Identity: "b", Guard: stale},
		&fsmv1.DeleteSchedule{Name: "reports", Identity: "b", Guard: stale},
	} {
		rej, ok := runAt(t, f, 0, t0+1, cmd).(*Rejection)
		if !ok || rej.Reason != coorderr.PermissionDenied || strings.Contains(rej.Message, "billing") {
			t.Fatalf("%T with guard %v: %v", cmd, stale, rej)
		}
	}
	if sc := getSched(t, f, "reports"); sc.Revision != 1 || sc.Paused || sc.Deleted || len(sc.History) != 0 {
		t.Fatalf("a refused change changed it: %+v", sc)
	}
	held := &fsmv1.ScheduleGuard{Queue: "reports"}
	if _, ok := runAt(t, f, 0, t0+1, &fsmv1.PauseSchedule{Name: "reports", Paused: true, Guard: held}).(*ScheduleResult); !ok {
		t.Fatal("pause with the schedule's queue refused")
	}
	if _, ok := runAt(t, f, 0, t0+1, &fsmv1.PutSchedule{Name: "reports", Spec: billing}).(*ScheduleResult); !ok {
		t.Fatal("put without a guard refused")
	}
	if _, ok := runAt(t, f, 0, t0+1, &fsmv1.DeleteSchedule{Name: "reports", Guard: stale}).(*ScheduleResult); !ok {
		t.Fatal("delete with the schedule's queue refused")
	}
	// A tombstone is no live schedule.
	if _, ok := runAt(t, f, 0, t0+1, &fsmv1.PutSchedule{Name: "reports", Spec: billing, Guard: none}).(*ScheduleResult); !ok {
		t.Fatal("put over a tombstone with the guard of no live schedule refused")
	}
}

// Issue 32, item 5: max_schedules counts the schedules an identity created
// that are not deleted; only a put that creates one is refused, and a
// delete gives one back (also after a restore).
func TestScheduleQuota(t *testing.T) {
	f := New()
	put := func(cal int64, name, identity string) any {
		return runAt(t, f, 0, cal, &fsmv1.PutSchedule{Name: name, Spec: sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW), Identity: identity, MaxSchedules: 2})
	}
	for _, name := range []string{"a", "b"} {
		if _, ok := put(t0, name, "x").(*ScheduleResult); !ok {
			t.Fatal(name)
		}
	}
	rej := put(t0+1, "c", "x")
	wantReason(t, rej, coorderr.ScheduleQuota)
	if m := rej.(*Rejection).Metadata; m["quota"] != "schedules" || m["limit"] != "2" {
		t.Fatalf("metadata: %v", m)
	}
	if _, ok := f.Schedule("c"); ok {
		t.Fatal("a refused put created the schedule")
	}
	// An update is not a new schedule; another identity has its own count.
	if _, ok := runAt(t, f, 0, t0+2, &fsmv1.PutSchedule{Name: "a", Spec: sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID), Identity: "x", MaxSchedules: 2}).(*ScheduleResult); !ok {
		t.Fatal("update")
	}
	if _, ok := put(t0+2, "c", "y").(*ScheduleResult); !ok {
		t.Fatal("another identity")
	}
	if got := f.SchedulesCreatedBy("x"); len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("SchedulesCreatedBy: %v", got)
	}
	runAt(t, f, 0, t0+3, &fsmv1.DeleteSchedule{Name: "b"})
	g := restored(t, f)
	for _, x := range []*FSM{f, g} {
		if _, ok := runAt(t, x, 0, t0+4, &fsmv1.PutSchedule{Name: "d", Spec: sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW), Identity: "x", MaxSchedules: 2}).(*ScheduleResult); !ok {
			t.Fatal("after a delete")
		}
		wantReason(t, runAt(t, x, 0, t0+5, &fsmv1.PutSchedule{Name: "e", Spec: sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW), Identity: "x", MaxSchedules: 2}), coorderr.ScheduleQuota)
	}
}
