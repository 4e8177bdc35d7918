package integration

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The job queue end to end on real three-node clusters (coord.v1.Queue,
// fsm/DESIGN.md "Jobs queue", node/queue.go).

func queueOf(c *testcluster.Cluster, n *testcluster.Node) coordv1.QueueClient {
	return coordv1.NewQueueClient(c.Conn(n))
}

func submitJobs(t *testing.T, q coordv1.QueueClient, jobs ...*coordv1.NewJob) []*coordv1.SubmittedJob {
	t.Helper()
	r, err := q.Submit(ctxT(t), &coordv1.QueueSubmitRequest{Jobs: jobs})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return r.GetJobs()
}

func getJob(t *testing.T, q coordv1.QueueClient, id uint64) *coordv1.QueueJob {
	t.Helper()
	r, err := q.Get(ctxT(t), &coordv1.QueueGetRequest{Id: id})
	if err != nil {
		t.Fatalf("get %d: %v", id, err)
	}
	return r.GetJob()
}

func fetchJobs(t *testing.T, q coordv1.QueueClient, worker string, max uint32, wait time.Duration, queues ...string) []*coordv1.ClaimedJob {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	r, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: queues, Max: max, Wait: pbtime.Dur(wait.Milliseconds()), WorkerId: worker})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return r.GetJobs()
}

func completeJob(t *testing.T, q coordv1.QueueClient, worker string, id uint64, attempt uint32) *coordv1.CompleteResult {
	t.Helper()
	r, err := q.Complete(ctxT(t), &coordv1.QueueCompleteRequest{WorkerId: worker,
		Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: attempt, Result: []byte(`"done"`)}}})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return r.GetResults()[0]
}

// Submit on a follower, fetch on another node, complete: the job is
// SUCCEEDED with its attempt and result, on every node.
func TestQueueSubmitFetchComplete(t *testing.T) {
	c := testcluster.New(t, 3)
	c.WaitLeader()
	f := c.Followers()
	q1, q2 := queueOf(c, f[0]), queueOf(c, f[1])
	sub := submitJobs(t, q1, &coordv1.NewJob{Queue: "mail", Kind: "send", Args: []byte(`{"to":"a@b"}`), Labels: map[string]string{"tenant": "t1"}})
	id := sub[0].GetId()
	claimed := fetchJobs(t, q2, "w1", 10, time.Second, "mail")
	if len(claimed) != 1 || claimed[0].GetJob().GetId() != id || string(claimed[0].GetJob().GetArgs()) != `{"to":"a@b"}` {
		t.Fatalf("claimed %v", claimed)
	}
	a := claimed[0].GetAttempt()
	if a.GetNumber() != 1 || a.GetToken() != fmt.Sprintf("job:%d:1", id) || a.GetDeadlineMs() != a.GetStartedAtMs()+30_000 {
		t.Fatalf("attempt %v", a)
	}
	if r := completeJob(t, q1, "w1", id, 1); r.GetError() != nil || r.GetDuplicate() {
		t.Fatalf("complete %v", r)
	}
	j := getJob(t, q2, id)
	if j.GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED || len(j.GetAttemptLog()) != 1 ||
		j.GetAttemptLog()[0].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED || string(j.GetAttemptLog()[0].GetResult()) != `"done"` {
		t.Fatalf("%v", j)
	}
	c.WaitConverged()
	for _, n := range c.Running() {
		r, err := queueOf(c, n).Get(ctxT(t), &coordv1.QueueGetRequest{Id: id, Stale: true})
		if err != nil || r.GetJob().GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("%s: %v %v", n.ID, r, err)
		}
	}
	st, err := q1.Stats(ctxT(t), &coordv1.QueueStatsRequest{Queue: "mail"})
	if err != nil || len(st.GetQueues()) != 1 || st.GetQueues()[0].GetSucceeded() != 1 {
		t.Fatalf("stats %v %v", st, err)
	}
	leader := c.WaitLeader()
	if v := metricValue(t, leader, `coordd_queue_jobs{queue="mail",state="succeeded"}`); v != 1 {
		t.Fatalf("coordd_queue_jobs succeeded = %v", v)
	}
}

// Delayed jobs are not handed out before their run_at, and are handed out
// promptly after it (the leader's dispatcher, on the calendar clock).
func TestQueueDelayedJobsNotEarly(t *testing.T) {
	c := testcluster.New(t, 3)
	leader := c.WaitLeader()
	q := queueOf(c, c.Followers()[0])
	delays := []int64{1500, 2500, 3000}
	var jobs []*coordv1.NewJob
	for _, d := range delays {
		jobs = append(jobs, &coordv1.NewJob{Queue: "later", Kind: "k", Delay: pbtime.Dur(d)})
	}
	sub := submitJobs(t, q, jobs...)
	runAt := map[uint64]int64{}
	for _, s := range sub {
		if s.GetState() != coordv1.JobState_JOB_STATE_SCHEDULED {
			t.Fatalf("%v", s)
		}
		runAt[s.GetId()] = s.GetRunAtMs()
	}
	var lags []time.Duration
	for len(runAt) > 0 {
		for _, cl := range fetchJobs(t, q, "w", 10, 10*time.Second, "later") {
			now := time.Now().UnixMilli()
			id, a := cl.GetJob().GetId(), cl.GetAttempt()
			at, ok := runAt[id]
			if !ok {
				t.Fatalf("job %d handed out twice", id)
			}
			delete(runAt, id)
			// Same machine, same wall clock: nothing before its run_at.
			if a.GetStartedAtMs() < at || now < at {
				t.Fatalf("job %d started at %d (received at %d), before its run_at %d", id, a.GetStartedAtMs(), now, at)
			}
			lag := time.Duration(a.GetStartedAtMs()-at) * time.Millisecond
			lags = append(lags, lag)
			if lag > time.Second {
				t.Errorf("job %d handed out %s after its run_at", id, lag)
			}
			completeJob(t, q, "w", id, a.GetNumber())
		}
	}
	t.Logf("start lag (run_at -> hand-out) of delayed jobs: %v", lags)
	_ = leader
}

// A long poll waits on the leader and wakes when a job is submitted, not
// at the end of its wait.
func TestQueueLongPollWakesOnSubmit(t *testing.T) {
	c := testcluster.New(t, 3)
	c.WaitLeader()
	f := c.Followers()
	type got struct {
		jobs []*coordv1.ClaimedJob
		at   time.Time
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := queueOf(c, f[0]).Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"poll"}, Max: 5, Wait: pbtime.Dur(20_000), WorkerId: "w"})
		ch <- got{r.GetJobs(), time.Now(), err}
	}()
	leader := c.WaitLeader()
	c.Eventually("the poll waits on the leader", 10*time.Second, func() bool {
		return metricValue(t, leader, "coordd_fetch_waiters") == 1
	})
	submitted := time.Now()
	sub := submitJobs(t, queueOf(c, f[1]), &coordv1.NewJob{Queue: "poll", Kind: "k"})
	select {
	case g := <-ch:
		if g.err != nil || len(g.jobs) != 1 || g.jobs[0].GetJob().GetId() != sub[0].GetId() {
			t.Fatalf("%v %v", g.jobs, g.err)
		}
		if d := g.at.Sub(submitted); d > 2*time.Second {
			t.Fatalf("woke %s after the submit", d)
		} else {
			t.Logf("long poll woke %s after the submit was sent", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll did not wake on the submit")
	}
	// A poll with nothing to fetch returns empty at its wait.
	start := time.Now()
	if jobs := fetchJobs(t, queueOf(c, f[0]), "w", 1, 500*time.Millisecond, "poll"); len(jobs) != 0 {
		t.Fatalf("%v", jobs)
	}
	if d := time.Since(start); d < 450*time.Millisecond || d > 5*time.Second {
		t.Fatalf("an empty poll of 500 ms took %s", d)
	}
}

// A worker that stops heartbeating loses its claim at the visibility
// deadline: the job is handed to another worker, and the first worker's
// completion and fenced write are refused.
func TestQueueClaimLapse(t *testing.T) {
	c := testcluster.New(t, 3)
	leader := c.WaitLeader()
	q := queueOf(c, leader)
	cc := c.Coord(c.Followers()[0])
	id := submitJobs(t, q, &coordv1.NewJob{Queue: "lapse", Kind: "k", VisibilityTimeout: pbtime.Dur(1000)})[0].GetId()
	first := fetchJobs(t, q, "frozen", 1, 0, "lapse")
	if len(first) != 1 {
		t.Fatal("no job")
	}
	tok1 := first[0].GetAttempt().GetToken()
	deadline := first[0].GetAttempt().GetDeadlineMs()
	// The dispatcher lapses the claim at its deadline, with nothing else proposed.
	var j *coordv1.QueueJob
	c.Eventually("the claim lapsed", 10*time.Second, func() bool {
		j = getJob(t, q, id)
		return j.GetState() == coordv1.JobState_JOB_STATE_AVAILABLE
	})
	if late := time.Now().UnixMilli() - deadline; late > 1500 {
		t.Errorf("lapse seen %d ms after the deadline", late)
	}
	if a := j.GetAttemptLog()[0]; a.GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED || a.GetFinishedAtMs() != deadline {
		t.Fatalf("attempt %v", a)
	}
	// The frozen worker wakes: refused, with the reason.
	if r := completeJob(t, q, "frozen", id, 1); r.GetError().GetReason() != "ATTEMPT_EXPIRED" {
		t.Fatalf("late completion: %v", r)
	}
	_, err := cc.FencedCommit(ctxT(t), &coordv1.FencedCommitRequest{Resource: "orders/1", Token: tok1, Payload: []byte("a")})
	wantErr(t, err, codes.FailedPrecondition, "ATTEMPT_EXPIRED")
	// The second attempt runs and writes; the first is stale for good.
	second := fetchJobs(t, queueOf(c, c.Followers()[1]), "fresh", 1, time.Second, "lapse")
	if len(second) != 1 || second[0].GetAttempt().GetNumber() != 2 {
		t.Fatalf("%v", second)
	}
	if r, err := cc.FencedCommit(ctxT(t), &coordv1.FencedCommitRequest{Resource: "orders/1", Token: second[0].GetAttempt().GetToken(), Payload: []byte("b")}); err != nil || !r.GetAccepted() {
		t.Fatalf("second attempt's write: %v %v", r, err)
	}
	_, err = cc.FencedCommit(ctxT(t), &coordv1.FencedCommitRequest{Resource: "orders/1", Token: tok1, Payload: []byte("a")})
	wantErr(t, err, codes.FailedPrecondition, "STALE_TOKEN")
	if r := completeJob(t, q, "fresh", id, 2); r.GetError() != nil {
		t.Fatalf("%v", r)
	}
	// The reserved lease name cannot be acquired.
	_, err = cc.Acquire(ctxT(t), &coordv1.AcquireRequest{Name: fmt.Sprintf("job:%d", id), Owner: "o", Ttl: pbtime.Dur(5000)})
	wantErr(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
}

// Retryable failures back off and retry until the attempts are used up:
// dead, every attempt recorded with its error; Retry revives it.
func TestQueueRetriesToDead(t *testing.T) {
	c := testcluster.New(t, 3)
	c.WaitLeader()
	q := queueOf(c, c.Followers()[0])
	id := submitJobs(t, q, &coordv1.NewJob{Queue: "flaky", Kind: "k", MaxAttempts: 3, BackoffInitial: pbtime.Dur(200), BackoffMax: pbtime.Dur(1000)})[0].GetId()
	var failedAt int64
	for attempt := uint32(1); attempt <= 3; attempt++ {
		cl := fetchJobs(t, q, "w", 1, 5*time.Second, "flaky")
		if len(cl) != 1 || cl[0].GetAttempt().GetNumber() != attempt {
			t.Fatalf("attempt %d: %v", attempt, cl)
		}
		if attempt > 1 {
			// Due after the backoff (200 ms doubling, up to 25 % jitter): never before.
			min := failedAt + 200<<(attempt-2)
			if started := cl[0].GetAttempt().GetStartedAtMs(); started < min {
				t.Fatalf("attempt %d started %d ms after the failure, backoff %d", attempt, started-failedAt, min-failedAt)
			}
		}
		r, err := q.Fail(ctxT(t), &coordv1.QueueFailRequest{WorkerId: "w", Failures: []*coordv1.JobFailure{{JobId: id, Attempt: attempt,
			Error: fmt.Sprintf("boom %d", attempt), Retryable: true}}})
		if err != nil || r.GetResults()[0].GetError() != nil {
			t.Fatalf("fail: %v %v", r, err)
		}
		res := r.GetResults()[0]
		failedAt = getJob(t, q, id).GetUpdatedAtMs()
		want := coordv1.JobState_JOB_STATE_RETRYABLE
		if attempt == 3 {
			want = coordv1.JobState_JOB_STATE_DEAD
		}
		if res.GetState() != want {
			t.Fatalf("after attempt %d: %v", attempt, res)
		}
	}
	j := getJob(t, q, id)
	if len(j.GetAttemptLog()) != 3 || j.GetAttemptLog()[2].GetError() != "boom 3" || j.GetFinishedAtMs() == 0 {
		t.Fatalf("%v", j)
	}
	leader := c.WaitLeader()
	if v := metricValue(t, leader, `coordd_queue_jobs_dead_total{queue="flaky"}`); v != 1 {
		t.Fatalf("dead counter %v", v)
	}
	r, err := q.Retry(ctxT(t), &coordv1.QueueRetryRequest{Id: id})
	if err != nil || r.GetJob().GetState() != coordv1.JobState_JOB_STATE_AVAILABLE || r.GetJob().GetMaxAttempts() != 4 {
		t.Fatalf("retry %v %v", r, err)
	}
	if cl := fetchJobs(t, q, "w", 1, time.Second, "flaky"); len(cl) != 1 || cl[0].GetAttempt().GetNumber() != 4 {
		t.Fatalf("%v", cl)
	}
}

// Cancelling a running job ends its attempt: the worker's heartbeat and
// completion are refused with JOB_CANCELLED.
func TestQueueCancelRunningJob(t *testing.T) {
	c := testcluster.New(t, 3)
	leader := c.WaitLeader()
	q := queueOf(c, leader)
	id := submitJobs(t, q, &coordv1.NewJob{Queue: "c", Kind: "k"})[0].GetId()
	cl := fetchJobs(t, q, "w", 1, 0, "c")
	if len(cl) != 1 {
		t.Fatal("no job")
	}
	r, err := queueOf(c, c.Followers()[0]).Cancel(ctxT(t), &coordv1.QueueCancelRequest{Id: id})
	if err != nil || r.GetJob().GetState() != coordv1.JobState_JOB_STATE_CANCELLED ||
		r.GetJob().GetAttemptLog()[0].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED {
		t.Fatalf("%v %v", r, err)
	}
	hb, err := q.Heartbeat(ctxT(t), &coordv1.QueueHeartbeatRequest{WorkerId: "w", Attempts: []*coordv1.JobAttemptRef{{JobId: id, Attempt: 1}}})
	if err != nil || hb.GetResults()[0].GetError().GetReason() != "JOB_CANCELLED" {
		t.Fatalf("%v %v", hb, err)
	}
	if res := completeJob(t, q, "w", id, 1); res.GetError().GetReason() != "JOB_CANCELLED" {
		t.Fatalf("%v", res)
	}
	_, err = c.Coord(leader).FencedCommit(ctxT(t), &coordv1.FencedCommitRequest{Resource: "r", Token: cl[0].GetAttempt().GetToken()})
	wantErr(t, err, codes.FailedPrecondition, "JOB_CANCELLED")
	again, err := q.Cancel(ctxT(t), &coordv1.QueueCancelRequest{Id: id})
	if err != nil || !again.GetDuplicate() {
		t.Fatalf("%v %v", again, err)
	}
}

// A unique key makes a submit idempotent: again (on another node, in the
// same batch) returns the first job.
func TestQueueUniqueKeyIdempotentSubmit(t *testing.T) {
	c := testcluster.New(t, 3)
	leader := c.WaitLeader()
	first := submitJobs(t, queueOf(c, leader), &coordv1.NewJob{Queue: "u", Kind: "k", UniqueKey: "order-17"})[0]
	again := submitJobs(t, queueOf(c, c.Followers()[0]),
		&coordv1.NewJob{Queue: "u", Kind: "k", UniqueKey: "order-17"},
		&coordv1.NewJob{Queue: "u", Kind: "k", UniqueKey: "order-18"},
		&coordv1.NewJob{Queue: "u", Kind: "k", UniqueKey: "order-18"},
		&coordv1.NewJob{Queue: "other", Kind: "k", UniqueKey: "order-17"})
	if !again[0].GetDuplicate() || again[0].GetId() != first.GetId() {
		t.Fatalf("resubmit %v, first %v", again[0], first)
	}
	if again[1].GetDuplicate() || !again[2].GetDuplicate() || again[2].GetId() != again[1].GetId() {
		t.Fatalf("in-batch duplicate: %v %v", again[1], again[2])
	}
	if again[3].GetDuplicate() {
		t.Fatal("unique keys are per queue")
	}
	st, err := queueOf(c, leader).Stats(ctxT(t), &coordv1.QueueStatsRequest{Queue: "u"})
	if err != nil || st.GetQueues()[0].GetAvailable() != 2 {
		t.Fatalf("%v %v", st, err)
	}
	// A bad job refuses its whole batch.
	_, err = queueOf(c, leader).Submit(ctxT(t), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "u", Kind: "k"}, {Queue: "u"}}})
	meta := wantErr(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	if meta["field"] != "kind" || meta["index"] != "1" {
		t.Fatalf("%v", meta)
	}
	if st, _ := queueOf(c, leader).Stats(ctxT(t), &coordv1.QueueStatsRequest{Queue: "u"}); st.GetQueues()[0].GetAvailable() != 2 {
		t.Fatal("a refused batch added jobs")
	}
}

// The HTTP/JSON gateway, as curl would call it: submit on a follower, get,
// list, stats, retry, cancel; errors as JSON with reason and metadata.
func TestQueueHTTPGateway(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
	c.WaitLeader()
	hc := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + c.Followers()[0].API.HTTPAddr()
	// curl -X POST $base/v1/queue/jobs -d '{"jobs":[{"queue":"reports","kind":"send-report","args":{"day":"mon"},"delay":"60s"}]}'
	r := doJSON(t, hc, "POST", base+"/v1/queue/jobs", `{"jobs":[{"queue":"reports","kind":"send-report","args":{"day":"mon"},"delay":"60s","labels":{"team":"ops"}},{"queue":"reports","kind":"send-report"}]}`)
	wantHTTP(t, "submit", r, 200, "")
	jobs := r.body["jobs"].([]any)
	id := jobs[0].(map[string]any)["id"].(string)
	if jobs[0].(map[string]any)["state"] != "SCHEDULED" || jobs[1].(map[string]any)["state"] != "AVAILABLE" {
		t.Fatalf("%v", r.body)
	}
	r = doJSON(t, hc, "GET", base+"/v1/queue/jobs/"+id, nil)
	wantHTTP(t, "get", r, 200, "")
	if j := r.body["job"].(map[string]any); j["kind"] != "send-report" || !reflect.DeepEqual(j["args"], map[string]any{"day": "mon"}) || j["labels"].(map[string]any)["team"] != "ops" {
		t.Fatalf("%v", j)
	}
	r = doJSON(t, hc, "GET", base+"/v1/queue/jobs?queue=reports&label=team%3Dops", nil)
	wantHTTP(t, "list", r, 200, "")
	if l := r.body["jobs"].([]any); len(l) != 1 || l[0].(map[string]any)["id"] != id {
		t.Fatalf("%v", r.body)
	}
	r = doJSON(t, hc, "GET", base+"/v1/queue/jobs?queue=reports&page_size=1", nil)
	if l := r.body["jobs"].([]any); len(l) != 1 || r.body["next_page_token"] == "" {
		t.Fatalf("paged %v", r.body)
	}
	r = doJSON(t, hc, "GET", base+"/v1/queue/stats?queue=reports", nil)
	wantHTTP(t, "stats", r, 200, "")
	if s := r.body["queues"].([]any)[0].(map[string]any); s["scheduled"] != "1" || s["available"] != "1" {
		t.Fatalf("%v", r.body)
	}
	r = doJSON(t, hc, "POST", base+"/v1/queue/jobs/"+id+"/retry", `{}`)
	wantHTTP(t, "retry (run now)", r, 200, "")
	r = doJSON(t, hc, "POST", base+"/v1/queue/jobs/"+id+"/cancel", `{}`)
	wantHTTP(t, "cancel", r, 200, "")
	if r.body["job"].(map[string]any)["state"] != "CANCELLED" {
		t.Fatalf("%v", r.body)
	}
	wantHTTP(t, "missing job", doJSON(t, hc, "GET", base+"/v1/queue/jobs/424242", nil), 404, "JOB_NOT_FOUND")
	r = doJSON(t, hc, "POST", base+"/v1/queue/jobs", `{"jobs":[{"kind":"k","run_at":"5138-11-16T09:46:39.999Z"}]}`)
	wantHTTP(t, "a year ahead", r, 400, "INVALID_ARGUMENT")
	if m := r.body["metadata"].(map[string]any); m["field"] != "run_at" || m["index"] != "0" {
		t.Fatalf("%v", r.body)
	}
	// Fetch is on HTTP too (http_routes_test.go runs a worker): one
	// without queues is bad input naming the field.
	r = doJSON(t, hc, "POST", base+"/v1/queue/fetch", `{}`)
	wantHTTP(t, "fetch without queues", r, 400, "INVALID_ARGUMENT")
	if m := r.body["metadata"].(map[string]any); m["field"] != "queues" {
		t.Fatalf("%v", r.body)
	}
}

// The leader is killed while workers fetch and complete: no job is lost
// (every one ends SUCCEEDED) and none is handed to two workers at once (a
// job is handed out again only after its previous attempt lapsed: a fetch
// whose answer died with the leader).
func TestQueueLeaderKillDuringDispatch(t *testing.T) {
	c := testcluster.New(t, 3)
	leader := c.WaitLeader()
	const total = 600
	var ids []uint64
	for b := 0; b < total/200; b++ {
		var jobs []*coordv1.NewJob
		for i := 0; i < 200; i++ {
			jobs = append(jobs, &coordv1.NewJob{Queue: "kill", Kind: "k", VisibilityTimeout: pbtime.Dur(2000), UniqueKey: fmt.Sprintf("j-%d-%d", b, i)})
		}
		for _, s := range submitJobs(t, queueOf(c, leader), jobs...) {
			ids = append(ids, s.GetId())
		}
	}
	type handout struct {
		worker  string
		attempt uint32
	}
	var (
		mu        sync.Mutex
		handouts  = map[uint64][]handout{}
		completed = map[uint64]bool{} // a duplicate answers a repeat after an unknown outcome
		done      = make(chan struct{})
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A client per node, made before the leader stops: the stopped node's
	// calls fail and the worker moves on to the next.
	var qs []coordv1.QueueClient
	for _, n := range c.Nodes {
		qs = append(qs, queueOf(c, n))
	}
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		worker := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i++ {
				q := qs[i%len(qs)]
				fctx, fcancel := context.WithTimeout(ctx, 3*time.Second)
				r, err := q.Fetch(fctx, &coordv1.QueueFetchRequest{Queues: []string{"kill"}, Max: 20, Wait: pbtime.Dur(500), WorkerId: worker})
				fcancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // next node, as a client would
					continue
				}
				var comps []*coordv1.JobCompletion
				mu.Lock()
				for _, cl := range r.GetJobs() {
					id := cl.GetJob().GetId()
					handouts[id] = append(handouts[id], handout{worker, cl.GetAttempt().GetNumber()})
					comps = append(comps, &coordv1.JobCompletion{JobId: id, Attempt: cl.GetAttempt().GetNumber()})
				}
				mu.Unlock()
				for len(comps) > 0 && ctx.Err() == nil {
					cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
					res, err := qs[i%len(qs)].Complete(cctx, &coordv1.QueueCompleteRequest{WorkerId: worker, Completions: comps})
					ccancel()
					if err != nil {
						i++
						time.Sleep(20 * time.Millisecond)
						continue // unknown outcome: a repeat is a duplicate
					}
					mu.Lock()
					for k, cr := range res.GetResults() {
						if cr.GetError() == nil {
							completed[comps[k].GetJobId()] = true
						}
					}
					if len(completed) >= total {
						select {
						case <-done:
						default:
							close(done)
						}
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	// Kill the leader once a third of the jobs are done.
	c.Eventually("a third done", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(completed) >= total/3
	})
	mu.Lock()
	t.Logf("stopping leader %s with %d of %d jobs completed", leader.ID, len(completed), total)
	mu.Unlock()
	c.Stop(leader)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		mu.Lock()
		t.Fatalf("only %d of %d jobs completed a minute after the leader stopped", len(completed), total)
	}
	cancel()
	wg.Wait()
	q := queueOf(c, c.WaitLeader())
	relapsed := 0
	for _, id := range ids {
		j := getJob(t, q, id)
		if j.GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job %d is %s", id, j.GetState())
		}
		log := j.GetAttemptLog()
		for k, a := range log[:len(log)-1] {
			// Every attempt before the last ended before the next began.
			if a.GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED || a.GetFinishedAtMs() > log[k+1].GetStartedAtMs() {
				t.Fatalf("job %d: attempt %v, then %v", id, a, log[k+1])
			}
			relapsed++
		}
		if !completed[id] {
			t.Fatalf("job %d succeeded, but no worker's completion was accepted", id)
		}
		if n := len(log); log[n-1].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED {
			t.Fatalf("job %d: last attempt %v", id, log[n-1])
		}
		seen := map[uint32]bool{}
		for _, h := range handouts[id] {
			if seen[h.attempt] {
				t.Fatalf("job %d attempt %d handed out twice: %v", id, h.attempt, handouts[id])
			}
			seen[h.attempt] = true
		}
	}
	t.Logf("all %d jobs succeeded once; %d attempts lapsed (fetches whose answer died with the leader)", total, relapsed)
}

const queueACL = `
rules:
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
  - name: producer
    identities: [reports-api]
    ops: [job, read]
    prefixes: [reports/]
  - name: worker
    identities: [reports-worker]
    ops: [work]
    prefixes: [reports/]
  - name: ledger
    identities: [reports-worker]
    ops: [fence]
    prefixes: [ledger/]
`

// With mutual TLS and an ACL: a producer submits and reads its queues, a
// worker fetches from them, each refused outside its ops and prefixes
// (through a follower: the leader authorizes the forwarded identity); an
// attempt is bound to the identity that fetched it.
func TestQueueSecurity(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, queueACL)
	c.WaitLeader()
	follower := c.Followers()[0]
	api := coordv1.NewQueueClient(connAs(t, certs.Client("reports-api"), follower.API.GRPCAddr()))
	wrk := coordv1.NewQueueClient(connAs(t, certs.Client("reports-worker"), follower.API.GRPCAddr()))
	ctx := ctxT(t)
	denied := func(what string, err error) {
		t.Helper()
		wantErr(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	}
	sub, err := api.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "reports/daily", Kind: "k"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := sub.GetJobs()[0].GetId()
	_, err = api.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "reports/daily", Kind: "k"}, {Kind: "k"}}})
	denied("submit to the default queue", err)
	_, err = wrk.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "reports/daily", Kind: "k"}}})
	denied("submit by a worker", err)
	_, err = api.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"reports/daily"}, Max: 1, WorkerId: "w"})
	denied("fetch by the producer", err)
	if g, err := api.Get(ctx, &coordv1.QueueGetRequest{Id: id}); err != nil || g.GetJob().GetSubmittedBy() != "reports-api" {
		t.Fatalf("%v %v", g, err)
	}
	_, err = wrk.Get(ctx, &coordv1.QueueGetRequest{Id: id})
	denied("get by the worker", err)
	_, err = api.List(ctx, &coordv1.QueueListRequest{})
	denied("list of every queue", err)
	if _, err := api.List(ctx, &coordv1.QueueListRequest{Queue: "reports/daily"}); err != nil {
		t.Fatal(err)
	}
	r, err := wrk.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"reports/daily"}, Max: 1, WorkerId: "w"})
	if err != nil || len(r.GetJobs()) != 1 || r.GetJobs()[0].GetAttempt().GetIdentity() != "reports-worker" {
		t.Fatalf("%v %v", r, err)
	}
	// Bound to the fetcher: another identity's completion is refused per item.
	done, err := api.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w", Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: 1}}})
	if err != nil || done.GetResults()[0].GetError().GetReason() != "IDENTITY_MISMATCH" {
		t.Fatalf("%v %v", done, err)
	}
	fc := coordAs(t, certs, follower, "reports-worker")
	if res, err := fc.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "ledger/r1", Token: r.GetJobs()[0].GetAttempt().GetToken()}); err != nil || !res.GetAccepted() {
		t.Fatalf("%v %v", res, err)
	}
	done, err = wrk.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "w", Completions: []*coordv1.JobCompletion{{JobId: id, Attempt: 1}}})
	if err != nil || done.GetResults()[0].GetError() != nil {
		t.Fatalf("%v %v", done, err)
	}
	_, err = wrk.Retry(ctx, &coordv1.QueueRetryRequest{Id: id})
	denied("retry by the worker", err)
	_, err = api.Retry(ctx, &coordv1.QueueRetryRequest{Id: id})
	wantErr(t, err, codes.FailedPrecondition, "JOB_FINISHED")
}
