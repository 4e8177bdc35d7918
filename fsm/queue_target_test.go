package fsm

import (
	"strings"
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

func target(url string) func(*fsmv1.QueueJobSpec) {
	return func(s *fsmv1.QueueJobSpec) { s.Target = &fsmv1.HttpTarget{Url: url} }
}

// submitRules submits specs under the given job-spec rules.
func submitRules(t testing.TB, f *FSM, cal int64, rules uint32, specs ...*fsmv1.QueueJobSpec) any {
	t.Helper()
	return runAt(t, f, 0, cal, &fsmv1.SubmitJobs{Jobs: specs, Identity: "submitter", SpecRules: rules})
}

func fetchTargeted(t testing.TB, f *FSM, cal int64, worker string, maxJobs uint32) []*QueueJob {
	t.Helper()
	out := runAt(t, f, 0, cal, &fsmv1.FetchJobs{Targeted: true, Max: maxJobs, WorkerId: worker, Identity: "id-" + worker})
	r, ok := out.(*FetchResult)
	if !ok {
		t.Fatalf("targeted fetch at %d: %#v", cal, out)
	}
	return r.Jobs
}

// TestTargetedJobsOnlyInTheDeliveryLane: a job with a target is handed
// out only by a targeted fetch (of any queue), never to a pull worker of
// its queue; its attempts are the queue's (lapse, retry, token).
func TestTargetedJobsOnlyInTheDeliveryLane(t *testing.T) {
	f := New()
	r, ok := submitRules(t, f, t0, JobSpecRules, jspec("q", "pull"), jspec("q", "push", target("https://app.example/jobs")),
		jspec("other", "push", target("http://10.0.0.1:8080/run"), prio(5))).(*SubmitResult)
	if !ok {
		t.Fatalf("submit: %#v", r)
	}
	if got := fetch(t, f, t0, "w", 10, "q", "other"); len(got) != 1 || got[0].Kind != "pull" {
		t.Fatalf("a pull worker fetched %v, want only the job without a target", ids(got))
	}
	if !f.JobsReady([]string{DeliveryLane}, t0) {
		t.Fatal("JobsReady(DeliveryLane) with two targeted jobs available")
	}
	got := fetchTargeted(t, f, t0, "d", 10)
	if len(got) != 2 || got[0].ID != 3 || got[1].ID != 2 {
		t.Fatalf("targeted fetch = %v, want [3 2] (priority first)", ids(got))
	}
	if got[1].Target.GetMethod() != "POST" || got[1].Target.GetUrl() != "https://app.example/jobs" {
		t.Fatalf("target %v, want POST to the URL", got[1].Target)
	}
	if f.JobsReady([]string{DeliveryLane}, t0) || len(fetchTargeted(t, f, t0, "d", 10)) != 0 {
		t.Fatal("the delivery lane is empty now")
	}
	// A lapse makes it available again, in the delivery lane.
	tick(t, f, t0+DefaultVisibilityMs)
	if got := fetch(t, f, t0+DefaultVisibilityMs, "w", 10, "q", "other"); len(got) != 1 || got[0].Kind != "pull" {
		t.Fatalf("after the lapses a pull worker fetched %v, want only the pull job", ids(got))
	}
	again := fetchTargeted(t, f, t0+DefaultVisibilityMs, "d", 1)
	if len(again) != 1 || again[0].ID != 3 || again[0].Attempts != 2 {
		t.Fatalf("after the lapse: %+v", again)
	}
	// The snapshot keeps the target.
	g := restored(t, f)
	if j, _ := g.QueueJob(2); j.Target.GetUrl() != "https://app.example/jobs" {
		t.Fatalf("restored target %v", j.Target)
	}
}

// TestTargetNeedsSpecRules3: an entry proposed under older job-spec rules
// cannot carry a target (none was written), and a targeted fetch names no
// queues.
func TestTargetNeedsSpecRules3(t *testing.T) {
	f := New()
	rej, ok := submitRules(t, f, t0, 2, jspec("q", "push", target("https://app.example/"))).(*Rejection)
	if !ok || rej.Metadata["field"] != "target" {
		t.Fatalf("rules 1 with a target: %#v", rej)
	}
	out := runAt(t, f, 0, t0, &fsmv1.FetchJobs{Targeted: true, Queues: []string{"q"}, Max: 1, WorkerId: "d"})
	if rej, ok := out.(*Rejection); !ok || rej.Reason != coorderr.InvalidArgument || rej.Metadata["field"] != "queues" {
		t.Fatalf("targeted fetch with queues: %#v", out)
	}
}

func TestCheckTarget(t *testing.T) {
	ok := func(t *fsmv1.HttpTarget) {}
	for _, tc := range []struct {
		mod   func(*fsmv1.HttpTarget)
		field string
	}{
		{ok, ""},
		{func(t *fsmv1.HttpTarget) {
			t.Method, t.TimeoutMs, t.Secret, t.RetryStatus = "PUT", 5000, "billing-v2", []uint32{404, 409}
			t.Headers = []*fsmv1.HttpHeader{{Name: "Authorization", Value: "Bearer x"}, {Name: "X-Tenant", Value: "7"}}
		}, ""},
		{func(t *fsmv1.HttpTarget) { t.Url = "ftp://app.example/" }, "target.url"},
		{func(t *fsmv1.HttpTarget) { t.Url = "https://" }, "target.url"},
		{func(t *fsmv1.HttpTarget) { t.Url = "https://user:pw@app.example/" }, "target.url"},
		{func(t *fsmv1.HttpTarget) { t.Url = "https://app.example/a b" }, "target.url"},
		{func(t *fsmv1.HttpTarget) { t.Url = "https://app.example/" + strings.Repeat("a", MaxTargetURLBytes) }, "target.url"},
		{func(t *fsmv1.HttpTarget) { t.Method = "post" }, "target.method"},
		{func(t *fsmv1.HttpTarget) { t.Headers = []*fsmv1.HttpHeader{{Name: "x-tenant", Value: "7"}} }, "target.headers"},
		{func(t *fsmv1.HttpTarget) { t.Headers = []*fsmv1.HttpHeader{{Name: "Coordd-Attempt", Value: "7"}} }, "target.headers"},
		{func(t *fsmv1.HttpTarget) { t.Headers = []*fsmv1.HttpHeader{{Name: "Webhook-Signature", Value: "v1,x"}} }, "target.headers"},
		{func(t *fsmv1.HttpTarget) { t.Headers = []*fsmv1.HttpHeader{{Name: "X-A", Value: "a\r\nX-B: b"}} }, "target.headers"},
		{func(t *fsmv1.HttpTarget) {
			t.Headers = []*fsmv1.HttpHeader{{Name: "X-B", Value: "1"}, {Name: "X-A", Value: "2"}}
		}, "target.headers"},
		{func(t *fsmv1.HttpTarget) { t.TimeoutMs = MaxVisibilityMs + 1 }, "target.timeout"},
		{func(t *fsmv1.HttpTarget) { t.RetryStatus = []uint32{503} }, "target.retryable_status"},
		{func(t *fsmv1.HttpTarget) { t.RetryStatus = []uint32{409, 404} }, "target.retryable_status"},
		{func(t *fsmv1.HttpTarget) { t.Secret = "a b" }, "target.secret"},
	} {
		tg := &fsmv1.HttpTarget{Url: "https://app.example/jobs", Method: "POST"}
		tc.mod(tg)
		sp := jspec("q", "k")
		sp.Target = tg
		if field, problem := CheckJobSpec(sp); field != tc.field {
			t.Errorf("%v: field %q (%s), want %q", tg, field, problem, tc.field)
		}
	}
}

// TestRetryAfterOnlyLengthensTheBackoff: a failure's retry_after_ms makes
// the job due no earlier than that, and never earlier than the backoff.
func TestRetryAfterOnlyLengthensTheBackoff(t *testing.T) {
	f := New()
	submit(t, f, t0, jspec("q", "k", backoff(1000, 60_000, 2000)), jspec("q", "k", backoff(1000, 60_000, 2000)))
	fetch(t, f, t0, "w", 2, "q")
	fails := &fsmv1.FailJobs{WorkerId: "w", Identity: "id-w", Failures: []*fsmv1.JobFailure{
		{JobId: 1, Attempt: 1, Retryable: true, RetryAfterMs: 30_000}, {JobId: 2, Attempt: 1, Retryable: true, RetryAfterMs: 10}}}
	runAt(t, f, 0, t0, fails)
	if j := jobState(t, f, 1); j.RunAt != t0+30_000 {
		t.Errorf("Retry-After 30 s: run_at +%d ms", j.RunAt-t0)
	}
	if j := jobState(t, f, 2); j.RunAt != t0+1000 {
		t.Errorf("Retry-After 10 ms under a 1 s backoff: run_at +%d ms", j.RunAt-t0)
	}
}

// TestQueueTargetGoesToNewJobs: a queue's target is given to the jobs
// added to it without one of their own (submitted or made by a
// schedule), not to those already there; clearing it stops that; it
// survives a snapshot.
func TestQueueTargetGoesToNewJobs(t *testing.T) {
	f := New()
	before := submitOne(t, f, t0, jspec("hooks", "k"))
	set := func(tg *fsmv1.HttpTarget, rules uint32) any {
		return runAt(t, f, 0, t0, &fsmv1.SetQueueTarget{Queue: "hooks", Target: tg, Identity: "ops", SpecRules: rules})
	}
	if rej, ok := set(&fsmv1.HttpTarget{Url: "https://app.example/hook", Method: "POST"}, 2).(*Rejection); !ok || rej.Metadata["field"] != "target" {
		t.Fatalf("a queue target under rules 2: %#v", rej)
	}
	if rej, ok := set(&fsmv1.HttpTarget{Url: "ftp://x", Method: "POST"}, JobSpecRules).(*Rejection); !ok || rej.Metadata["field"] != "target.url" {
		t.Fatalf("a bad queue target: %#v", rej)
	}
	if q, ok := set(&fsmv1.HttpTarget{Url: "https://app.example/hook", Method: "POST"}, JobSpecRules).(*QueueTarget); !ok || q.UpdatedBy != "ops" {
		t.Fatalf("set: %#v", q)
	}
	r, ok := submitRules(t, f, t0, JobSpecRules, jspec("hooks", "k"), jspec("hooks", "own", target("https://other.example/")), jspec("pull", "k")).(*SubmitResult)
	if !ok {
		t.Fatalf("submit: %#v", r)
	}
	for i, want := range []string{"https://app.example/hook", "https://other.example/", ""} {
		if j := jobState(t, f, r.Jobs[i].ID); j.Target.GetUrl() != want {
			t.Errorf("job %d: target %q, want %q", i, j.Target.GetUrl(), want)
		}
	}
	if j := jobState(t, f, before.ID); j.Target != nil {
		t.Errorf("a job submitted before the queue's target got it: %v", j.Target)
	}
	g := restored(t, f)
	if qs := g.QueueTargets(""); len(qs) != 1 || qs[0].Queue != "hooks" || qs[0].Target.GetUrl() != "https://app.example/hook" {
		t.Fatalf("restored queue targets %+v", qs)
	}
	set(nil, JobSpecRules)
	if len(f.QueueTargets("")) != 0 {
		t.Fatal("cleared, still there")
	}
	if j := submitOne(t, f, t0, jspec("hooks", "k")); j.Target != nil {
		t.Errorf("after the clear a job got %v", j.Target)
	}
}

// TestDeliveryOutcomeKeptWithTheAttempt: a completion's and a failure's
// delivery status and latency are kept with the attempt and survive a
// snapshot; an entry without them (a pull worker's, or one written
// before them) leaves them zero.
func TestDeliveryOutcomeKeptWithTheAttempt(t *testing.T) {
	f := New()
	submitRules(t, f, t0, JobSpecRules, jspec("q", "a", target("https://app.example/a")), jspec("q", "b", target("https://app.example/b")),
		jspec("q", "c", target("https://app.example/c")))
	fetchTargeted(t, f, t0, "d", 3)
	runAt(t, f, 0, t0+10, &fsmv1.CompleteJobs{WorkerId: "d", Identity: "id-d", Completions: []*fsmv1.JobCompletion{
		{JobId: 1, Attempt: 1, DeliveryStatus: 201, DeliveryLatencyMs: 12}, {JobId: 2, Attempt: 1}}})
	runAt(t, f, 0, t0+10, &fsmv1.FailJobs{WorkerId: "d", Identity: "id-d", Failures: []*fsmv1.JobFailure{
		{JobId: 3, Attempt: 1, Error: "HTTP 503", Retryable: true, DeliveryStatus: 503, DeliveryLatencyMs: 40}}})
	check := func(f *FSM, how string) {
		t.Helper()
		for id, want := range map[uint64][2]int64{1: {201, 12}, 2: {0, 0}, 3: {503, 40}} {
			j := jobState(t, f, id)
			if a := j.Log[len(j.Log)-1]; int64(a.DeliveryStatus) != want[0] || a.DeliveryLatencyMs != want[1] {
				t.Errorf("%s: job %d's attempt: status %d, latency %d ms; want %v", how, id, a.DeliveryStatus, a.DeliveryLatencyMs, want)
			}
		}
	}
	check(f, "applied")
	check(restored(t, f), "restored")
}
