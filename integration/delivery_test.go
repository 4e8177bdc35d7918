package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/webhook"
)

// Jobs delivered to an HTTP endpoint by the cluster's nodes
// (docs/delivery.md), on a real three-node cluster and a real endpoint on
// loopback.

// endpoint is a test HTTP target: it verifies each request's signature,
// writes through FencedCommit with the attempt's token, and answers by
// the job's kind.
type endpoint struct {
	t        *testing.T
	verifier *webhook.Verifier
	fence    coordv1.CoordinatorClient
	mu       sync.Mutex
	calls    map[string]int      // per job id
	headers  map[string][]string // per job id: a header of each request
	bad      []string
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get(delivery.HeaderJobID)
	e.mu.Lock()
	e.calls[id]++
	n := e.calls[id]
	e.headers[id] = append(e.headers[id], r.Header.Get(delivery.HeaderWindow))
	if err := e.verifier.Verify(r.Header, body); err != nil {
		e.bad = append(e.bad, id+": "+err.Error())
	}
	e.mu.Unlock()
	switch {
	case strings.Contains(string(body), `"flaky"`) && n == 1:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case strings.Contains(string(body), `"broken"`) && n == 1:
		http.Error(w, "oops", http.StatusInternalServerError)
		return
	case strings.Contains(string(body), `"bad"`):
		http.Error(w, "no such invoice", http.StatusBadRequest)
		return
	}
	// The effect, fenced by the attempt's token.
	res, err := e.fence.FencedCommit(r.Context(), &coordv1.FencedCommitRequest{Resource: "effects/" + id,
		Token: r.Header.Get(delivery.HeaderToken), IdempotencyKey: r.Header.Get(delivery.HeaderIdempotency), Payload: body})
	if err != nil || !res.GetAccepted() {
		http.Error(w, "fenced out", http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"done":true}`)
}

func (e *endpoint) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[id]
}

func TestDeliveryEndToEnd(t *testing.T) {
	secret := webhook.NewSecret()
	allow, err := delivery.ParseAllow([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 3, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.Delivery = delivery.Options{Allow: allow, Secrets: delivery.Secrets{"app": {secret}}}
	}))
	leader := c.Leader()
	ep := &endpoint{t: t, verifier: &webhook.Verifier{Secrets: []webhook.Secret{secret}}, fence: coordv1.NewCoordinatorClient(c.Conn(leader)),
		calls: map[string]int{}, headers: map[string][]string{}}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	q := queueOf(c, c.Followers()[0])
	target := &coordv1.HttpTarget{Url: srv.URL + "/jobs", Secret: "app"}
	job := func(kind string, mod func(*coordv1.NewJob)) *coordv1.NewJob {
		j := &coordv1.NewJob{Queue: "billing", Kind: kind, Args: []byte(`{"kind":"` + kind + `"}`), Target: target, BackoffInitial: durationpb.New(100 * time.Millisecond)}
		if mod != nil {
			mod(j)
		}
		return j
	}
	var jobs []*coordv1.NewJob
	for range 16 {
		jobs = append(jobs, job("ok", nil))
	}
	jobs = append(jobs, job("delayed", func(j *coordv1.NewJob) { j.Delay = durationpb.New(300 * time.Millisecond) }), job("flaky", nil), job("broken", nil), job("bad", nil))
	// Every node's deliverer long-polls the leader before the burst.
	c.Eventually("three delivery long polls", 20*time.Second, func() bool { return metricValue(t, leader, "coordd_fetch_waiters") == 3 })
	sub := submitJobs(t, q, jobs...)

	// A pull worker of the queue never gets a targeted job.
	if got := fetchJobs(t, q, "puller", 100, 0, "billing"); len(got) != 0 {
		t.Fatalf("a pull worker fetched %d targeted jobs", len(got))
	}
	final := map[uint64]*coordv1.QueueJob{}
	c.Eventually("every job final", 30*time.Second, func() bool {
		for _, s := range sub {
			if final[s.GetId()] != nil {
				continue
			}
			if j := getJob(t, q, s.GetId()); j.GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED || j.GetState() == coordv1.JobState_JOB_STATE_DEAD {
				final[s.GetId()] = j
			}
		}
		return len(final) == len(sub)
	})
	workers := map[string]bool{}
	for i, s := range sub {
		j := final[s.GetId()]
		kind, id := j.GetKind(), strconv.FormatUint(j.GetId(), 10)
		log := j.GetAttemptLog()
		last := log[len(log)-1]
		switch kind {
		case "ok", "delayed":
			if j.GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED || string(last.GetResult()) != `{"done":true}` || ep.count(id) != 1 {
				t.Errorf("job %d (%s): %s, result %q, %d requests", i, kind, j.GetState(), last.GetResult(), ep.count(id))
			}
			workers[last.GetWorkerId()] = true
			if kind == "delayed" && last.GetStartedAtMs()-j.GetCreatedAtMs() < 300 {
				t.Errorf("the delayed job was delivered %d ms after its submit, before its 300 ms delay", last.GetStartedAtMs()-j.GetCreatedAtMs())
			}
		case "broken":
			// 500 without Retry-After, then 200: retried after the
			// backoff (100 ms).
			if j.GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED || len(log) != 2 || !strings.Contains(log[0].GetError(), "HTTP 500") ||
				log[1].GetStartedAtMs()-log[0].GetFinishedAtMs() < 100 || ep.count(id) != 2 {
				t.Errorf("broken job: %s, attempts %v", j.GetState(), log)
			}
		case "flaky":
			// 503 with Retry-After: 1, then 200: the retry waited a second,
			// not the 100 ms backoff.
			if j.GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED || len(log) != 2 || !strings.Contains(log[0].GetError(), "HTTP 503") ||
				log[1].GetStartedAtMs()-log[0].GetFinishedAtMs() < 1000 {
				t.Errorf("flaky job: %s, attempts %v", j.GetState(), log)
			}
		case "bad":
			if j.GetState() != coordv1.JobState_JOB_STATE_DEAD || len(log) != 1 || !strings.Contains(log[0].GetError(), "HTTP 400") ||
				!strings.Contains(log[0].GetError(), "no such invoice") {
				t.Errorf("bad job: %s, attempts %v", j.GetState(), log)
			}
		}
		if j.GetTarget().GetMethod() != "POST" || j.GetTarget().GetSecret() != "app" {
			t.Errorf("job %d: target as read %v", i, j.GetTarget())
		}
		// Every attempt records its request's status and latency.
		for _, a := range log {
			want := uint32(200)
			switch {
			case kind == "bad":
				want = 400
			case kind == "flaky" && a.GetNumber() == 1:
				want = 503
			case kind == "broken" && a.GetNumber() == 1:
				want = 500
			}
			if a.GetDeliveryStatus() != want || a.GetDeliveryLatency() == nil {
				t.Errorf("job %d (%s) attempt %d: delivery status %d, latency %v; want %d and a latency", i, kind, a.GetNumber(),
					a.GetDeliveryStatus(), a.GetDeliveryLatency(), want)
			}
		}
	}
	if len(workers) < 2 {
		t.Errorf("all deliveries by %v: want them spread over the nodes", workers)
	}
	ep.mu.Lock()
	if len(ep.bad) > 0 {
		t.Errorf("bad signatures: %v", ep.bad)
	}
	ep.mu.Unlock()

	// A schedule's job is delivered with its window.
	sc := coordv1.NewSchedulesClient(c.Conn(leader))
	if _, err := sc.PutSchedule(ctxT(t), &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "nightly", Schedule: "0 2 * * *",
		Job: &coordv1.JobTemplate{Queue: "reports", Kind: "report", Args: []byte(`{"kind":"report"}`), Target: target}}}); err != nil {
		t.Fatal(err)
	}
	tr, err := sc.TriggerSchedule(ctxT(t), &coordv1.TriggerScheduleRequest{Name: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatUint(tr.GetOccurrence().GetJobId(), 10)
	c.Eventually("the schedule's job delivered", 20*time.Second, func() bool { return ep.count(id) == 1 })
	ep.mu.Lock()
	if w := ep.headers[id]; len(w) != 1 || w[0] == "" {
		t.Errorf("schedule job's %s headers: %q", delivery.HeaderWindow, w)
	}
	ep.mu.Unlock()

	// A queue's target: its new jobs without one of their own go there.
	if _, err := q.SetTarget(ctxT(t), &coordv1.QueueSetTargetRequest{Queue: "auto", Target: target}); err != nil {
		t.Fatal(err)
	}
	auto := submitJobs(t, q, &coordv1.NewJob{Queue: "auto", Kind: "ok", Args: []byte(`{"kind":"ok"}`)})
	autoID := strconv.FormatUint(auto[0].GetId(), 10)
	c.Eventually("the queue target's job delivered", 20*time.Second, func() bool {
		return ep.count(autoID) == 1 && getJob(t, q, auto[0].GetId()).GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED
	})

	// Refused at the edge: a host the allow-list lacks (naming the flag),
	// an unknown secret.
	_, err = q.Submit(ctxT(t), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "x", Target: &coordv1.HttpTarget{Url: "http://10.1.2.3/x"}}}})
	if meta := wantErr(t, err, codes.InvalidArgument, "INVALID_ARGUMENT"); meta["field"] != "target.url" || !strings.Contains(err.Error(), delivery.AllowFlag) {
		t.Errorf("disallowed host: %v %v", err, meta)
	}
	_, err = q.Submit(ctxT(t), &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "x", Target: &coordv1.HttpTarget{Url: srv.URL, Secret: "nope"}}}})
	if meta := wantErr(t, err, codes.InvalidArgument, "INVALID_ARGUMENT"); meta["field"] != "target.secret" || !strings.Contains(err.Error(), delivery.SecretsFlag) {
		t.Errorf("unknown secret: %v %v", err, meta)
	}
}
