//go:build faults

package faults

import (
	"context"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Queue limits (docs/jobs.md "Queue limits") with real worker processes.

// attemptSpans are the attempts of the jobs as the cluster recorded them:
// [started_at, finished_at] in calendar ms, with their outcomes.
type attemptSpan struct {
	start, end int64
	outcome    coordv1.AttemptOutcome
	worker     string
}

func attemptSpans(t *testing.T, ctx context.Context, qc *queue.Client, ids map[uint64]int64) []attemptSpan {
	t.Helper()
	var out []attemptSpan
	for id := range ids {
		j, err := qc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range j.GetAttemptLog() {
			out = append(out, attemptSpan{a.GetStartedAt().AsTime().UnixMilli(), a.GetFinishedAt().AsTime().UnixMilli(), a.GetOutcome(), a.GetWorkerId()})
		}
	}
	return out
}

// maxOverlap is the most attempts running at once: a sweep over the
// spans' starts and ends, an end at the same ms before a start (a fetch
// stamped at a completion's ms was applied after it, or it would have
// counted that attempt).
func maxOverlap(spans []attemptSpan) int {
	type ev struct {
		at    int64
		delta int
	}
	var evs []ev
	for _, s := range spans {
		evs = append(evs, ev{s.start, 1}, ev{s.end, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta
	})
	n, most := 0, 0
	for _, e := range evs {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// Scenario: a concurrency limit of 4 on a queue fetched by three worker
// processes of 8 handler slots each, one of them frozen (SIGSTOP) past the
// visibility timeout while it runs jobs. Every job succeeds; from the
// attempts' start and end times (the cluster's records, a lapsed attempt
// ending at its deadline) at most 4 ever ran at once, and 4 did (the
// limit was the bound, not the load); the frozen worker's attempts lapsed
// and its places went to the others only then.
func TestQueueConcurrencyLimitAcrossWorkers(t *testing.T) {
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const vt, q, limit = 2 * time.Second, "limited", 4
	sdk := r.sdk(ctx, "admin")
	if _, err := sdk.Queue().SetLimits(ctx, &coordv1.QueueSetLimitsRequest{Queue: q, Limits: &coordv1.QueueLimits{Concurrency: limit}}); err != nil {
		t.Fatal(err)
	}
	l := newJobLog(r.dir)
	for _, w := range []string{"w1", "w2", "w3"} {
		r.qworker(w, q, "--concurrency", "8", "--hold", "300ms")
	}
	r.awaitUp(l, "w1", "w2", "w3")
	qc := queue.New(r.sdk(ctx, "submitter"))
	want := submitAll(t, ctx, qc, newJobs(t, q, "lim", cycles(100, 400), nil, queue.VisibilityTimeout(vt), queue.Backoff(100*time.Millisecond, time.Second, 2)))

	// Freeze w3 while it runs a job (a start in the last 200 ms of a 300 ms hold).
	for running := false; !running; time.Sleep(10 * time.Millisecond) {
		l.refresh(t)
		for i := len(l.starts) - 1; i >= 0; i-- {
			if st := l.starts[i]; st.Client == "w3" {
				running = st.AtNs > time.Now().Add(-200*time.Millisecond).UnixNano()
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("w3 never ran a job to freeze")
		}
	}
	w3 := r.clients["w3"]
	_ = w3.Process.Signal(syscall.SIGSTOP)
	frozen := time.Now()
	r.await("running back at the limit without w3", 20*time.Second, func() bool {
		s, err := stats(ctx, qc, q)
		return err == nil && s.GetRunning() == limit && s.GetConcurrencyLimit() == limit && time.Since(frozen) > vt+500*time.Millisecond
	})
	_ = w3.Process.Signal(syscall.SIGCONT)
	t.Logf("w3 frozen for %s (visibility timeout %s)", time.Since(frozen).Round(time.Millisecond), vt)
	r.await("every job succeeded", 2*time.Minute, func() bool {
		s, err := stats(ctx, qc, q)
		return err == nil && s.GetSucceeded() == uint64(len(want))
	})
	r.stopClients()
	spans := attemptSpans(t, ctx, qc, want)
	lapsed := 0
	for _, s := range spans {
		if s.outcome == coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED {
			lapsed++
			if s.worker != "w3" {
				t.Errorf("an attempt of %s lapsed; only the frozen w3's should", s.worker)
			}
		}
	}
	most := maxOverlap(spans)
	t.Logf("%d jobs, %d attempts (%d lapsed, the frozen worker's); at most %d running at once (limit %d)", len(want), len(spans), lapsed, most, limit)
	if most > limit {
		t.Errorf("%d attempts ran at once; the limit is %d", most, limit)
	}
	if most < limit {
		t.Errorf("at most %d attempts ran at once: the limit of %d was never reached, so the test proves nothing", most, limit)
	}
	if lapsed == 0 {
		t.Error("no attempt of the frozen worker lapsed")
	}
	r.checkEffects(l, want)
}

// Scenario: a rate limit of 20 attempts a second (burst 3: a bucket of
// one token would lose the time each hand-out takes to commit, ~5 ms on a
// loaded host, since a full bucket does not fill further) on a queue
// with more than enough jobs and worker slots: the attempts started in a
// span of 5 s (30 s in the full profile) after the first are the rate
// within 10 %.
func TestQueueRateLimitHolds(t *testing.T) {
	r := newRun(t)
	secs := cycles(5, 30)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second+2*time.Minute)
	defer cancel()
	const q, rate = "paced", 20
	sdk := r.sdk(ctx, "admin")
	if _, err := sdk.Queue().SetLimits(ctx, &coordv1.QueueSetLimitsRequest{Queue: q, Limits: &coordv1.QueueLimits{Rate: rate, Burst: 3}}); err != nil {
		t.Fatal(err)
	}
	qc := queue.New(r.sdk(ctx, "submitter"))
	want := submitAll(t, ctx, qc, newJobs(t, q, "rate", rate*secs*2, nil))
	l := newJobLog(r.dir)
	for _, w := range []string{"w1", "w2", "w3"} {
		r.qworker(w, q, "--concurrency", "16")
	}
	r.awaitUp(l, "w1", "w2", "w3")
	r.await("the span has passed", time.Duration(secs)*time.Second+time.Minute, func() bool {
		s, err := stats(ctx, qc, q)
		return err == nil && s.GetSucceeded() >= uint64(rate*secs+2*rate)
	})
	r.stopClients()
	var starts []int64
	for _, s := range attemptSpans(t, ctx, qc, want) {
		if s.start > 0 {
			starts = append(starts, s.start)
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	first := starts[0]
	n := 0
	for _, s := range starts {
		if s < first+int64(secs)*1000 {
			n++
		}
	}
	wantN := float64(rate * secs)
	t.Logf("%d attempts started in the %d s after the first (rate %d/s: %.0f)", n, secs, rate, wantN)
	if float64(n) > wantN*1.1 || float64(n) < wantN*0.9 {
		t.Errorf("%d attempts started in %d s; the rate limit of %d/s allows %.0f ± 10 %%", n, secs, rate, wantN)
	}
}
