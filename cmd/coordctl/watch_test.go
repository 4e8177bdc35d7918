package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/apijson"

	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// lease watch prints one line per change (or one JSON document per line),
// from an index, from now with the records first, until interrupted.
func TestLeaseWatch(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	ctlOK(t, eps, "lease", "acquire", "t/a", "--owner", "alice", "--ttl", "30s")
	ctlOK(t, eps, "lease", "acquire", "other", "--owner", "alice", "--ttl", "30s")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut, done := ctlAsync(ctx, eps, "lease", "watch", "t/", "--from", "1")
	out.waitFor(t, "the grant", 10*time.Second, func(s string) bool {
		return strings.Contains(s, " PUT t/a owner=alice generation=1 renewals=0 expires in ")
	})
	ctlOK(t, eps, "lease", "release", "t/a", "--owner", "alice", "--generation", "1")
	out.waitFor(t, "the release", 10*time.Second, func(s string) bool {
		return strings.Contains(s, " PUT t/a owner=alice generation=1 renewals=0 released\n")
	})
	cancel()
	if code := waitExit(t, done, 10*time.Second); code != exitOK || strings.Contains(out.String(), "other") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}

	// JSON: one WatchEvent per line; --count ends it.
	got := ctlOK(t, eps, "-o", "json", "lease", "watch", "t/", "--from", "1", "--count", "2")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 2 {
		t.Fatalf("json lines: %q", got)
	}
	for i, l := range lines {
		e := &coordv1.WatchEvent{}
		if err := apijson.Unmarshal([]byte(l), e); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if e.GetKey() != "t/a" || e.GetKind() != coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT || e.GetIndex() == 0 ||
			e.GetLease().GetReleased() != (i == 1) {
			t.Fatalf("line %d: %v", i, e)
		}
	}

	// --initial: the records as they are now, then the changes.
	ctlOK(t, eps, "lease", "acquire", "t/b", "--owner", "bob", "--ttl", "30s")
	got = ctlOK(t, eps, "lease", "watch", "t/", "--initial", "--count", "2")
	if !strings.Contains(got, " EXISTING t/a owner=alice generation=1 renewals=0 released\n") ||
		!strings.Contains(got, " EXISTING t/b owner=bob generation=1 ") {
		t.Fatalf("initial:\n%s", got)
	}

	// Usage and a start the node no longer holds is not it.
	if r := ctl(t, eps, "lease", "watch", "t/", "--initial", "--from", "3"); r.code != exitError ||
		!strings.Contains(r.errOut, "--initial reads the records now") {
		t.Fatalf("--initial --from: exit %d %s", r.code, r.errOut)
	}
}

// A start no node holds is WATCH_INDEX_COMPACTED, with what to do.
func TestLeaseWatchCompacted(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.Node.Watch.Events = 4 }))
	eps := c.Endpoints()
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		ctlOK(t, eps, "lease", "acquire", "t/"+n, "--owner", "o", "--ttl", "30s")
	}
	r := ctl(t, eps, "lease", "watch", "t/", "--from", "1")
	if r.code != exitError || !strings.Contains(r.errOut, "WATCH_INDEX_COMPACTED") || !strings.Contains(r.errOut, "--initial") {
		t.Fatalf("exit %d\n%s", r.code, r.errOut)
	}
}

// job watch prints one line per change, and an attempt's error once, on
// the change that recorded it: its first line (a panic's stack is one
// line per frame), cut, with how many lines were left out.
func TestJobWatchPrintsEachErrorOnce(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, output: "table", jobErrors: printedErrors{}}
	stack := "panic: smtp: 421 too many connections " + strings.Repeat("x", 200) +
		"\n\ngoroutine 7 [running]:\nmain.sendInvoice(...)\n\t/src/main.go:42 +0x1d"
	failed := &coordv1.JobAttempt{Number: 1, Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED, Error: stack}
	job := func(state coordv1.JobState, attempts uint32, log ...*coordv1.JobAttempt) *coordv1.WatchEvent_QueueJob {
		return &coordv1.WatchEvent_QueueJob{QueueJob: &coordv1.QueueJob{Id: 17, Kind: "send-invoice", State: state, Attempts: attempts,
			AttemptLog: log}}
	}
	running := &coordv1.JobAttempt{Number: 2, Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING}
	lapsed := &coordv1.JobAttempt{Number: 2, Outcome: coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED, Error: "visibility timeout passed"}
	for i, r := range []*coordv1.WatchEvent_QueueJob{
		job(coordv1.JobState_JOB_STATE_RETRYABLE, 1, failed),
		job(coordv1.JobState_JOB_STATE_AVAILABLE, 1, failed),
		job(coordv1.JobState_JOB_STATE_RUNNING, 2, failed, running),
		job(coordv1.JobState_JOB_STATE_DEAD, 2, failed, lapsed),
	} {
		e := &coordv1.WatchEvent{Index: uint64(10 + i), Kind: coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT, Key: "billing/17", Record: r}
		if err := a.printEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	first := firstLine(stack, 120)
	want := `10.0 PUT billing/17 kind=send-invoice state=RETRYABLE attempts=1 error="` + first + `" (+4 lines: coordctl job get 17)
11.0 PUT billing/17 kind=send-invoice state=AVAILABLE attempts=1
12.0 PUT billing/17 kind=send-invoice state=RUNNING attempts=2
13.0 PUT billing/17 kind=send-invoice state=DEAD attempts=2 error="visibility timeout passed"
`
	if out.String() != want || len([]rune(first)) > 120 || !strings.HasPrefix(first, "panic: smtp: 421") {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
