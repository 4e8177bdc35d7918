package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func newQueueTest(t *testing.T) (*fakeNode, *Server, *queue) {
	t.Helper()
	n := newFakeNode()
	s := newTestServer(t, n)
	return n, s, &queue{s: s}
}

// useACL turns identities on (no files are read) with the ACL text.
func useACL(t *testing.T, s *Server, text string) {
	t.Helper()
	s.tls = &tlsutil.Reloader{}
	acl, err := auth.ParseACL([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	s.acl.Store(acl)
}

func caller(id string) context.Context {
	return auth.WithCaller(context.Background(), auth.Caller{Identity: id})
}

// invalid asserts err is INVALID_ARGUMENT naming field (and index, >= 0).
func invalid(t *testing.T, err error, field string, index int) {
	t.Helper()
	md := coorderr.Metadata(err)
	if status.Code(err) != codes.InvalidArgument || coorderr.WireReason(err) != "INVALID_ARGUMENT" || md["field"] != field {
		t.Fatalf("want INVALID_ARGUMENT on %q, got %v %v", field, err, md)
	}
	if index >= 0 && md["index"] != fmt.Sprint(index) {
		t.Fatalf("want index %d, got %v (%v)", index, md["index"], err)
	}
}

// refused asserts err is code with reason.
func refused(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || coorderr.WireReason(err) != reason {
		t.Fatalf("want %s %s, got %v", code, reason, err)
	}
}

// Bad input refuses the whole Submit, naming the field and the job's
// index; nothing reaches the node.
func TestSubmitValidation(t *testing.T) {
	n, _, q := newQueueTest(t)
	ok := func() *coordv1.NewJob { return &coordv1.NewJob{Kind: "k"} }
	with := func(f func(*coordv1.NewJob)) *coordv1.QueueSubmitRequest {
		bad := ok()
		f(bad)
		return &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{ok(), ok(), bad}}
	}
	for field, req := range map[string]*coordv1.QueueSubmitRequest{
		"args":               with(func(j *coordv1.NewJob) { j.Args = make([]byte, 64<<10+1) }),
		"kind":               with(func(j *coordv1.NewJob) { j.Kind = "" }),
		"run_at":             with(func(j *coordv1.NewJob) { j.RunAt = pbtime.At(n.calendar + 367*24*3600*1000) }),
		"delay":              with(func(j *coordv1.NewJob) { j.Delay = pbtime.Dur(-1) }),
		"visibility_timeout": with(func(j *coordv1.NewJob) { j.VisibilityTimeout = pbtime.Dur(-5) }),
		"backoff_initial":    with(func(j *coordv1.NewJob) { j.BackoffInitial = pbtime.Dur(-1) }),
		"backoff_max":        with(func(j *coordv1.NewJob) { j.BackoffMax = pbtime.Dur(-1) }),
		"backoff_factor":     with(func(j *coordv1.NewJob) { j.BackoffFactor = 0.5 }),
		"max_attempts":       with(func(j *coordv1.NewJob) { j.MaxAttempts = 101 }),
		"priority":           with(func(j *coordv1.NewJob) { j.Priority = 101 }),
		"queue":              with(func(j *coordv1.NewJob) { j.Queue = "a\nb" }),
		"labels":             with(func(j *coordv1.NewJob) { j.Labels = map[string]string{"": "x"} }),
	} {
		t.Run(field, func(t *testing.T) {
			_, err := q.Submit(context.Background(), req)
			invalid(t, err, field, 2)
		})
	}
	_, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", RunAt: pbtime.At(n.calendar + 5000), Delay: pbtime.Dur(5)}}})
	invalid(t, err, "delay", 0)
	big := &coordv1.QueueSubmitRequest{}
	for range 1001 {
		big.Jobs = append(big.Jobs, ok())
	}
	_, err = q.Submit(context.Background(), big)
	invalid(t, err, "jobs", -1)
	_, err = q.Submit(context.Background(), &coordv1.QueueSubmitRequest{})
	invalid(t, err, "jobs", -1)
	if c := n.fsm.QueueJobCount(); c != 0 {
		t.Fatalf("%d jobs after refused submits", c)
	}
	// A year ahead is fine; so is a batch of 1,000.
	if _, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", RunAt: pbtime.At(n.calendar + 365*24*3600*1000)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: big.Jobs[:1000]}); err != nil {
		t.Fatal(err)
	}
}

// No answer that depends on a node's own, possibly stale calendar calls
// valid input invalid: a follower that has just restarted (its calendar is
// the FSM's last stamp, 0 before it applied an entry) forwards a delayed
// job, near or far, and a schedule; the time limit is the leader's
// (judged by the FSM at the leader's calendar stamp).
func TestStaleCalendarRefusesNoValidInput(t *testing.T) {
	now := time.Now().UnixMilli()
	const day = 24 * 3600 * 1000
	for _, cal := range []int64{0, now - 200*day} {
		n, s, q := newQueueTest(t)
		n.leading, n.leaderID, n.leaderAddr, n.calendar = false, "n2", "leader:7400", cal
		conn := &recordingConn{reply: &coordv1.QueueSubmitResponse{}}
		s.dial = func(string) (grpc.ClientConnInterface, error) { return conn, nil }
		for _, runAt := range []int64{now + 5000, now + 300*day} {
			conn.method = ""
			_, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", RunAt: pbtime.At(runAt)}}})
			if err != nil || conn.method != coordv1.Queue_Submit_FullMethodName {
				t.Fatalf("calendar %d: run_at %d: %v (forwarded %q)", cal, runAt, err, conn.method)
			}
		}
		conn.method, conn.reply = "", &coordv1.PutScheduleResponse{}
		h := &schedules{s: s}
		if _, err := h.PutSchedule(context.Background(), &coordv1.PutScheduleRequest{Spec: everyMinute("s")}); err != nil ||
			conn.method != coordv1.Schedules_PutSchedule_FullMethodName {
			t.Fatalf("calendar %d: put schedule: %v (forwarded %q)", cal, err, conn.method)
		}
	}
	// The leader judges the limit at its calendar stamp, in days.
	n, _, q := newQueueTest(t)
	_, err := q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k"}, {Kind: "k", RunAt: pbtime.At(n.calendar + 400*day)}}})
	invalid(t, err, "run_at", 1)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "400 days ahead; the limit is 366 days") {
		t.Fatalf("message %q", msg)
	}
	_, err = q.Submit(context.Background(), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", Delay: pbtime.Dur(400 * day)}}})
	invalid(t, err, "delay", 0)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "delay is 400 days; the limit is 366 days") {
		t.Fatalf("message %q", msg)
	}
}

// A submit fills the defaults, resolves delay_ms on the calendar, records
// the submitter, and a unique key returns the first job.
func TestSubmitAndGet(t *testing.T) {
	n, _, q := newQueueTest(t)
	ctx := caller("billing")
	resp, err := q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{
		{Kind: "send", Args: []byte(`{"to":"a"}`), Labels: map[string]string{"tenant": "t1", "a": "b"}},
		{Queue: "mail", Kind: "send", Delay: pbtime.Dur(5000), UniqueKey: "u1", BackoffFactor: 1.5},
		{Queue: "mail", Kind: "send", UniqueKey: "u1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	js := resp.GetJobs()
	if len(js) != 3 || js[0].GetState() != coordv1.JobState_JOB_STATE_AVAILABLE || js[0].GetRunAtMs() != n.calendar {
		t.Fatalf("%v", js)
	}
	if js[1].GetState() != coordv1.JobState_JOB_STATE_SCHEDULED || js[1].GetRunAtMs() != n.calendar+5000 {
		t.Fatalf("delayed %v", js[1])
	}
	if !js[2].GetDuplicate() || js[2].GetId() != js[1].GetId() {
		t.Fatalf("unique key: %v", js[2])
	}
	g, err := q.Get(ctx, &coordv1.QueueGetRequest{Id: js[0].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	j := g.GetJob()
	if j.GetQueue() != "default" || j.GetMaxAttempts() != 25 || j.GetVisibilityTimeoutMs() != 30_000 || j.GetBackoffInitialMs() != 1000 ||
		j.GetBackoffMaxMs() != 3_600_000 || j.GetBackoffFactor() != 2 || j.GetSubmittedBy() != "billing" ||
		string(j.GetArgs()) != `{"to":"a"}` || j.GetLabels()["tenant"] != "t1" || g.GetCalendarTimeMs() != n.calendar {
		t.Fatalf("%v", g)
	}
	if g2, _ := q.Get(ctx, &coordv1.QueueGetRequest{Id: js[1].GetId()}); g2.GetJob().GetBackoffFactor() != 1.5 {
		t.Fatalf("factor %v", g2.GetJob().GetBackoffFactor())
	}
	_, err = q.Get(ctx, &coordv1.QueueGetRequest{Id: 99})
	refused(t, err, codes.NotFound, "JOB_NOT_FOUND")
	if coorderr.Metadata(err)["job_id"] != "99" {
		t.Fatalf("%v", coorderr.Metadata(err))
	}
	_, err = q.Get(ctx, &coordv1.QueueGetRequest{})
	invalid(t, err, "id", -1)
}

// List pages newest first with filters.
func TestList(t *testing.T) {
	_, _, q := newQueueTest(t)
	ctx := context.Background()
	for i := range 5 {
		qn := "a"
		if i%2 == 1 {
			qn = "b"
		}
		if _, err := q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: qn, Kind: fmt.Sprint("k", i%3),
			Labels: map[string]string{"n": fmt.Sprint(i)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []uint64
	tok := ""
	for {
		page, err := q.List(ctx, &coordv1.QueueListRequest{PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.GetJobs() {
			if j.GetArgs() != nil || j.GetAttemptLog() != nil {
				t.Fatal("listed jobs carry args or attempts")
			}
			ids = append(ids, j.GetId())
		}
		if tok = page.GetNextPageToken(); tok == "" {
			break
		}
	}
	if fmt.Sprint(ids) != "[5 4 3 2 1]" {
		t.Fatalf("ids %v", ids)
	}
	for req, want := range map[*coordv1.QueueListRequest]string{
		{Queue: "a"}: "[5 3 1]",
		{Queue: "b", State: coordv1.JobState_JOB_STATE_AVAILABLE}: "[4 2]",
		{Kind: "k0"}:   "[4 1]",
		{Label: "n=2"}: "[3]",
		{State: coordv1.JobState_JOB_STATE_SUCCEEDED}: "[]",
	} {
		page, err := q.List(ctx, req)
		var got []uint64
		for _, j := range page.GetJobs() {
			got = append(got, j.GetId())
		}
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%v: %v %v, want %s", req, got, err, want)
		}
	}
	for field, req := range map[string]*coordv1.QueueListRequest{
		"label": {Label: "nolabel"}, "state": {State: 42}, "page_token": {PageToken: "!!"}, "page_size": {PageSize: 1001},
	} {
		_, err := q.List(ctx, req)
		invalid(t, err, field, -1)
	}
}

func submitOne(t *testing.T, q *queue, ctx context.Context, j *coordv1.NewJob) uint64 {
	t.Helper()
	r, err := q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{j}})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetJobs()[0].GetId()
}

func fetchOne(t *testing.T, q *queue, ctx context.Context, worker string, queues ...string) *coordv1.ClaimedJob {
	t.Helper()
	r, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: queues, Max: 1, WorkerId: worker})
	if err != nil || len(r.GetJobs()) != 1 {
		t.Fatalf("fetch: %v %v", r, err)
	}
	return r.GetJobs()[0]
}

// A worker's round trip: fetch, heartbeat, complete; repeats and stale
// attempts are item results, not call errors.
func TestFetchHeartbeatComplete(t *testing.T) {
	n, _, q := newQueueTest(t)
	ctx := caller("worker")
	id := submitOne(t, q, ctx, &coordv1.NewJob{Queue: "q", Kind: "k", Args: []byte(`"x"`), VisibilityTimeout: pbtime.Dur(10_000)})
	r, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"q"}, Max: 10, Wait: pbtime.Dur(2500), WorkerId: "w1"})
	if err != nil || len(r.GetJobs()) != 1 {
		t.Fatalf("%v %v", r, err)
	}
	if n.fetchWait != 2500*time.Millisecond {
		t.Fatalf("the node got wait %s", n.fetchWait)
	}
	c := r.GetJobs()[0]
	a := c.GetAttempt()
	if c.GetJob().GetId() != id || string(c.GetJob().GetArgs()) != `"x"` || c.GetJob().GetAttemptLog() != nil ||
		a.GetNumber() != 1 || a.GetToken() != fmt.Sprintf("job:%d:1", id) || a.GetDeadlineMs() != n.calendar+10_000 ||
		a.GetIdentity() != "worker" || a.GetWorkerId() != "w1" {
		t.Fatalf("claimed %v", c)
	}
	n.calendar += 1000
	hb, err := q.Heartbeat(ctx, &coordv1.QueueHeartbeatRequest{WorkerId: "w1", Attempts: []*coordv1.JobAttemptRef{{JobId: id, Attempt: 1}, {JobId: id, Attempt: 2}}})
	if err != nil || hb.GetResults()[0].GetDeadlineMs() != n.calendar+10_000 || hb.GetResults()[0].GetError() != nil ||
		hb.GetResults()[1].GetError().GetReason() != "ATTEMPT_LOST" {
		t.Fatalf("%v %v", hb, err)
	}
	done, err := q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w1", Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: 1, Result: []byte(`"ok"`)}}})
	if err != nil || done.GetResults()[0].GetError() != nil || done.GetResults()[0].GetDuplicate() {
		t.Fatalf("%v %v", done, err)
	}
	again, err := q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w1", Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: 1}}})
	if err != nil || !again.GetResults()[0].GetDuplicate() {
		t.Fatalf("repeat: %v %v", again, err)
	}
	other, err := q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w2", Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: 1}}})
	if err != nil || other.GetResults()[0].GetError().GetReason() != "ATTEMPT_LOST" {
		t.Fatalf("another worker: %v %v", other, err)
	}
	g, _ := q.Get(ctx, &coordv1.QueueGetRequest{Id: id})
	if g.GetJob().GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED || string(g.GetJob().GetAttemptLog()[0].GetResult()) != `"ok"` {
		t.Fatalf("%v", g)
	}
	// Another identity is refused per item.
	hb, err = q.Heartbeat(caller("thief"), &coordv1.QueueHeartbeatRequest{WorkerId: "w1", Attempts: []*coordv1.JobAttemptRef{{JobId: id, Attempt: 1}}})
	if err != nil || hb.GetResults()[0].GetError() == nil {
		t.Fatalf("%v %v", hb, err)
	}
}

// Malformed worker calls are refused whole.
func TestWorkerCallValidation(t *testing.T) {
	_, _, q := newQueueTest(t)
	ctx := context.Background()
	for field, req := range map[string]*coordv1.QueueFetchRequest{
		"queues":    {Max: 1, WorkerId: "w"},
		"max":       {Queues: []string{"q"}, WorkerId: "w"},
		"wait":      {Queues: []string{"q"}, Max: 1, Wait: pbtime.Dur(30_001), WorkerId: "w"},
		"worker_id": {Queues: []string{"q"}, Max: 1},
	} {
		_, err := q.Fetch(ctx, req)
		invalid(t, err, field, -1)
	}
	_, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"q", ""}, Max: 1, WorkerId: "w"})
	invalid(t, err, "queues", 1)
	_, err = q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"q"}, Max: 1, Wait: pbtime.Dur(-1), WorkerId: "w"})
	invalid(t, err, "wait", -1)
	_, err = q.Heartbeat(ctx, &coordv1.QueueHeartbeatRequest{WorkerId: "w"})
	invalid(t, err, "attempts", -1)
	_, err = q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w", Completions: []*coordv1.JobCompletion{{JobId: 1, Attempt: 1}, {JobId: 1}}})
	invalid(t, err, "attempt", 1)
	_, err = q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w", Completions: []*coordv1.JobCompletion{{JobId: 1, Attempt: 1, Result: make([]byte, 64<<10+1)}}})
	invalid(t, err, "result", 0)
	_, err = q.Fail(ctx, &coordv1.QueueFailRequest{Failures: []*coordv1.JobFailure{{JobId: 1, Attempt: 1}}})
	invalid(t, err, "worker_id", -1)
}

// Fail with retries to dead; cancel of a running job; retry of a dead one.
func TestFailCancelRetry(t *testing.T) {
	n, _, q := newQueueTest(t)
	ctx := context.Background()
	id := submitOne(t, q, ctx, &coordv1.NewJob{Queue: "q", Kind: "k", MaxAttempts: 2, BackoffInitial: pbtime.Dur(100), BackoffMax: pbtime.Dur(1000)})
	fetchOne(t, q, ctx, "w", "q")
	f, err := q.Fail(ctx, &coordv1.QueueFailRequest{WorkerId: "w", Failures: []*coordv1.JobFailure{{JobId: id, Attempt: 1, Error: "boom", Retryable: true}}})
	if err != nil || f.GetResults()[0].GetState() != coordv1.JobState_JOB_STATE_RETRYABLE || f.GetResults()[0].GetRunAtMs() != n.calendar+100 {
		t.Fatalf("%v %v", f, err)
	}
	n.calendar += 100
	c := fetchOne(t, q, ctx, "w", "q")
	if c.GetAttempt().GetNumber() != 2 {
		t.Fatalf("%v", c)
	}
	f, err = q.Fail(ctx, &coordv1.QueueFailRequest{WorkerId: "w", Failures: []*coordv1.JobFailure{{JobId: id, Attempt: 2, Error: "boom", Retryable: true}}})
	if err != nil || f.GetResults()[0].GetState() != coordv1.JobState_JOB_STATE_DEAD {
		t.Fatalf("%v %v", f, err)
	}
	_, err = q.Cancel(ctx, &coordv1.QueueCancelRequest{Id: id})
	refused(t, err, codes.FailedPrecondition, "JOB_FINISHED")
	r, err := q.Retry(ctx, &coordv1.QueueRetryRequest{Id: id})
	if err != nil || r.GetJob().GetState() != coordv1.JobState_JOB_STATE_AVAILABLE || r.GetJob().GetMaxAttempts() != 3 {
		t.Fatalf("%v %v", r, err)
	}
	c = fetchOne(t, q, ctx, "w", "q")
	cr, err := q.Cancel(ctx, &coordv1.QueueCancelRequest{Id: id})
	if err != nil || cr.GetJob().GetState() != coordv1.JobState_JOB_STATE_CANCELLED || cr.GetDuplicate() {
		t.Fatalf("%v %v", cr, err)
	}
	done, err := q.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w", Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: c.GetAttempt().GetNumber()}}})
	if err != nil || done.GetResults()[0].GetError().GetReason() != "JOB_CANCELLED" {
		t.Fatalf("%v %v", done, err)
	}
	if cr, err = q.Cancel(ctx, &coordv1.QueueCancelRequest{Id: id}); err != nil || !cr.GetDuplicate() {
		t.Fatalf("%v %v", cr, err)
	}
	_, err = q.Retry(ctx, &coordv1.QueueRetryRequest{Id: 77})
	refused(t, err, codes.FailedPrecondition, "JOB_NOT_FOUND")
	_, err = q.Cancel(ctx, &coordv1.QueueCancelRequest{})
	invalid(t, err, "id", -1)
}

// A job attempt's token fences writes: "job:<id>:<attempt>" maps to the
// job; lease names of that form cannot be acquired.
func TestJobTokensInFencedCommit(t *testing.T) {
	n, s, q := newQueueTest(t)
	c := &coordinator{s: s}
	ctx := context.Background()
	id := submitOne(t, q, ctx, &coordv1.NewJob{Queue: "q", Kind: "k", VisibilityTimeout: pbtime.Dur(1000)})
	cl := fetchOne(t, q, ctx, "w", "q")
	tok := cl.GetAttempt().GetToken()
	r, err := c.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "orders/1", Token: tok, Payload: []byte("p")})
	if err != nil || !r.GetAccepted() || r.GetLeaseName() != fsm.JobTokenName(id) || r.GetGeneration() != 1 {
		t.Fatalf("%v %v", r, err)
	}
	if dry, err := c.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "orders/1", LeaseName: fsm.JobTokenName(id), Generation: 1, DryRun: true}); err != nil || !dry.GetAccepted() {
		t.Fatalf("dry run %v %v", dry, err)
	}
	// The claim lapses; the next attempt is handed out; the old token is refused.
	n.calendar += 1000
	cl2 := fetchOne(t, q, ctx, "w2", "q")
	if cl2.GetAttempt().GetNumber() != 2 {
		t.Fatalf("%v", cl2)
	}
	_, err = c.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "orders/1", Token: tok})
	refused(t, err, codes.FailedPrecondition, "STALE_TOKEN")
	if r, err := c.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "orders/1", Token: cl2.GetAttempt().GetToken()}); err != nil || !r.GetAccepted() {
		t.Fatalf("%v %v", r, err)
	}
	for _, name := range []string{"job:1", fsm.JobTokenName(id)} {
		_, err := c.Acquire(ctx, &coordv1.AcquireRequest{Name: name, Owner: "o", Ttl: pbtime.Dur(5000)})
		invalid(t, err, "name", -1)
	}
	for _, name := range []string{"job:", "job:01", "job:x", "jobs:1"} {
		if _, err := c.Acquire(ctx, &coordv1.AcquireRequest{Name: name, Owner: "o", Ttl: pbtime.Dur(5000)}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The ACL: job on the queues a Submit adds to, work on the queues a Fetch
// takes from, read on a job's queue (Get) or the queue listed.
func TestQueueACL(t *testing.T) {
	_, s, q := newQueueTest(t)
	useACL(t, s, `
rules:
  - name: producer
    identities: [api]
    ops: [job, read]
    prefixes: [billing/]
  - name: worker
    identities: [wrk]
    ops: [work]
    prefixes: [billing/]
  - name: operators
    identities: [ops]
    ops: [admin]
`)
	check := func(id, method string, req any) error {
		return s.authorizeMethod(auth.Caller{Identity: id}, method, req)
	}
	submit := func(queues ...string) *coordv1.QueueSubmitRequest {
		r := &coordv1.QueueSubmitRequest{}
		for _, qn := range queues {
			r.Jobs = append(r.Jobs, &coordv1.NewJob{Queue: qn, Kind: "k"})
		}
		return r
	}
	fetch := &coordv1.QueueFetchRequest{Queues: []string{"billing/a"}, Max: 1, WorkerId: "w"}
	for _, tc := range []struct {
		id, method string
		req        any
		ok         bool
	}{
		{"api", coordv1.Queue_Submit_FullMethodName, submit("billing/a", "billing/b"), true},
		{"api", coordv1.Queue_Submit_FullMethodName, submit("billing/a", "payroll"), false},
		{"api", coordv1.Queue_Submit_FullMethodName, submit(""), false}, // the default queue
		{"wrk", coordv1.Queue_Submit_FullMethodName, submit("billing/a"), false},
		{"wrk", coordv1.Queue_Fetch_FullMethodName, fetch, true},
		{"api", coordv1.Queue_Fetch_FullMethodName, fetch, false},
		{"wrk", coordv1.Queue_Fetch_FullMethodName, &coordv1.QueueFetchRequest{Queues: []string{"billing/a", "x"}}, false},
		{"wrk", coordv1.Queue_Complete_FullMethodName, &coordv1.QueueCompleteRequest{}, true}, // bound to the fetcher
		{"api", coordv1.Queue_List_FullMethodName, &coordv1.QueueListRequest{Queue: "billing/a"}, true},
		{"api", coordv1.Queue_List_FullMethodName, &coordv1.QueueListRequest{}, false}, // everything
		{"api", coordv1.Queue_Stats_FullMethodName, &coordv1.QueueStatsRequest{Queue: "billing/x"}, true},
		{"wrk", coordv1.Queue_Stats_FullMethodName, &coordv1.QueueStatsRequest{Queue: "billing/x"}, false},
	} {
		err := check(tc.id, tc.method, tc.req)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s %v: %v", tc.id, tc.method, tc.req, err)
		}
	}
	// Get, Cancel and Retry are checked where the job's queue is known.
	member := auth.WithCaller(context.Background(), auth.Caller{Identity: "n1", Member: true})
	paid := submitOne(t, q, member, &coordv1.NewJob{Queue: "payroll", Kind: "k"})
	mine := submitOne(t, q, member, &coordv1.NewJob{Queue: "billing/a", Kind: "k"})
	api := caller("api")
	_, err := q.Get(api, &coordv1.QueueGetRequest{Id: paid})
	refused(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	// A job asked for by id: the refusal does not say whose queue it is in.
	quiet := func(err error) {
		t.Helper()
		if msg := status.Convert(err).Message(); strings.Contains(msg, "payroll") || coorderr.Metadata(err)["name"] != "" {
			t.Fatalf("the refusal names the job's queue: %s %v", msg, coorderr.Metadata(err))
		}
	}
	quiet(err)
	if _, err := q.Get(api, &coordv1.QueueGetRequest{Id: mine}); err != nil {
		t.Fatal(err)
	}
	_, err = q.Cancel(api, &coordv1.QueueCancelRequest{Id: paid})
	refused(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	quiet(err)
	if _, err := q.Cancel(api, &coordv1.QueueCancelRequest{Id: mine}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Retry(caller("wrk"), &coordv1.QueueRetryRequest{Id: mine}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("%v", err)
	}
	// An admin manages jobs of every queue (cancel, retry), but may not
	// submit or read them through that rule.
	if _, err := q.Retry(caller("ops"), &coordv1.QueueRetryRequest{Id: mine}); err != nil {
		t.Fatalf("admin retry: %v", err)
	}
	if _, err := q.Cancel(caller("ops"), &coordv1.QueueCancelRequest{Id: paid}); err != nil {
		t.Fatalf("admin cancel: %v", err)
	}
	if err := check("ops", coordv1.Queue_Submit_FullMethodName, submit("payroll")); err == nil {
		t.Fatal("admin submitted")
	}
}

// A follower forwards queue calls to the leader.
func TestQueueForwarding(t *testing.T) {
	n, s, q := newQueueTest(t)
	n.leading, n.leaderID, n.leaderAddr = false, "n2", "leader:7400"
	conn := &recordingConn{reply: &coordv1.QueueFetchResponse{}}
	s.dial = func(addr string) (grpc.ClientConnInterface, error) { return conn, nil }
	if _, err := q.Fetch(context.Background(), &coordv1.QueueFetchRequest{Queues: []string{"q"}, Max: 1, WorkerId: "w", Wait: pbtime.Dur(100)}); err != nil {
		t.Fatal(err)
	}
	if conn.method != coordv1.Queue_Fetch_FullMethodName {
		t.Fatalf("forwarded %s", conn.method)
	}
	// A stale read stays here.
	if _, err := q.Stats(context.Background(), &coordv1.QueueStatsRequest{Stale: true}); err != nil {
		t.Fatal(err)
	}
}

// Per-queue metrics: counts per state, counters, start lag.
func TestQueueMetrics(t *testing.T) {
	n, s, q := newQueueTest(t)
	ctx := context.Background()
	submitOne(t, q, ctx, &coordv1.NewJob{Queue: "q", Kind: "k", RunAt: pbtime.At(n.calendar - 1500)})
	submitOne(t, q, ctx, &coordv1.NewJob{Queue: "q", Kind: "k", RunAt: pbtime.At(n.calendar + 60_000)})
	fetchOne(t, q, ctx, "w", "q")
	want := `
# HELP coordd_queue_jobs Queued jobs by queue and state, in this node's replica.
# TYPE coordd_queue_jobs gauge
coordd_queue_jobs{queue="q",state="available"} 0
coordd_queue_jobs{queue="q",state="cancelled"} 0
coordd_queue_jobs{queue="q",state="dead"} 0
coordd_queue_jobs{queue="q",state="retryable"} 0
coordd_queue_jobs{queue="q",state="running"} 1
coordd_queue_jobs{queue="q",state="scheduled"} 1
coordd_queue_jobs{queue="q",state="succeeded"} 0
# HELP coordd_queue_attempts_total Attempts handed out, by queue.
# TYPE coordd_queue_attempts_total counter
coordd_queue_attempts_total{queue="q"} 1
`
	if err := testutil.GatherAndCompare(s.cfg.Metrics, strings.NewReader(want), "coordd_queue_jobs", "coordd_queue_attempts_total"); err != nil {
		t.Fatal(err)
	}
	if c := testutil.CollectAndCount(s.queueMetrics.startLag, "coordd_queue_start_lag_seconds"); c != 1 {
		t.Fatalf("%d start lag series", c)
	}
	mfs, _ := s.cfg.Metrics.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "coordd_queue_start_lag_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() != 1.5 {
				t.Fatalf("start lag %v", h)
			}
		}
	}
	// Cardinality: queues beyond the cap share one series.
	for i := range MaxQueueSeries + 5 {
		submitOne(t, q, ctx, &coordv1.NewJob{Queue: fmt.Sprintf("many-%03d", i), Kind: "k"})
	}
	if c := testutil.CollectAndCount(&queueCollector{s: s}, "coordd_queue_oldest_available_age_seconds"); c != MaxQueueSeries+1 {
		t.Fatalf("%d oldest-age series for %d queues", c, MaxQueueSeries+6)
	}
}

// The gateway serves Submit, Get, List, Cancel, Retry and Stats as JSON;
// Fetch is not on HTTP.
func TestQueueHTTP(t *testing.T) {
	n, s, _ := newQueueTest(t)
	calNow := n.calendar
	h := s.httpAPI()
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, b)
		}
		return rec.Code, out
	}
	// Args are a JSON value, durations "1m", times RFC 3339, enums short.
	code, out := do("POST", "/v1/queue/jobs", `{"jobs":[{"queue":"mail","kind":"send","args":{"to": "a", "n": 12345678901234567890},"delay":"1m"}]}`)
	if code != http.StatusOK {
		t.Fatalf("%d %v", code, out)
	}
	id := out["jobs"].([]any)[0].(map[string]any)["id"].(string)
	code, out = do("GET", "/v1/queue/jobs/"+id, "")
	job, _ := out["job"].(map[string]any)
	if code != 200 || job["state"] != "SCHEDULED" || job["visibility_timeout"] != "30s" {
		t.Fatalf("%d %v", code, out)
	}
	if args, _ := json.Marshal(job["args"]); string(args) != `{"n":12345678901234567890,"to":"a"}` && string(args) != `{"n":12345678901234567000,"to":"a"}` {
		t.Fatalf("args %s", args)
	}
	if runAt, err := time.Parse(time.RFC3339Nano, job["run_at"].(string)); err != nil || runAt.UnixMilli() != calNow+60_000 {
		t.Fatalf("run_at %v (%v), want %d", job["run_at"], err, calNow+60_000)
	}
	for _, state := range []string{"scheduled", "SCHEDULED", "JOB_STATE_SCHEDULED"} {
		if code, out = do("GET", "/v1/queue/jobs?queue=mail&state="+state, ""); code != 200 || len(out["jobs"].([]any)) != 1 {
			t.Fatalf("state=%s: %d %v", state, code, out)
		}
	}
	if code, out = do("GET", "/v1/queue/stats?queue=mail", ""); code != 200 || out["queues"].([]any)[0].(map[string]any)["scheduled"] != "1" {
		t.Fatalf("%d %v", code, out)
	}
	for body, field := range map[string]string{
		`{"jobs":[{"kind":"k","delay":"soon"}]}`:   "delay",
		`{"jobs":[{"kind":"k","run_at":"today"}]}`: "run_at",
		`{"jobs":[{"kind":"k","args":{"a":}}]}`:    "",
	} {
		if code, out = do("POST", "/v1/queue/jobs", body); code != 400 || out["code"] != "INVALID_ARGUMENT" || !strings.Contains(out["message"].(string), field) {
			t.Fatalf("%s: %d %v", body, code, out)
		}
	}
	if code, out = do("POST", "/v1/queue/jobs/"+id+"/retry", `{}`); code != 200 || out["job"].(map[string]any)["state"] != "AVAILABLE" {
		t.Fatalf("%d %v", code, out)
	}
	if code, out = do("POST", "/v1/queue/jobs/"+id+"/cancel", `{}`); code != 200 || out["job"].(map[string]any)["state"] != "CANCELLED" {
		t.Fatalf("%d %v", code, out)
	}
	if code, out = do("GET", "/v1/queue/jobs/999", ""); code != 404 || out["reason"] != "JOB_NOT_FOUND" {
		t.Fatalf("%d %v", code, out)
	}
	if code, out = do("POST", "/v1/queue/jobs", `{"jobs":[{"kind":"ok"},{"kind":""}]}`); code != 400 ||
		out["metadata"].(map[string]any)["field"] != "kind" || out["metadata"].(map[string]any)["index"] != "1" {
		t.Fatalf("%d %v", code, out)
	}
}
