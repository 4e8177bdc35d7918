//go:build faults

package faults

import (
	"context"
	"testing"
	"time"

	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Scenario 23 (issue 29): a paused queue hands out nothing through a
// leader failover. Three worker processes long-poll queue q; q is paused,
// then 200 jobs are submitted (accepted); the leader is killed with kill -9
// and restarted; the workers' long polls move to the new leader. For 3 s
// after the pause and again for 3 s after the failover no job starts, and
// the stats (the leader's) read the same pause (who, when) and 200
// available, 0 running. After Resume every job runs once, none started before the
// resume call, and all nodes end at one digest.
func TestPausedQueueThroughFailover(t *testing.T) {
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const q, n = "paused", 200
	sdk := r.sdk(ctx, "operator")
	raw := sdk.Queue()
	p, err := raw.Pause(ctx, &coordv1.QueuePauseRequest{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	pausedAt := p.GetPause().GetPausedAtMs()
	l := r.qworkers(q, "--concurrency", "8", "--hold", "10ms")
	qc := queue.New(sdk)
	want := submitAll(t, ctx, qc, newJobs(t, q, "p", n, nil, queue.VisibilityTimeout(3*time.Second)))
	if len(want) != n {
		t.Fatalf("%d jobs submitted, want %d", len(want), n)
	}
	idle := func(when string) {
		t.Helper()
		// The workers keep long-polling: nothing may start meanwhile.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if s := l.refresh(t).starts; len(s) > 0 {
				t.Fatalf("%s: job %d started on %s although %s is paused", when, s[0].Job, s[0].Client, q)
			}
			time.Sleep(100 * time.Millisecond)
		}
		s, err := stats(ctx, qc, q)
		if err != nil {
			t.Fatal(err)
		}
		if !s.GetPaused() || s.GetPausedAtMs() != pausedAt || s.GetAvailable() != n || s.GetRunning() != 0 {
			t.Fatalf("%s: stats %v; want paused since %d, %d available, 0 running", when, s, pausedAt, n)
		}
		t.Logf("%s: 0 jobs started in 3 s; %d available, paused by %q since %d", when, s.GetAvailable(), s.GetPausedBy(), pausedAt)
	}
	idle("paused, before the failover")
	leader, took := r.failover("probe-paused")
	t.Logf("kill -9 of the leader %s; the cluster served again after %s", leader.ID, took.Round(time.Millisecond))
	idle("after the failover")

	resumeAt := time.Now()
	if rs, err := raw.Resume(ctx, &coordv1.QueueResumeRequest{Queue: q}); err != nil || !rs.GetWasPaused() {
		t.Fatalf("resume: %v %v", rs, err)
	}
	s := r.awaitAllFinal(ctx, qc, q, n, 60*time.Second)
	r.stopClients()
	for _, st := range l.refresh(t).starts {
		if st.AtNs < resumeAt.UnixNano() {
			t.Errorf("job %d started at %d, before the resume (%d)", st.Job, st.AtNs, resumeAt.UnixNano())
		}
	}
	t.Logf("after the resume: %d succeeded; first start %s after the resume call", s.GetSucceeded(), time.Duration(firstStart(l)-resumeAt.UnixNano()))
	r.checkEffects(l, want)
	r.check()
}

// firstStart is the earliest handler start in l (Unix ns; 0 without any).
func firstStart(l *jobLog) int64 {
	first := int64(0)
	for _, st := range l.starts {
		if first == 0 || st.AtNs < first {
			first = st.AtNs
		}
	}
	return first
}
