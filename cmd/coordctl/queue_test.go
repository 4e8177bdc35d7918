package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// scriptedQueue is a coord.v1.Queue on loopback with canned answers; it
// records the requests coordctl sends.
type scriptedQueue struct {
	coordv1.UnimplementedQueueServer
	requestLog
}

// Times of the sample job: calendar time 2026-09-25T10:00:00Z and around.
const calNow = int64(1_790_330_400_000)

func sampleJob() *coordv1.QueueJob {
	return &coordv1.QueueJob{Id: 17, Queue: "billing", Kind: "send-invoice", Args: []byte(`{"invoice":42}`),
		State: coordv1.JobState_JOB_STATE_RUNNING, RunAt: pbtime.At(calNow - 13_000), Priority: 5, MaxAttempts: 5, Attempts: 3,
		BackoffInitial: pbtime.Dur(1000), BackoffMax: pbtime.Dur(3_600_000), BackoffFactor: 2, VisibilityTimeout: pbtime.Dur(30_000), UniqueKey: "invoice-42",
		Labels: map[string]string{"tenant": "acme", "region": "eu"}, SubmittedBy: "billing-api",
		CreatedAt: pbtime.At(calNow - 65_000), UpdatedAt: pbtime.At(calNow - 1_000),
		AttemptLog: []*coordv1.JobAttempt{
			{Number: 1, Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED, WorkerId: "worker-a:4121:ab12", StartedAt: pbtime.At(calNow - 64_000),
				Deadline: pbtime.At(calNow - 34_000), FinishedAt: pbtime.At(calNow - 34_000), Heartbeats: 0, Error: "visibility timeout passed without a heartbeat",
				Token: "job:17:1"},
			{Number: 2, Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED, WorkerId: "worker-b:77:cd34", StartedAt: pbtime.At(calNow - 33_000),
				Deadline: pbtime.At(calNow + 27_000), FinishedAt: pbtime.At(calNow - 1_000), Heartbeats: 3,
				Error: "panic: smtp: 421 too many connections\n\ngoroutine 7 [running]:\nmain.sendInvoice(...)", Token: "job:17:2"},
			{Number: 3, Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING, WorkerId: "worker-c:9:ef56", StartedAt: pbtime.At(calNow - 12_000),
				Deadline: pbtime.At(calNow + 25_500), Heartbeats: 1, Token: "job:17:3"},
		}}
}

// deliveredJob is a job with an HTTP target: a 503 answered after 1.2 s,
// a timeout, then a 200 in 48 ms.
func deliveredJob() *coordv1.QueueJob {
	j := sampleJob()
	j.Id, j.State, j.FinishedAt = 18, coordv1.JobState_JOB_STATE_SUCCEEDED, pbtime.At(calNow-1_000)
	j.Target = &coordv1.HttpTarget{Url: "https://billing.internal/jobs/charge", Method: "POST", Secret: "billing"}
	for i, a := range j.AttemptLog {
		a.WorkerId, a.Token, a.Outcome = "coordd-delivery/n"+strconv.Itoa(i+1), "job:18:"+strconv.Itoa(i+1), coordv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED
	}
	l := j.AttemptLog
	l[0].Error, l[0].DeliveryStatus, l[0].DeliveryLatency = "HTTP 503 after 1.2s; Retry-After 7s: overloaded", 503, pbtime.Dur(1_200)
	l[1].Error, l[1].DeliveryLatency = "delivery: context deadline exceeded after 30s", pbtime.Dur(30_000)
	l[2].Outcome, l[2].FinishedAt, l[2].DeliveryStatus, l[2].DeliveryLatency = coordv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED,
		pbtime.At(calNow-1_000), 200, pbtime.Dur(48)
	return j
}

func (s *scriptedQueue) Submit(_ context.Context, r *coordv1.QueueSubmitRequest) (*coordv1.QueueSubmitResponse, error) {
	s.record(r)
	dup := r.GetJobs()[0].GetUniqueKey() == "invoice-42"
	return &coordv1.QueueSubmitResponse{Jobs: []*coordv1.SubmittedJob{{Id: 17, State: coordv1.JobState_JOB_STATE_SCHEDULED,
		RunAt: pbtime.At(calNow + 600_000), Duplicate: dup}}}, nil
}

func (s *scriptedQueue) Get(_ context.Context, r *coordv1.QueueGetRequest) (*coordv1.QueueGetResponse, error) {
	s.record(r)
	if r.GetId() == 18 {
		return &coordv1.QueueGetResponse{Job: deliveredJob(), CalendarTime: pbtime.At(calNow)}, nil
	}
	if r.GetId() != 17 {
		return nil, coorderr.New(codes.NotFound, coorderr.JobNotFound, "job 99 does not exist (never submitted, or pruned)",
			map[string]string{"job_id": "99"})
	}
	return &coordv1.QueueGetResponse{Job: sampleJob(), CalendarTime: pbtime.At(calNow)}, nil
}

func (s *scriptedQueue) List(_ context.Context, r *coordv1.QueueListRequest) (*coordv1.QueueListResponse, error) {
	s.record(r)
	a := sampleJob()
	a.Args, a.AttemptLog = nil, nil
	b := &coordv1.QueueJob{Id: 16, Queue: "billing", Kind: "send-invoice", State: coordv1.JobState_JOB_STATE_SUCCEEDED,
		RunAt: pbtime.At(calNow - 90_000), MaxAttempts: 25, Attempts: 1, UpdatedAt: pbtime.At(calNow - 80_000), FinishedAt: pbtime.At(calNow - 80_000)}
	return &coordv1.QueueListResponse{Jobs: []*coordv1.QueueJob{a, b}, NextPageToken: "16"}, nil
}

func (s *scriptedQueue) Cancel(_ context.Context, r *coordv1.QueueCancelRequest) (*coordv1.QueueCancelResponse, error) {
	s.record(r)
	if r.GetId() == 16 {
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.JobFinished, "job 16 succeeded", map[string]string{"state": "SUCCEEDED"})
	}
	j := sampleJob()
	j.State, j.AttemptLog = coordv1.JobState_JOB_STATE_CANCELLED, nil
	return &coordv1.QueueCancelResponse{Job: j, Duplicate: true}, nil
}

func (s *scriptedQueue) Retry(_ context.Context, r *coordv1.QueueRetryRequest) (*coordv1.QueueRetryResponse, error) {
	s.record(r)
	j := sampleJob()
	j.State, j.AttemptLog, j.RunAt = coordv1.JobState_JOB_STATE_AVAILABLE, nil, pbtime.At(calNow)
	return &coordv1.QueueRetryResponse{Job: j}, nil
}

func (s *scriptedQueue) Stats(_ context.Context, r *coordv1.QueueStatsRequest) (*coordv1.QueueStatsResponse, error) {
	s.record(r)
	if r.GetQueue() == "empty" {
		return &coordv1.QueueStatsResponse{CalendarTime: pbtime.At(calNow)}, nil
	}
	return &coordv1.QueueStatsResponse{CalendarTime: pbtime.At(calNow), Queues: []*coordv1.QueueStats{
		{Queue: "billing", Scheduled: 120, Available: 4, Running: 8, Retryable: 2, Succeeded: 10_400, Cancelled: 1, Dead: 3,
			OldestAvailableAge: pbtime.Dur(1_250), OldestAvailableRunAt: pbtime.At(calNow - 1_250)},
		{Queue: "default", Succeeded: 5},
	}}, nil
}

func startScriptedQueue(t *testing.T) (*scriptedQueue, []string) {
	t.Helper()
	s := &scriptedQueue{}
	return s, serveScripted(t, func(srv *grpc.Server) { coordv1.RegisterQueueServer(srv, s) })
}

// The queue commands' tables, on a scripted server.
func TestQueueCommandsGolden(t *testing.T) {
	_, eps := startScriptedQueue(t)
	goldenTranscript(t, "queue", eps, [][]string{
		{"job", "submit", "send-invoice", "--queue", "billing", "--args", `{"invoice":42}`, "--in", "10m"},
		{"job", "submit", "send-invoice", "--unique-key", "invoice-42"},
		{"job", "get", "17"},
		{"job", "get", "18"},
		{"job", "list", "--queue", "billing"},
		{"job", "cancel", "17"},
		{"job", "retry", "17"},
		{"queue", "stats"},
		{"queue", "stats", "empty"},
	})

	// -o json is the RPC's response as the HTTP API writes it.
	doc := ctlJSON(t, eps, "job", "get", "17")
	if field(doc, "job", "id") != "17" || field(doc, "job", "state") != "RUNNING" || field(doc, "calendar_time") != "2026-09-25T10:00:00Z" ||
		field(doc, "job", "visibility_timeout") != "30s" || doc["job"].(map[string]any)["args"].(map[string]any)["invoice"] != 42.0 {
		t.Fatalf("get json: %v", doc)
	}
	if log := doc["job"].(map[string]any)["attempt_log"].([]any); len(log) != 3 || field(log[1].(map[string]any), "token") != "job:17:2" {
		t.Fatalf("attempt log %v", log)
	}
	// A delivery attempt's status and latency are in its JSON.
	doc = ctlJSON(t, eps, "job", "get", "18")
	if a := doc["job"].(map[string]any)["attempt_log"].([]any)[0].(map[string]any); a["delivery_status"] != 503.0 || a["delivery_latency"] != "1.200s" {
		t.Fatalf("a delivery attempt's JSON: %v", a)
	}
}

// Flags map onto the request; --at is kept to the millisecond.
func TestJobSubmitRequest(t *testing.T) {
	s, eps := startScriptedQueue(t)
	ctlOK(t, eps, "job", "submit", "report", "--queue", "ops", "--args", `{"day":"2026-09-25"}`, "--at", "2026-09-26T02:00:00.0005Z",
		"--unique-key", "report-2026-09-25", "--max-attempts", "3", "--priority", "-5", "--visibility-timeout", "2m",
		"--label", "team=ops", "--label", "tier=1")
	j := s.last().(*coordv1.QueueSubmitRequest).GetJobs()[0]
	want := &coordv1.NewJob{Queue: "ops", Kind: "report", Args: []byte(`{"day":"2026-09-25"}`), RunAt: pbtime.At(1_790_388_000_001),
		UniqueKey: "report-2026-09-25", MaxAttempts: 3, Priority: -5, VisibilityTimeout: pbtime.Dur(120_000),
		Labels: map[string]string{"team": "ops", "tier": "1"}}
	if !proto.Equal(j, want) {
		t.Fatalf("sent %v\nwant %v", j, want)
	}
	ctlOK(t, eps, "job", "submit", "cleanup", "--in", "1500ms")
	if j := s.last().(*coordv1.QueueSubmitRequest).GetJobs()[0]; j.GetDelayMs() != 1500 || j.GetArgs() != nil || j.GetMaxAttempts() != 0 ||
		j.GetRunAtMs() != 0 || !strings.HasPrefix(j.GetUniqueKey(), "auto:") {
		t.Fatalf("sent %v", j)
	}
	ctlOK(t, eps, "job", "list", "--state", "dead", "--kind", "k", "--label", "a=b", "--limit", "5", "--page-token", "40")
	if r := s.last().(*coordv1.QueueListRequest); r.GetState() != coordv1.JobState_JOB_STATE_DEAD || r.GetKind() != "k" ||
		r.GetLabel() != "a=b" || r.GetPageSize() != 5 || r.GetPageToken() != "40" {
		t.Fatalf("list %v", r)
	}
}

// Bad flags are usage errors (exit 2) found before any call; refusals
// exit 1 with the reason and its facts.
func TestQueueCommandErrors(t *testing.T) {
	s, eps := startScriptedQueue(t)
	wantUsageErrors(t, eps, &s.requestLog, [][]string{
		{"job", "submit", "k", "--args", "{not json"},
		{"job", "submit", "k", "--at", "tomorrow"},
		{"job", "submit", "k", "--at", "2026-09-26T02:00:00Z", "--in", "1m"},
		{"job", "submit", "k", "--in", "-1m"},
		{"job", "submit", "k", "--label", "novalue"},
		{"job", "submit"},
		{"job", "get", "abc"},
		{"job", "get", "0"},
		{"job", "cancel"},
		{"job", "list", "--state", "sleeping"},
		{"job", "list", "--limit", "0"},
		{"job", "list", "--label", "x"},
		{"queue", "stats", "a", "b"},
	})
	r := ctl(t, eps, "job", "get", "99")
	if r.code != exitError || r.errOut != "error: job get 99: JOB_NOT_FOUND: job 99 does not exist (never submitted, or pruned) (job_id=99)\n" {
		t.Fatalf("exit %d: %q", r.code, r.errOut)
	}
	r = ctl(t, eps, "job", "cancel", "16")
	if r.code != exitError || !strings.Contains(r.errOut, "JOB_FINISHED: job 16 succeeded (state=SUCCEEDED)") {
		t.Fatalf("exit %d: %q", r.code, r.errOut)
	}
}

// lossyQueue applies every Submit (a unique key that names a job returns
// it as a duplicate) and answers the first lose of them LEADERSHIP_LOST,
// as a leader deposed right after committing does.
type lossyQueue struct {
	coordv1.UnimplementedQueueServer
	requestLog
	lose int
	jobs map[string]uint64 // unique key -> id
}

func (s *lossyQueue) Submit(_ context.Context, r *coordv1.QueueSubmitRequest) (*coordv1.QueueSubmitResponse, error) {
	s.record(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := r.GetJobs()[0].GetUniqueKey()
	id, dup := s.jobs[k]
	if !dup {
		id = uint64(len(s.jobs) + 1)
		s.jobs[k] = id
	}
	if s.lose > 0 {
		s.lose--
		return nil, coorderr.New(codes.Unavailable, coorderr.LeadershipLost,
			"leadership lost while applying; the outcome is unknown, retry with the same request id", nil)
	}
	return &coordv1.QueueSubmitResponse{Jobs: []*coordv1.SubmittedJob{{Id: id, State: coordv1.JobState_JOB_STATE_AVAILABLE,
		Duplicate: dup}}}, nil
}

// Retry is not retried after an unknown outcome (a repeat could revive the
// job twice).
func (s *lossyQueue) Retry(_ context.Context, r *coordv1.QueueRetryRequest) (*coordv1.QueueRetryResponse, error) {
	s.record(r)
	return nil, coorderr.New(codes.Unavailable, coorderr.LeadershipLost,
		"leadership lost while applying; the outcome is unknown, retry with the same request id", nil)
}

// A submit whose leader was lost after applying it (outcome unknown) is
// retried with the same unique key, generated when none was given: the
// job exists once and coordctl exits 0. When the outcome stays unknown
// until --timeout, the error names the key to repeat the command with.
func TestJobSubmitRetriedWithItsKeyAfterUnknownOutcome(t *testing.T) {
	s := &lossyQueue{lose: 1, jobs: map[string]uint64{}}
	eps := serveScripted(t, func(srv *grpc.Server) { coordv1.RegisterQueueServer(srv, s) })
	r := ctl(t, eps, "-o", "json", "job", "submit", "send-invoice")
	if r.code != exitOK || !strings.Contains(r.out, `"duplicate": true`) {
		t.Fatalf("exit %d: %s%s", r.code, r.out, r.errOut)
	}
	if n := s.count(); n != 2 || len(s.jobs) != 1 {
		t.Fatalf("%d submits, %d jobs: want 2 submits of one job", n, len(s.jobs))
	}
	key := s.reqs[0].(*coordv1.QueueSubmitRequest).GetJobs()[0].GetUniqueKey()
	if !strings.HasPrefix(key, "auto:") || s.last().(*coordv1.QueueSubmitRequest).GetJobs()[0].GetUniqueKey() != key {
		t.Fatalf("keys %q then %q", key, s.last().(*coordv1.QueueSubmitRequest).GetJobs()[0].GetUniqueKey())
	}

	// The user's own key is the one retried.
	s.lose = 1
	ctlOK(t, eps, "job", "submit", "send-invoice", "--unique-key", "invoice-7")
	if k := s.last().(*coordv1.QueueSubmitRequest).GetJobs()[0].GetUniqueKey(); k != "invoice-7" || len(s.jobs) != 2 {
		t.Fatalf("retried with %q; %d jobs", k, len(s.jobs))
	}

	// Unknown until --timeout: the advice is a flag coordctl has.
	s.lose = 1 << 30
	r = ctl(t, eps, "--timeout", "300ms", "job", "submit", "send-invoice")
	key = s.last().(*coordv1.QueueSubmitRequest).GetJobs()[0].GetUniqueKey()
	want := "error: job submit send-invoice: LEADERSHIP_LOST: leadership lost while applying; the outcome is unknown " +
		"(it may have been applied): the job may have been added; repeat the command with --unique-key " + key +
		" to learn its outcome without adding it twice\n"
	if r.code != exitError || r.errOut != want {
		t.Fatalf("exit %d: %q\nwant %q", r.code, r.errOut, want)
	}

	// A write without a handle is not retried, and the advice is what to
	// look at, not a request id coordctl has no flag for.
	r = ctl(t, eps, "job", "retry", "17")
	want = "error: job retry 17: LEADERSHIP_LOST: leadership lost while applying; the outcome is unknown (it may have been applied): " +
		"the job may be available again; 'coordctl job get 17' shows its state before you retry again\n"
	if r.code != exitError || r.errOut != want {
		t.Fatalf("exit %d: %q\nwant %q", r.code, r.errOut, want)
	}
}
