package main

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestHTTPBases(t *testing.T) {
	got, err := httpBases("127.0.0.1:7401, http://127.0.0.1:7411/,localhost:7421")
	want := []string{"http://127.0.0.1:7401", "http://127.0.0.1:7411", "http://localhost:7421"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("httpBases = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"", "127.0.0.1:7401,", "https://127.0.0.1:7401", "127.0.0.1", "http://127.0.0.1:7401/v1"} {
		if got, err := httpBases(bad); err == nil {
			t.Errorf("httpBases(%q) = %q, want an error", bad, got)
		}
	}
}

func TestOrderedByLeader(t *testing.T) {
	eps := []string{"a", "b", "c"}
	isLeader := func(ep string) bool { return ep == "b" }
	for first, want := range map[string][]string{"": {"a", "b", "c"}, "leader": {"b", "a", "c"}, "follower": {"a", "c", "b"}} {
		if got, err := ordered(eps, first, isLeader); err != nil || !slices.Equal(got, want) {
			t.Errorf("ordered(%q) = %q, %v; want %q", first, got, err, want)
		}
	}
	if _, err := ordered(eps, "leader", func(string) bool { return false }); err == nil {
		t.Error("no leader: want an error")
	}
}

func TestHTTPRoute(t *testing.T) {
	h, err := newHTTPAPI(config{httpEndpoints: []string{"x", "y", "z"}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		got = append(got, h.base())
	}
	if want := []string{"x", "y", "z", "x"}; !slices.Equal(got, want) {
		t.Errorf("round-robin: %q, want %q", got, want)
	}
	h.pin = true
	if h.base() != "x" || h.base() != "x" {
		t.Error("pinned: not the first endpoint")
	}
	if _, err := newHTTPAPI(config{}, 1); err == nil {
		t.Error("no HTTP endpoints: want an error")
	}
}

// A fetch answer in the API's JSON (uint64 ids as strings, RFC 3339 run_at,
// every field present) converts to the workers' jobs.
func TestHTTPFetchedJobs(t *testing.T) {
	body := `{"jobs":[{"job":{"id":"18446744073709551615","queue":"q","kind":"noop","args":null,"state":"RUNNING",
	  "run_at":"2026-12-01T23:04:20.123Z","max_attempts":3},"attempt":{"number":2,"deadline":"2026-12-01T23:09:20.123Z"}}]}`
	var f httpFetched
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		t.Fatal(err)
	}
	jobs, err := f.jobs()
	if err != nil {
		t.Fatal(err)
	}
	want := fetchedJob{id: 1<<64 - 1, attempt: 2, runAtMs: 1796166260123}
	if len(jobs) != 1 || jobs[0] != want {
		t.Fatalf("jobs %+v, want [%+v]", jobs, want)
	}
	f.Jobs[0].Job.ID = "x"
	if _, err := f.jobs(); err == nil {
		t.Error("a job id that is no number: want an error")
	}
}
