package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Options map onto NewJob's fields; args are JSON unless given as bytes.
func TestNewJob(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_000).Add(300 * time.Microsecond) // not on a millisecond: rounded up
	j, err := NewJob("send-invoice", map[string]int{"invoice": 42}, Queue("billing"), Priority(5), MaxAttempts(3),
		Backoff(2*time.Second, time.Minute, 1.5), VisibilityTimeout(90*time.Second), UniqueKey("invoice-42"),
		Label("tenant", "acme"), Labels(map[string]string{"region": "eu"}), At(at))
	if err != nil {
		t.Fatal(err)
	}
	want := &coordv1.NewJob{Queue: "billing", Kind: "send-invoice", Args: []byte(`{"invoice":42}`), RunAt: pbtime.At(1_800_000_000_001),
		Priority: 5, MaxAttempts: 3, BackoffInitial: pbtime.Dur(2000), BackoffMax: pbtime.Dur(60_000), BackoffFactor: 1.5, VisibilityTimeout: pbtime.Dur(90_000),
		UniqueKey: "invoice-42", Labels: map[string]string{"tenant": "acme", "region": "eu"}}
	if j.String() != want.String() {
		t.Fatalf("got  %v\nwant %v", j, want)
	}
	for _, tc := range []struct {
		args any
		want string
	}{{nil, ""}, {[]byte("raw \x00"), "raw \x00"}, {json.RawMessage(`{"a":1}`), `{"a":1}`}, {"s", `"s"`}} {
		j, err := NewJob("k", tc.args)
		if err != nil || string(j.GetArgs()) != tc.want {
			t.Errorf("args %v: %q %v", tc.args, j.GetArgs(), err)
		}
	}
	if j, _ := NewJob("k", nil, After(1500*time.Microsecond)); j.GetDelayMs() != 2 || j.GetRunAtMs() != 0 {
		t.Fatalf("after: %v", j)
	}
	for name, opts := range map[string][]Option{
		"both":     {At(time.Now()), After(time.Second)},
		"negative": {After(-time.Second)},
	} {
		if _, err := NewJob("k", nil, opts...); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := NewJob("k", func() {}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "args") {
		t.Fatalf("unencodable args: %v", err)
	}
}

func TestSubmitAndReads(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := New(h.c)
	s, err := q.SubmitAfter(ctx, time.Minute, "email", map[string]string{"to": "a@b.c"}, UniqueKey("welcome-1"))
	if err != nil || s.GetId() != 1 || s.GetDuplicate() {
		t.Fatalf("submit: %v %v", s, err)
	}
	if r := h.f.submits[0].GetJobs()[0]; r.GetDelayMs() != 60_000 || r.GetKind() != "email" || string(r.GetArgs()) != `{"to":"a@b.c"}` {
		t.Fatalf("sent %v", r)
	}
	if s, err := q.Submit(ctx, "email", nil, UniqueKey("welcome-1")); err != nil || s.GetId() != 1 || !s.GetDuplicate() {
		t.Fatalf("duplicate: %v %v", s, err)
	}
	if _, err := q.SubmitAt(ctx, time.Unix(2_000_000_000, 0), "report", nil); err != nil || h.f.submits[2].GetJobs()[0].GetRunAtMs() != 2_000_000_000_000 {
		t.Fatalf("submit at: %v %v", err, h.f.submits[2])
	}

	// Get; a missing job matches ErrJobNotFound and ErrNotFound.
	if j, err := q.Get(ctx, 1); err != nil || j.GetKind() != "email" {
		t.Fatalf("get: %v %v", j, err)
	}
	if _, err := q.Get(ctx, 99, client.Stale()); !errors.Is(err, client.ErrJobNotFound) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}

	// List pages through everything, newest first.
	for range 5 {
		if _, err := q.Submit(ctx, "bulk", nil); err != nil {
			t.Fatal(err)
		}
	}
	var ids []uint64
	for j, err := range q.List(ctx, Filter{Kind: "bulk", PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.GetId())
	}
	if len(ids) != 5 || ids[0] != 7 || ids[4] != 3 {
		t.Fatalf("listed %v", ids)
	}
	for j, err := range q.List(ctx, Filter{PageSize: 2}) { // stop early
		if err != nil || j.GetId() != 7 {
			t.Fatalf("first %v %v", j, err)
		}
		break
	}

	// Cancel is idempotent; a missing job is ErrJobNotFound.
	if r, err := q.Cancel(ctx, 4); err != nil || r.GetDuplicate() || r.GetJob().GetState() != coordv1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("cancel: %v %v", r, err)
	}
	if r, err := q.Cancel(ctx, 4); err != nil || !r.GetDuplicate() {
		t.Fatalf("cancel again: %v %v", r, err)
	}
	if _, err := q.Cancel(ctx, 99); !errors.Is(err, client.ErrJobNotFound) {
		t.Fatalf("cancel missing: %v", err)
	}
	if st, err := q.Stats(ctx, "billing"); err != nil || st.GetQueues()[0].GetAvailable() != 3 {
		t.Fatalf("stats: %v %v", st, err)
	}
}

// A submit without a unique key gets a generated one, so that after an
// unknown outcome (the leader applied the jobs, then lost leadership before
// answering) the SDK retries it with the same keys and each job exists
// once; SubmitBatch sets the keys in the caller's jobs.
func TestSubmitWithoutKeyRetriedAfterUnknownOutcome(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The harness's client runs on the fake clock; the retry's backoff
	// needs real time.
	c, err := client.New(ctx, h.c.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := New(c)
	h.f.mu.Lock()
	h.f.lostAfterApply = 1
	h.f.mu.Unlock()
	s, err := q.Submit(ctx, "email", nil)
	if err != nil || s.GetId() != 1 || !s.GetDuplicate() {
		t.Fatalf("submit: %v %v", s, err)
	}
	jobs := []*coordv1.NewJob{{Kind: "a"}, {Kind: "b", UniqueKey: "mine"}}
	h.f.mu.Lock()
	h.f.lostAfterApply = 1
	h.f.mu.Unlock()
	out, err := q.SubmitBatch(ctx, jobs)
	if err != nil || len(out) != 2 || !out[0].GetDuplicate() || out[0].GetId() != 2 || out[1].GetId() != 3 {
		t.Fatalf("batch: %v %v", out, err)
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if len(h.f.jobs) != 3 || len(h.f.submits) != 4 {
		t.Fatalf("%d jobs after %d submits, want 3 after 4", len(h.f.jobs), len(h.f.submits))
	}
	k := h.f.submits[0].GetJobs()[0].GetUniqueKey()
	if !strings.HasPrefix(k, AutoKeyPrefix) || h.f.submits[1].GetJobs()[0].GetUniqueKey() != k {
		t.Fatalf("keys %q, %q", k, h.f.submits[1].GetJobs()[0].GetUniqueKey())
	}
	if !strings.HasPrefix(jobs[0].GetUniqueKey(), AutoKeyPrefix) || jobs[1].GetUniqueKey() != "mine" ||
		h.f.submits[3].GetJobs()[0].GetUniqueKey() != jobs[0].GetUniqueKey() {
		t.Fatalf("batch keys %q %q", jobs[0].GetUniqueKey(), jobs[1].GetUniqueKey())
	}
}

// A batch larger than MaxBatch goes in calls of MaxBatch, in order; a
// refused call stops there and the answer holds the calls that succeeded.
func TestSubmitBatchSplits(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := New(h.c)
	jobs := make([]*coordv1.NewJob, 2500)
	for i := range jobs {
		jobs[i], _ = NewJob("k", i)
	}
	out, err := q.SubmitBatch(ctx, jobs)
	if err != nil || len(out) != 2500 || out[0].GetId() != 1 || out[2499].GetId() != 2500 {
		t.Fatalf("%d submitted: %v", len(out), err)
	}
	if n := len(h.f.submits); n != 3 || len(h.f.submits[0].GetJobs()) != 1000 || len(h.f.submits[2].GetJobs()) != 500 ||
		string(h.f.submits[1].GetJobs()[0].GetArgs()) != "1000" {
		t.Fatalf("%d calls", n)
	}

	// The second call is refused: the first call's jobs are in, the error
	// names the range.
	calls := 0
	h.f.onSubmit = func(*coordv1.QueueSubmitRequest) error {
		if calls++; calls == 2 {
			return status.Error(codes.InvalidArgument, "jobs[7].kind: empty")
		}
		return nil
	}
	out, err = q.SubmitBatch(ctx, jobs)
	if !errors.Is(err, client.ErrInvalidArgument) || len(out) != 1000 || !strings.Contains(err.Error(), "jobs[1000:2000] of 2500") {
		t.Fatalf("%d submitted: %v", len(out), err)
	}
	if _, err := q.SubmitBatch(ctx, nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("empty batch: %v", err)
	}
}
