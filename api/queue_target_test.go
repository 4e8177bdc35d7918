package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/internal/auth"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/webhook"
)

// withDelivery configures the server's delivery: 127.0.0.1 allowed, a
// secret named "app".
func withDelivery(t *testing.T, s *Server) {
	t.Helper()
	allow, err := delivery.ParseAllow([]string{"127.0.0.1", "*.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Delivery = delivery.Options{Allow: allow, Secrets: delivery.Secrets{"app": {webhook.NewSecret()}}}
}

// TestSubmitTargetAtTheEdge: a target is converted (method upper-case,
// header names canonical, the timeout in ms) and checked, every refusal
// naming its field: the FSM's rules, the allow-list (naming the flag), the
// configured secrets.
func TestSubmitTargetAtTheEdge(t *testing.T) {
	_, s, q := newQueueTest(t)
	withDelivery(t, s)
	ok := &coordv1.HttpTarget{Url: "http://127.0.0.1:8080/jobs", Method: "put", Headers: map[string]string{"x-tenant": "acme"},
		Timeout: durationpb.New(1500 * time.Microsecond), RetryableStatus: []uint32{409, 404, 409}, Secret: "app"}
	r, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", Target: ok}}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := q.Get(context.Background(), &coordv1.QueueGetRequest{Id: r.GetJobs()[0].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	got := g.GetJob().GetTarget()
	if got.GetMethod() != "PUT" || got.GetHeaders()["X-Tenant"] != "acme" || got.GetTimeout().AsDuration() != 2*time.Millisecond ||
		len(got.GetRetryableStatus()) != 2 || got.GetRetryableStatus()[0] != 404 || got.GetSecret() != "app" {
		t.Fatalf("stored target %v", got)
	}
	for _, tc := range []struct {
		target *coordv1.HttpTarget
		field  string
		text   string
	}{
		{&coordv1.HttpTarget{Url: "http://10.0.0.1/x"}, "target.url", delivery.AllowFlag},
		{&coordv1.HttpTarget{Url: "https://example.com/x"}, "target.url", delivery.AllowFlag}, // *.example.com is not example.com
		{&coordv1.HttpTarget{Url: "ftp://127.0.0.1/x"}, "target.url", "http"},
		{&coordv1.HttpTarget{Url: "http://127.0.0.1/x", Secret: "nope"}, "target.secret", delivery.SecretsFlag},
		{&coordv1.HttpTarget{Url: "http://127.0.0.1/x", Method: "TRACE"}, "target.method", "TRACE"},
		{&coordv1.HttpTarget{Url: "http://127.0.0.1/x", Headers: map[string]string{"coordd-attempt": "9"}}, "target.headers", "set by coordd"},
		{&coordv1.HttpTarget{Url: "http://127.0.0.1/x", Headers: map[string]string{"X-A": "1", "x-a": "2"}}, "target.headers", "twice"},
		{&coordv1.HttpTarget{Url: "http://127.0.0.1/x", Timeout: durationpb.New(-time.Second)}, "target.timeout", ""},
		{&coordv1.HttpTarget{Url: "http://127.0.0.1/x", RetryableStatus: []uint32{500}}, "target.retryable_status", ""},
	} {
		_, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k"}, {Kind: "k", Target: tc.target}}})
		invalid(t, err, tc.field, 1)
		if !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%v: %v, want it to say %q", tc.target, err, tc.text)
		}
	}
	// A schedule's template: the same checks, under job.
	sh := &schedules{s: s}
	spec := everyMinute("hooks")
	spec.Job.Target = &coordv1.HttpTarget{Url: "http://10.0.0.1/x"}
	_, err = sh.PutSchedule(context.Background(), &coordv1.PutScheduleRequest{Spec: spec})
	invalid(t, err, "job.target.url", -1)
	spec.Job.Target = &coordv1.HttpTarget{Url: "http://127.0.0.1/x"}
	mustPut(t, sh, spec)
	gs, err := sh.GetSchedule(context.Background(), &coordv1.GetScheduleRequest{Name: "hooks"})
	if err != nil || gs.GetSchedule().GetSpec().GetJob().GetTarget().GetMethod() != "POST" {
		t.Fatalf("schedule's target %v (%v)", gs.GetSchedule().GetSpec().GetJob().GetTarget(), err)
	}
}

// TestTargetOverHTTP: the gateway takes a target in JSON (the timeout as
// a duration string) and answers it back.
func TestTargetOverHTTP(t *testing.T) {
	_, s, _ := newQueueTest(t)
	withDelivery(t, s)
	h := s.httpAPI()
	body := `{"jobs":[{"kind":"k","target":{"url":"http://127.0.0.1/x","timeout":"5s","headers":{"Authorization":"Bearer t"}}}]}`
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/queue/jobs", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/queue/jobs/1", nil))
	var got struct {
		Job struct {
			Target struct {
				URL     string            `json:"url"`
				Method  string            `json:"method"`
				Timeout string            `json:"timeout"`
				Headers map[string]string `json:"headers"`
			} `json:"target"`
		} `json:"job"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if tg := got.Job.Target; tg.URL != "http://127.0.0.1/x" || tg.Method != "POST" || tg.Timeout != "5s" || tg.Headers["Authorization"] != "Bearer t" {
		t.Fatalf("target over HTTP: %+v", tg)
	}
}

// TestTargetedFetchIsTheNodes: with identities on, only a member may fetch
// the delivery lane; a targeted fetch names no queues.
func TestTargetedFetchIsTheNodes(t *testing.T) {
	_, s, q := newQueueTest(t)
	useACL(t, s, "rules:\n  - name: worker\n    identities: [alice]\n    ops: [work]\n    prefixes: [\"\"]\n")
	req := &coordv1.QueueFetchRequest{Targeted: true, Max: 1, WorkerId: "w"}
	if _, err := q.Fetch(caller("alice"), req); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice's targeted fetch: %v, want PERMISSION_DENIED", err)
	}
	member := auth.WithCaller(context.Background(), auth.Caller{Identity: "n2", Member: true})
	if _, err := q.Fetch(member, req); err != nil {
		t.Fatalf("a member's targeted fetch: %v", err)
	}
	_, err := q.Fetch(member, &coordv1.QueueFetchRequest{Targeted: true, Queues: []string{"q"}, Max: 1, WorkerId: "w"})
	invalid(t, err, "queues", -1)
}

// TestConsoleShowsTheTarget: a job's page says where it is delivered
// (method, URL, the secret's name, header names but never their values).
func TestConsoleShowsTheTarget(t *testing.T) {
	ct := newConsoleTest(t, false)
	withDelivery(t, ct.s)
	id := ct.submit(&coordv1.NewJob{Queue: "billing", Kind: "charge", Args: []byte(`{"invoice":17}`),
		Target: &coordv1.HttpTarget{Url: "https://hooks.example.com/charge", Secret: "app", Headers: map[string]string{"Authorization": "Bearer s3cr3t"}}})[0]
	page := ct.get("", fmt.Sprintf("/ui/jobs/%d", id), http.StatusOK)
	for _, want := range []string{"delivered to", "POST https://hooks.example.com/charge", "secret <code>app</code>", "<code>Authorization</code>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the job page lacks %q", want)
		}
	}
	if strings.Contains(page, "s3cr3t") {
		t.Error("the job page shows a header's value")
	}
}

// TestQueueTargetAtTheEdge: a queue's target is checked like a job's and
// given to the jobs submitted to the queue afterwards without their own;
// Targets lists it; an empty SetTarget clears it.
func TestQueueTargetAtTheEdge(t *testing.T) {
	_, s, q := newQueueTest(t)
	withDelivery(t, s)
	ctx := context.Background()
	_, err := q.SetTarget(ctx, &coordv1.QueueSetTargetRequest{Queue: "hooks", Target: &coordv1.HttpTarget{Url: "http://10.0.0.1/x"}})
	invalid(t, err, "target.url", -1)
	_, err = q.SetTarget(ctx, &coordv1.QueueSetTargetRequest{Queue: "hooks", Target: &coordv1.HttpTarget{Url: "http://127.0.0.1/x", Method: "TRACE"}})
	invalid(t, err, "target.method", -1)
	r, err := q.SetTarget(ctx, &coordv1.QueueSetTargetRequest{Queue: "hooks", Target: &coordv1.HttpTarget{Url: "http://127.0.0.1/x", Secret: "app"}})
	if err != nil || r.GetTarget().GetTarget().GetMethod() != "POST" {
		t.Fatalf("set: %v %v", r, err)
	}
	sub, err := q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "hooks", Kind: "k"}}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := q.Get(ctx, &coordv1.QueueGetRequest{Id: sub.GetJobs()[0].GetId()})
	if err != nil || g.GetJob().GetTarget().GetUrl() != "http://127.0.0.1/x" {
		t.Fatalf("a job of the queue: target %v (%v)", g.GetJob().GetTarget(), err)
	}
	ls, err := q.Targets(ctx, &coordv1.QueueTargetsRequest{})
	if err != nil || len(ls.GetTargets()) != 1 || ls.GetTargets()[0].GetQueue() != "hooks" {
		t.Fatalf("targets %v (%v)", ls, err)
	}
	if _, err := q.SetTarget(ctx, &coordv1.QueueSetTargetRequest{Queue: "hooks"}); err != nil {
		t.Fatal(err)
	}
	if ls, _ := q.Targets(ctx, &coordv1.QueueTargetsRequest{}); len(ls.GetTargets()) != 0 {
		t.Fatalf("cleared, still %v", ls)
	}
}

// TestDeliveryOutcomeAtTheEdge: a completion's or failure's delivery
// status and latency are the nodes' to report (PERMISSION_DENIED for
// anyone else), checked (an HTTP status, a bounded latency, naming the
// field), and shown with the attempt by Get.
func TestDeliveryOutcomeAtTheEdge(t *testing.T) {
	_, s, q := newQueueTest(t)
	withDelivery(t, s)
	useACL(t, s, "rules:\n  - name: worker\n    identities: [alice]\n    ops: [work]\n    prefixes: [\"\"]\n")
	member := auth.WithCaller(context.Background(), auth.Caller{Identity: "n2", Member: true})
	if _, err := q.Submit(member, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{
		{Queue: "hooks", Kind: "a", Target: &coordv1.HttpTarget{Url: "http://127.0.0.1/a"}},
		{Queue: "hooks", Kind: "b", Target: &coordv1.HttpTarget{Url: "http://127.0.0.1/b"}}}}); err != nil {
		t.Fatal(err)
	}
	if f, err := q.Fetch(member, &coordv1.QueueFetchRequest{Targeted: true, Max: 2, WorkerId: "n2"}); err != nil || len(f.GetJobs()) != 2 {
		t.Fatalf("fetch: %v %v", f, err)
	}
	complete := func(ctx context.Context, c *coordv1.JobCompletion) error {
		_, err := q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "n2", Completions: []*coordv1.JobCompletion{c}})
		return err
	}
	if err := complete(caller("alice"), &coordv1.JobCompletion{JobId: 1, Attempt: 1, DeliveryStatus: 200}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice reporting a delivery status: %v, want PERMISSION_DENIED", err)
	}
	invalid(t, complete(member, &coordv1.JobCompletion{JobId: 1, Attempt: 1, DeliveryStatus: 600}), "delivery_status", 0)
	invalid(t, complete(member, &coordv1.JobCompletion{JobId: 1, Attempt: 1, DeliveryStatus: 200, DeliveryLatency: durationpb.New(-time.Second)}),
		"delivery_latency", 0)
	if err := complete(member, &coordv1.JobCompletion{JobId: 1, Attempt: 1, DeliveryStatus: 201, DeliveryLatency: durationpb.New(12 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	_, err := q.Fail(member, &coordv1.QueueFailRequest{WorkerId: "n2", Failures: []*coordv1.JobFailure{
		{JobId: 2, Attempt: 1, Error: "HTTP 400", DeliveryStatus: 400, DeliveryLatency: durationpb.New(48 * time.Hour)}}})
	invalid(t, err, "delivery_latency", 0)
	if _, err := q.Fail(member, &coordv1.QueueFailRequest{WorkerId: "n2", Failures: []*coordv1.JobFailure{
		{JobId: 2, Attempt: 1, Error: "HTTP 400", DeliveryStatus: 400, DeliveryLatency: durationpb.New(3 * time.Millisecond)}}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[uint64][2]any{1: {uint32(201), 12 * time.Millisecond}, 2: {uint32(400), 3 * time.Millisecond}} {
		g, err := q.Get(member, &coordv1.QueueGetRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		a := g.GetJob().GetAttemptLog()[0]
		if a.GetDeliveryStatus() != want[0] || a.GetDeliveryLatency().AsDuration() != want[1] {
			t.Errorf("job %d's attempt: status %d, latency %v; want %v", id, a.GetDeliveryStatus(), a.GetDeliveryLatency().AsDuration(), want)
		}
	}
}

// TestConsoleShowsDeliveryResults: a delivered job's attempts show each
// request's HTTP status and latency (none for a request without a
// response).
func TestConsoleShowsDeliveryResults(t *testing.T) {
	ct := newConsoleTest(t, false)
	withDelivery(t, ct.s)
	id := ct.submit(&coordv1.NewJob{Queue: "billing", Kind: "charge", MaxAttempts: 3, BackoffInitial: durationpb.New(time.Millisecond),
		Target: &coordv1.HttpTarget{Url: "https://hooks.example.com/charge"}})[0]
	member := auth.WithCaller(context.Background(), auth.Caller{Identity: "n1", Member: true})
	fetch := func() {
		t.Helper()
		ct.n.calendar += 1000 // past the backoff
		if r, err := ct.q.Fetch(member, &coordv1.QueueFetchRequest{Targeted: true, Max: 1, WorkerId: "n1"}); err != nil || len(r.GetJobs()) != 1 {
			t.Fatalf("fetch: %v %v", r, err)
		}
	}
	fetch()
	if _, err := ct.q.Fail(member, &coordv1.QueueFailRequest{WorkerId: "n1", Failures: []*coordv1.JobFailure{{JobId: id, Attempt: 1,
		Error: "HTTP 503 after 1.5s", Retryable: true, DeliveryStatus: 503, DeliveryLatency: durationpb.New(1500 * time.Millisecond)}}}); err != nil {
		t.Fatal(err)
	}
	fetch()
	if _, err := ct.q.Fail(member, &coordv1.QueueFailRequest{WorkerId: "n1", Failures: []*coordv1.JobFailure{{JobId: id, Attempt: 2,
		Error: "delivery: connection refused", Retryable: true, DeliveryLatency: durationpb.New(3 * time.Millisecond)}}}); err != nil {
		t.Fatal(err)
	}
	fetch()
	if _, err := ct.q.Complete(member, &coordv1.QueueCompleteRequest{WorkerId: "n1", Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: 3,
		DeliveryStatus: 201, DeliveryLatency: durationpb.New(12 * time.Millisecond)}}}); err != nil {
		t.Fatal(err)
	}
	page := ct.get("", fmt.Sprintf("/ui/jobs/%d", id), http.StatusOK)
	for _, want := range []string{"<th>delivery</th>", "HTTP 503 in 1.5s", "no response after 3ms", "HTTP 201 in 12ms"} {
		if !strings.Contains(page, want) {
			t.Errorf("the job page lacks %q", want)
		}
	}
}

// TestConsoleShowsQueueTargets: the queues page lists the queues' targets
// (never a header's value); without any it has no such section.
func TestConsoleShowsQueueTargets(t *testing.T) {
	ct := newConsoleTest(t, false)
	withDelivery(t, ct.s)
	if page := ct.get("", "/ui/queues", http.StatusOK); strings.Contains(page, "Delivery targets") {
		t.Error("the queues page shows a targets section without targets")
	}
	if _, err := ct.q.SetTarget(caller("ops"), &coordv1.QueueSetTargetRequest{Queue: "hooks", Target: &coordv1.HttpTarget{
		Url: "https://hooks.example.com/run", Secret: "app", Headers: map[string]string{"Authorization": "Bearer s3cr3t"}}}); err != nil {
		t.Fatal(err)
	}
	page := ct.get("", "/ui/queues", http.StatusOK)
	for _, want := range []string{"Delivery targets", `<a href="/ui/jobs?queue=hooks">hooks</a>`, "POST https://hooks.example.com/run",
		"secret <code>app</code>", "<code>Authorization</code>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the queues page lacks %q", want)
		}
	}
	if strings.Contains(page, "s3cr3t") {
		t.Error("the queues page shows a header's value")
	}
}
