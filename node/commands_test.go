package node

import (
	"testing"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Each typed command api.Node calls commits its command and answers the
// FSM's result as its own type (a wrong result type in commands.go is an
// error here, not a cast the API makes).
func TestTypedCommandsAnswerTheirResults(t *testing.T) {
	n := newTestNode(t)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Leases.
	a, err := n.Acquire(bg(), &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 10_000, Identity: "id"}, false)
	must("acquire", err)
	gen := a.Lease.Generation
	renewed, err := n.Renew(bg(), &fsmv1.Renew{Name: "L", Owner: "o", Generation: gen, TtlMs: 20_000, Identity: "id"})
	must("renew", err)
	claim, err := n.ClaimWindow(bg(), &fsmv1.ClaimWindow{Job: "j", Window: "w", LeaseName: "L", Owner: "o", Generation: gen, Identity: "id"})
	must("claim", err)
	done, err := n.CompleteWindow(bg(), &fsmv1.CompleteWindow{Job: "j", Window: "w", LeaseName: "L", Owner: "o", Generation: gen, Identity: "id"})
	must("complete window", err)
	commit, err := n.FencedCommit(bg(), &fsmv1.FencedCommit{Resource: "r", LeaseName: "L", Generation: gen, Payload: []byte("p")})
	must("fenced commit", err)
	rel, err := n.Release(bg(), &fsmv1.Release{Name: "L", Owner: "o", Generation: gen, Identity: "id"})
	must("release", err)
	if renewed.Lease.Generation != gen || !claim.Claimed || done.Window.CompletedAt == 0 || !commit.Accepted || !rel.Released {
		t.Fatalf("leases: renew %+v, claim %+v, complete %+v, commit %+v, release %+v", renewed, claim, done, commit, rel)
	}

	// Jobs.
	spec := func() *fsmv1.QueueJobSpec {
		s := &fsmv1.QueueJobSpec{Queue: "q", Kind: "k"}
		fsm.FillJobDefaults(s)
		return s
	}
	sub, err := n.SubmitJobs(bg(), &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{spec(), spec()}, Identity: "id"})
	must("submit", err)
	if len(sub.Jobs) != 2 {
		t.Fatalf("submit: %+v", sub)
	}
	f, err := n.Fetch(bg(), &fsmv1.FetchJobs{Queues: []string{"q"}, Max: 2, WorkerId: "w", Identity: "id"}, 0)
	must("fetch", err)
	if len(f.Jobs) != 2 {
		t.Fatalf("fetch: %+v", f)
	}
	ok, bad := f.Jobs[0].ID, f.Jobs[1].ID
	ref := func(id uint64) *fsmv1.JobAttemptRef { return &fsmv1.JobAttemptRef{JobId: id, Attempt: 1} }
	results := map[string]func() (fsm.JobResults, error){
		"heartbeat": func() (fsm.JobResults, error) {
			return n.HeartbeatJobs(bg(), &fsmv1.HeartbeatJobs{WorkerId: "w", Identity: "id", Attempts: []*fsmv1.JobAttemptRef{ref(ok)}})
		},
		"complete": func() (fsm.JobResults, error) {
			return n.CompleteJobs(bg(), &fsmv1.CompleteJobs{WorkerId: "w", Identity: "id",
				Completions: []*fsmv1.JobCompletion{{JobId: ok, Attempt: 1}}})
		},
		"fail": func() (fsm.JobResults, error) {
			return n.FailJobs(bg(), &fsmv1.FailJobs{WorkerId: "w", Identity: "id", Failures: []*fsmv1.JobFailure{{JobId: bad, Attempt: 1}}})
		},
		"retry": func() (fsm.JobResults, error) {
			return n.RetryJobs(bg(), &fsmv1.RetryJobs{JobIds: []uint64{bad}, Identity: "id"})
		},
		"cancel": func() (fsm.JobResults, error) {
			return n.CancelJobs(bg(), &fsmv1.CancelJobs{JobIds: []uint64{bad}, Identity: "id"})
		},
	}
	for _, name := range []string{"heartbeat", "complete", "fail", "retry", "cancel"} {
		res, err := results[name]()
		must(name, err)
		if len(res) != 1 {
			t.Fatalf("%s: %d results", name, len(res))
		}
		if _, isOutcome := res[0].(*fsm.JobOutcome); !isOutcome {
			t.Fatalf("%s: item answered %#v", name, res[0])
		}
	}

	// Schedules.
	put, err := n.PutSchedule(bg(), &fsmv1.PutSchedule{Name: "s", Identity: "id",
		Spec: &fsmv1.ScheduleSpec{Expr: "0 * * * *", TimeZone: "UTC", Job: spec(), CompleteWithinMs: 3_600_000,
			Overlap: fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW}})
	must("put schedule", err)
	paused, err := n.PauseSchedule(bg(), &fsmv1.PauseSchedule{Name: "s", Paused: true, Identity: "id"})
	must("pause schedule", err)
	trig, err := n.TriggerSchedule(bg(), &fsmv1.TriggerSchedule{Name: "s", Window: "manual", AtMs: n.CalendarTime(), Identity: "id"})
	must("trigger schedule", err)
	del, err := n.DeleteSchedule(bg(), &fsmv1.DeleteSchedule{Name: "s", Identity: "id"})
	must("delete schedule", err)
	if !put.Created || !paused.Changed || trig.Schedule.Name != "s" || !del.Changed {
		t.Fatalf("schedules: put %+v, pause %+v, trigger %+v, delete %+v", put, paused, trig, del)
	}
}
