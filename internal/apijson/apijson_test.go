package apijson

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// A job as a person writes it: args an object (big integers kept as
// written), a duration in Go's form, a time with an offset, a short enum.
func TestRequestAsWritten(t *testing.T) {
	var req coordv1.QueueSubmitRequest
	err := Unmarshal([]byte(`{"jobs":[{"kind":"k","args":{"invoice": 44, "id": 12345678901234567890},
		"visibility_timeout":"1m30s","run_at":"2026-09-25T00:05:00-03:00"}]}`), &req)
	if err != nil {
		t.Fatal(err)
	}
	j := req.GetJobs()[0]
	if string(j.GetArgs()) != `{"invoice":44,"id":12345678901234567890}` || j.GetVisibilityTimeoutMs() != 90_000 ||
		pbtime.Time(j.GetRunAt()).UTC().Format("2006-01-02T15:04") != "2026-09-25T03:05" {
		t.Fatalf("%v", j)
	}
	var list coordv1.WatchRequest
	if err := Unmarshal([]byte(`{"families":["queue_job","LEASE","WATCH_FAMILY_WINDOW"],"job_states":["dead"]}`), &list); err != nil {
		t.Fatal(err)
	}
	if got := list.GetFamilies(); len(got) != 3 || got[0] != coordv1.WatchFamily_WATCH_FAMILY_QUEUE_JOB ||
		got[1] != coordv1.WatchFamily_WATCH_FAMILY_LEASE || list.GetJobStates()[0] != coordv1.JobState_JOB_STATE_DEAD {
		t.Fatalf("%v", &list)
	}
}

// Answers embed JSON payloads, write short enum names, RFC 3339 times and
// "s" durations; empty bytes are null, bytes that are not JSON a string.
func TestAnswerAsRead(t *testing.T) {
	b, err := Marshal(&coordv1.QueueJob{Id: 7, Args: []byte(`{"a": [1, 2]}`), State: coordv1.JobState_JOB_STATE_DEAD,
		RunAt: pbtime.At(1_790_000_000_000), VisibilityTimeout: pbtime.Dur(30_000),
		AttemptLog: []*coordv1.JobAttempt{{Result: []byte("not json"), Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED}}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID         string          `json:"id"`
		Args       json.RawMessage `json:"args"`
		State      string          `json:"state"`
		RunAt      string          `json:"run_at"`
		Finished   any             `json:"finished_at"`
		Visibility string          `json:"visibility_timeout"`
		Log        []struct {
			Result  any    `json:"result"`
			Outcome string `json:"outcome"`
		} `json:"attempt_log"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "7" || string(got.Args) != `{"a": [1, 2]}` || got.State != "DEAD" || got.RunAt != "2026-09-21T14:13:20Z" ||
		got.Finished != nil || got.Visibility != "30s" || got.Log[0].Result != "not json" || got.Log[0].Outcome != "FAILED" {
		t.Fatalf("%s", b)
	}
	if !strings.HasPrefix(string(b), `{"id":"7",`) {
		t.Fatalf("field order lost: %s", b)
	}
}

// Every refusal names its field.
func TestRefusalsNameTheField(t *testing.T) {
	for body, field := range map[string]string{
		`{"jobs":[{"kind":"k","delay":"soon"}]}`:   "delay",
		`{"jobs":[{"kind":"k","delay":60000}]}`:    "delay",
		`{"jobs":[{"kind":"k","run_at":"today"}]}`: "run_at",
		`{"jobs":[{"kind":"k","run_at":1}]}`:       "run_at",
		`{"jobs":[{"kind":"k","state":"nope"}]}`:   "state",
		`{"jobs":[{"kind":"k","nope":1}]}`:         "nope",
	} {
		var req coordv1.QueueSubmitRequest
		if err := Unmarshal([]byte(body), &req); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", body, err, field)
		}
	}
}

// Whatever the input, decoding does not panic, and what decodes survives
// a round trip through the answer form.
func FuzzRoundTrip(f *testing.F) {
	f.Add(`{"jobs":[{"kind":"k","args":{"a":1},"delay":"1m","run_at":"2026-01-01T00:00:00Z"}]}`)
	f.Add(`{"jobs":[{"args":"x"},{"args":null},{"args":[1,{"b":"\u00e9"}]}]}`)
	f.Add(`{"jobs":[{"labels":{"a":"b"},"visibility_timeout":"0.5s"}]}`)
	f.Add(`{"jobs":"x"}`)
	f.Fuzz(func(t *testing.T, body string) {
		var req coordv1.QueueSubmitRequest
		if Unmarshal([]byte(body), &req) != nil {
			return
		}
		b, err := Marshal(&req)
		if err != nil {
			t.Fatalf("%q decoded but does not encode: %v", body, err)
		}
		var again coordv1.QueueSubmitRequest
		if err := Unmarshal(b, &again); err != nil {
			t.Fatalf("%s does not decode again: %v", b, err)
		}
		b2, err := Marshal(&again)
		if err != nil || string(b2) != string(b) {
			t.Fatalf("round trip: %s then %s (%v)", b, b2, err)
		}
	})
}

// TestFirstCallsAtOnce: a message's first decodes, at once on several
// goroutines, all map its JSON-valued bytes (needsMapping's cache is
// filled only with finished answers).
func TestFirstCallsAtOnce(t *testing.T) {
	for range 300 {
		mappingCache.Clear()
		start := make(chan struct{})
		errs := make(chan error, 8)
		for range cap(errs) {
			go func() {
				<-start
				var req coordv1.FencedCommitRequest
				errs <- Unmarshal([]byte(`{"resource":"r","token":"job:1:1","payload":{"n":1}}`), &req)
			}()
		}
		close(start)
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("a first decode at once with others: %v", err)
			}
		}
	}
}

// BenchmarkMarshalLease is the answer of an Acquire, the HTTP path's most
// frequent one (docs/benchmarks.md: the mapping pass was most of its CPU).
func BenchmarkMarshalLease(b *testing.B) {
	m := &coordv1.AcquireResponse{Acquired: true, Lease: &coordv1.Lease{Name: "daily-close", Owner: "host-a", Generation: 7,
		Ttl: pbtime.Dur(30_000), ExpiresIn: pbtime.Dur(29_000), Held: pbtime.Dur(1000), RenewedAgo: pbtime.Dur(0),
		AcquiredAt: pbtime.At(1_790_000_000_000), RenewedAt: pbtime.At(1_790_000_000_000), ExpiresAt: pbtime.At(1_790_000_030_000),
		Value: []byte(`{"addr":"10.0.0.1:8080"}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}
