package delivery

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/clock"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/webhook"
)

// fakeQueue hands out the jobs pushed to it and records what the
// deliverer reports.
type fakeQueue struct {
	jobs      chan *coordv1.ClaimedJob
	completes chan *coordv1.JobCompletion
	fails     chan *coordv1.JobFailure
	refuseHB  atomic.Pointer[string] // a reason: heartbeats are refused with it
	beats     atomic.Int32
}

func newFakeQueue() *fakeQueue {
	return &fakeQueue{jobs: make(chan *coordv1.ClaimedJob, 16), completes: make(chan *coordv1.JobCompletion, 16), fails: make(chan *coordv1.JobFailure, 16)}
}

func (f *fakeQueue) Fetch(ctx context.Context, in *coordv1.QueueFetchRequest, _ ...grpc.CallOption) (*coordv1.QueueFetchResponse, error) {
	if !in.GetTargeted() || len(in.GetQueues()) > 0 || in.GetMax() == 0 {
		return nil, context.Canceled
	}
	select {
	case j := <-f.jobs:
		return &coordv1.QueueFetchResponse{Jobs: []*coordv1.ClaimedJob{j}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeQueue) Heartbeat(_ context.Context, in *coordv1.QueueHeartbeatRequest, _ ...grpc.CallOption) (*coordv1.QueueHeartbeatResponse, error) {
	f.beats.Add(1)
	r := &coordv1.HeartbeatResult{JobId: in.GetAttempts()[0].GetJobId(), Attempt: in.GetAttempts()[0].GetAttempt()}
	if reason := f.refuseHB.Load(); reason != nil {
		r.Error = &coordv1.JobItemError{Reason: *reason}
	}
	return &coordv1.QueueHeartbeatResponse{Results: []*coordv1.HeartbeatResult{r}}, nil
}

func (f *fakeQueue) Complete(_ context.Context, in *coordv1.QueueCompleteRequest, _ ...grpc.CallOption) (*coordv1.QueueCompleteResponse, error) {
	// The reporter groups outcomes: one result per item, each item seen.
	out := &coordv1.QueueCompleteResponse{}
	for _, c := range in.GetCompletions() {
		f.completes <- c
		out.Results = append(out.Results, &coordv1.CompleteResult{})
	}
	return out, nil
}

func (f *fakeQueue) Fail(_ context.Context, in *coordv1.QueueFailRequest, _ ...grpc.CallOption) (*coordv1.QueueFailResponse, error) {
	out := &coordv1.QueueFailResponse{}
	for _, fl := range in.GetFailures() {
		f.fails <- fl
		out.Results = append(out.Results, &coordv1.FailResult{})
	}
	return out, nil
}

var testSecret = webhook.NewSecret()

// run starts a deliverer on q allowing 127.0.0.1, stopped at the test's end.
func run(t *testing.T, q *fakeQueue, mod func(*Options)) {
	t.Helper()
	allow, err := ParseAllow([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Allow: allow, Secrets: Secrets{"billing": {testSecret}}}
	if mod != nil {
		mod(&o)
	}
	d := New(q, "coordd-delivery/n1", o, clock.Real{}, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func claimed(id uint64, n uint32, url string, mod func(*coordv1.QueueJob)) *coordv1.ClaimedJob {
	j := &coordv1.QueueJob{Id: id, Queue: "billing", Kind: "charge", Args: []byte(`{"invoice":44}`), VisibilityTimeout: durationpb.New(30 * time.Second),
		Target: &coordv1.HttpTarget{Url: url, Method: "POST"}}
	if mod != nil {
		mod(j)
	}
	return &coordv1.ClaimedJob{Job: j, Attempt: &coordv1.JobAttempt{Number: n, Token: "job:" + itoa(id) + ":" + itoa(uint64(n))}}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		panic("unreachable")
	}
}

// TestDeliverySignedRequest: a delivery carries the args as its JSON body,
// the attempt's headers and a Standard Webhooks signature; a 2xx with a
// JSON body completes the attempt with that body as the result.
func TestDeliverySignedRequest(t *testing.T) {
	type seen struct {
		h    http.Header
		body []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Clone(), b}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"charged":true}`)
	}))
	defer srv.Close()
	q := newFakeQueue()
	run(t, q, nil)
	q.jobs <- claimed(7, 2, srv.URL+"/jobs/charge", func(j *coordv1.QueueJob) {
		j.Target.Secret = "billing"
		j.Target.Headers = map[string]string{"X-Tenant": "acme"}
		j.Labels = map[string]string{"coordd.window": "2026-12-01", "coordd.occurrence_ms": "1764547200000"}
	})
	s := wait(t, got, "request")
	if string(s.body) != `{"invoice":44}` {
		t.Errorf("body %q, want the args", s.body)
	}
	for k, want := range map[string]string{HeaderJobID: "7", HeaderAttempt: "2", HeaderToken: "job:7:2",
		HeaderIdempotency: "coordd-job-7", HeaderWindow: "2026-12-01", HeaderOccurrence: "2025-12-01T00:00:00Z",
		"X-Tenant": "acme", "Content-Type": "application/json", webhook.HeaderID: "job_7"} {
		if v := s.h.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, s.h.Get(HeaderDeadline)); err != nil {
		t.Errorf("Coordd-Deadline %q: %v", s.h.Get(HeaderDeadline), err)
	}
	if err := (&webhook.Verifier{Secrets: []webhook.Secret{testSecret}}).Verify(s.h, s.body); err != nil {
		t.Errorf("signature: %v", err)
	}
	c := wait(t, q.completes, "completion")
	if c.GetJobId() != 7 || c.GetAttempt() != 2 || string(c.GetResult()) != `{"charged":true}` {
		t.Errorf("completion %v", c)
	}
}

// TestDeliveryOutcomes: how a response becomes Complete or Fail.
func TestDeliveryOutcomes(t *testing.T) {
	var mu sync.Mutex
	answer := func(w http.ResponseWriter, r *http.Request) {}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		a := answer
		mu.Unlock()
		a(w, r)
	}))
	defer srv.Close()
	q := newFakeQueue()
	run(t, q, func(o *Options) { o.MaxResponseBytes = 1024 })
	for i, tc := range []struct {
		name      string
		answer    func(w http.ResponseWriter, r *http.Request)
		mod       func(*coordv1.QueueJob)
		fail      bool
		retryable bool
		after     time.Duration
		text      string // in the error, or the result
	}{
		{"503 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(503)
			_, _ = io.WriteString(w, "overloaded")
		}, nil, true, true, 7 * time.Second, "HTTP 503"},
		{"429", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(429) }, nil, true, true, 0, "HTTP 429"},
		{"400 is final", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, "bad invoice")
		}, nil, true, false, 0, "bad invoice"},
		{"409 retryable by the target", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(409) },
			func(j *coordv1.QueueJob) { j.Target.RetryableStatus = []uint32{409} }, true, true, 0, "HTTP 409"},
		{"a timeout", func(_ http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // the server notices a closed connection once the body is read
			<-r.Context().Done()
		},
			func(j *coordv1.QueueJob) { j.Target.Timeout = durationpb.New(50 * time.Millisecond) }, true, true, 0, "delivery:"},
		{"200 that is not JSON", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }, nil, false, false, 0, `"excerpt":"ok"`},
		{"a body over the bound is cut", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `["`+strings.Repeat("x", 5000)+`"]`)
		}, nil, false, false, 0, `"cut":true`},
	} {
		// Every attempt reports its status (none for the timeout) and
		// latency (the timeout's at least its 50 ms).
		status, minLatency := []uint32{503, 429, 400, 409, 0, 200, 200}[i], time.Duration(0)
		if status == 0 {
			minLatency = 50 * time.Millisecond
		}
		mu.Lock()
		answer = tc.answer
		mu.Unlock()
		q.jobs <- claimed(uint64(i+1), 1, srv.URL, tc.mod)
		if tc.fail {
			f := wait(t, q.fails, tc.name+": failure")
			if f.GetRetryable() != tc.retryable || f.GetRetryAfter().AsDuration() != tc.after || !strings.Contains(f.GetError(), tc.text) {
				t.Errorf("%s: failure %v, want retryable %v, retry_after %v, error with %q", tc.name, f, tc.retryable, tc.after, tc.text)
			}
			if f.GetDeliveryStatus() != status || f.GetDeliveryLatency() == nil || f.GetDeliveryLatency().AsDuration() < minLatency {
				t.Errorf("%s: delivery status %d, latency %v; want %d, at least %v", tc.name, f.GetDeliveryStatus(), f.GetDeliveryLatency(), status, minLatency)
			}
			continue
		}
		c := wait(t, q.completes, tc.name+": completion")
		if !strings.Contains(string(c.GetResult()), tc.text) || !json.Valid(c.GetResult()) {
			t.Errorf("%s: result %q, want JSON with %q", tc.name, c.GetResult(), tc.text)
		}
		if c.GetDeliveryStatus() != status || c.GetDeliveryLatency() == nil {
			t.Errorf("%s: delivery status %d, latency %v; want %d and a latency", tc.name, c.GetDeliveryStatus(), c.GetDeliveryLatency(), status)
		}
	}
}

// TestDeliveryRefusesWhatTheAllowListDoesNot: a target outside
// --delivery-allow is never sent to; the attempt fails for good, naming
// the flag.
func TestDeliveryRefusesWhatTheAllowListDoesNot(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	q := newFakeQueue()
	run(t, q, func(o *Options) { o.Allow, _ = ParseAllow([]string{"10.0.0.0/8"}) })
	q.jobs <- claimed(1, 1, srv.URL, nil)
	f := wait(t, q.fails, "failure")
	if f.GetRetryable() || !strings.Contains(f.GetError(), AllowFlag) || hits.Load() != 0 {
		t.Fatalf("failure %v after %d requests, want a final one naming %s and none sent", f, hits.Load(), AllowFlag)
	}
	if f.GetDeliveryStatus() != 0 || f.GetDeliveryLatency() != nil {
		t.Errorf("a request not sent reports status %d, latency %v", f.GetDeliveryStatus(), f.GetDeliveryLatency())
	}
}

// TestDeliveryStopsWhenTheAttemptEnds: a refused heartbeat (the job was
// cancelled, or the attempt lapsed) cuts the request; nothing is
// reported.
func TestDeliveryStopsWhenTheAttemptEnds(t *testing.T) {
	started, cut := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		close(started)
		<-r.Context().Done()
		close(cut)
	}))
	defer srv.Close()
	q := newFakeQueue()
	run(t, q, nil)
	q.jobs <- claimed(1, 1, srv.URL, func(j *coordv1.QueueJob) { j.VisibilityTimeout = durationpb.New(90 * time.Millisecond) }) // a beat every 30 ms
	wait(t, started, "request")
	reason := "JOB_CANCELLED"
	q.refuseHB.Store(&reason)
	wait(t, cut, "the request cut")
	select {
	case c := <-q.completes:
		t.Fatalf("reported a completion %v", c)
	case f := <-q.fails:
		t.Fatalf("reported a failure %v", f)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestDeliveryBoundsPerTarget: at most PerTarget requests to one target
// at once; redirects to another host are not followed.
func TestDeliveryBoundsPerTarget(t *testing.T) {
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		inFlight.Add(-1)
	}))
	defer srv.Close()
	q := newFakeQueue()
	run(t, q, func(o *Options) { o.PerTarget = 2 })
	for i := range 5 {
		q.jobs <- claimed(uint64(i+1), 1, srv.URL, nil)
	}
	deadline := time.Now().Add(10 * time.Second)
	for inFlight.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for range 5 {
		select {
		case <-q.completes:
		case f := <-q.fails:
			t.Fatalf("a delivery failed: %v", f)
		case <-time.After(10 * time.Second):
			t.Fatal("no completion within 10 s")
		}
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak of %d requests in flight to one target, want 2", p)
	}

	other := httptest.NewServer(http.RedirectHandler("http://localhost:1/elsewhere", http.StatusFound))
	defer other.Close()
	q.jobs <- claimed(9, 1, other.URL, nil)
	if f := wait(t, q.fails, "failure"); !strings.Contains(f.GetError(), "another host") || !f.GetRetryable() {
		t.Fatalf("redirect across hosts: %v", f)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{"": 0, "7": 7 * time.Second, "soon": 0, "-3": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second, "99999999999": maxRetryAfter} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestAllow(t *testing.T) {
	a, err := ParseAllow([]string{"billing.internal", "*.example.com", "127.0.0.1", "10.0.0.0/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{"billing.internal": true, "BILLING.internal": true, "a.example.com": true, "example.com": false,
		"127.0.0.1": true, "127.0.0.2": false, "10.9.8.7": true, "::1": true, "[::1]": true, "localhost": false, "evil.com": false} {
		if err := a.Host(host); (err == nil) != want {
			t.Errorf("Host(%q) = %v, want allowed %v", host, err, want)
		}
	}
	empty, _ := ParseAllow(nil)
	if err := empty.Host("127.0.0.1"); err == nil || !strings.Contains(err.Error(), AllowFlag) {
		t.Errorf("an empty list: %v, want a refusal naming %s", err, AllowFlag)
	}
	for _, bad := range []string{"*.", "a*b", "10.0.0.0/99", "http://x"} {
		if _, err := ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
	for _, u := range []string{"ftp://127.0.0.1/", "http://user:pw@127.0.0.1/", "http://127.0.0.1/#x", "http:///x"} {
		if _, err := a.ParseTargetURL(u); err == nil {
			t.Errorf("ParseTargetURL(%q) accepted", u)
		}
	}
}

// TestDeliveryVerifiesTLS: an https target's certificate must verify
// against the roots given (--delivery-ca); an unknown one fails the
// attempt (retryably: the operator may fix the roots).
func TestDeliveryVerifiesTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	untrusted := newFakeQueue()
	run(t, untrusted, nil)
	untrusted.jobs <- claimed(1, 1, srv.URL, nil)
	if f := wait(t, untrusted.fails, "failure"); !f.GetRetryable() || !strings.Contains(f.GetError(), "certificate") {
		t.Fatalf("an unknown certificate: %v", f)
	}
	trusted := newFakeQueue()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	run(t, trusted, func(o *Options) { o.RootCAs = pool })
	trusted.jobs <- claimed(2, 1, srv.URL, nil)
	if c := wait(t, trusted.completes, "completion"); c.GetJobId() != 2 {
		t.Fatalf("completion %v", c)
	}
}
