//go:build faults

package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Scenario 24 (issue 29): a bulk retry of N dead jobs (short: 20,000;
// full: 100,000) completes in batches through a leader kill without
// losing or doubling a job. The jobs have max_attempts 1 and are failed
// for good by a "failer" in the test process (Fetch and Fail through the
// worker API, 1,000 at a time), which keeps failing every job the bulk
// retry makes available again. The leader is killed with kill -9 while
// the operation is in progress. A lost retry would leave a job dead at
// attempt 1, a doubled one (a batch applied twice) would retry a job the
// failer had failed again, to attempt 3: at the end every job is dead at
// exactly attempt 2, the operation did N jobs and skipped none, and all
// nodes end at one digest.
func TestBulkRetryThroughLeaderKill(t *testing.T) {
	n := cycles(5_000, 100_000)
	r := newRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const q = "bulk"
	sdk := r.sdk(ctx, "operator")
	raw := sdk.Queue()
	qc := queue.New(sdk)

	// The failer: fails every job it fetches, for good.
	fctx, stopFailer := context.WithCancel(ctx)
	var failerDone sync.WaitGroup
	failerDone.Add(1)
	go func() {
		defer failerDone.Done()
		for fctx.Err() == nil {
			f, err := raw.Fetch(fctx, &coordv1.QueueFetchRequest{Queues: []string{q}, Max: 1000, WorkerId: "failer", Wait: durationpb.New(time.Second)})
			if err != nil || len(f.GetJobs()) == 0 {
				continue
			}
			fl := &coordv1.QueueFailRequest{WorkerId: "failer"}
			for _, j := range f.GetJobs() {
				fl.Failures = append(fl.Failures, &coordv1.JobFailure{JobId: j.GetJob().GetId(), Attempt: j.GetAttempt().GetNumber(), Error: "down"})
			}
			_, _ = raw.Fail(fctx, fl) // a failure lost to the failover lapses: the job dies as well
		}
	}()
	defer func() { stopFailer(); failerDone.Wait() }()

	start := time.Now()
	want := submitAll(t, ctx, qc, newJobs(t, q, "d", n, nil, queue.MaxAttempts(1), queue.VisibilityTimeout(3*time.Second)))
	if len(want) != n {
		t.Fatalf("%d jobs submitted, want %d", len(want), n)
	}
	r.awaitSlow(fmt.Sprintf("%d dead jobs", n), 3*time.Minute, func() bool {
		s, err := stats(ctx, qc, q)
		return err == nil && s.GetDead() == uint64(n)
	})
	t.Logf("%d dead jobs made in %s", n, time.Since(start).Round(time.Millisecond))

	bulkStart := time.Now()
	b, err := raw.Bulk(ctx, &coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_RETRY, RequestId: "retry-dead",
		Filter: &coordv1.JobFilter{Queue: q, State: coordv1.JobState_JOB_STATE_DEAD}})
	if err != nil || b.GetCount() != uint64(n) || b.GetOp().GetTotal() != uint64(n) {
		t.Fatalf("bulk: %v %v", b, err)
	}
	// Kill the leader once the operation has made progress, before its end.
	var atKill *coordv1.BulkOp
	for atKill == nil {
		g, err := raw.GetBulk(ctx, &coordv1.QueueGetBulkRequest{Id: "retry-dead"})
		if err != nil {
			t.Fatal(err)
		}
		if o := g.GetOp(); o.GetFinished() {
			t.Fatalf("the operation finished before the kill (%d batches): nothing to resume", o.GetBatches())
		} else if o.GetDone() > 0 {
			atKill = o
		}
		time.Sleep(2 * time.Millisecond)
	}
	leader, took := r.failover("probe-bulk")
	t.Logf("kill -9 of the leader %s at %d of %d retried (%d batches); the cluster served again after %s", leader.ID, atKill.GetDone(),
		n, atKill.GetBatches(), took.Round(time.Millisecond))
	var op *coordv1.BulkOp
	r.awaitSlow("the bulk retry finishes", 3*time.Minute, func() bool {
		g, err := raw.GetBulk(ctx, &coordv1.QueueGetBulkRequest{Id: "retry-dead"})
		op = g.GetOp()
		return err == nil && op.GetFinished()
	})
	t.Logf("bulk retry of %d jobs: %d done, %d skipped, %d batches, %s", n, op.GetDone(), op.GetSkipped(), op.GetBatches(),
		time.Since(bulkStart).Round(time.Millisecond))
	if op.GetDone() != uint64(n) || op.GetSkipped() != 0 || op.GetBatches() > uint64(n/1000+2) {
		t.Errorf("operation %v: want %d done, 0 skipped, about %d batches", op, n, n/1000)
	}
	// A repeat with the request id is the same operation, not a second one.
	if again, err := raw.Bulk(ctx, &coordv1.QueueBulkRequest{Action: coordv1.BulkAction_BULK_ACTION_RETRY, RequestId: "retry-dead",
		Filter: &coordv1.JobFilter{Queue: q, State: coordv1.JobState_JOB_STATE_DEAD}}); err != nil || !again.GetDuplicate() || again.GetOp().GetDone() != uint64(n) {
		t.Errorf("repeated bulk: %v %v", again, err)
	}
	// Every job retried exactly once: dead again at attempt 2.
	r.awaitSlow("every retried job failed again", 3*time.Minute, func() bool {
		s, err := stats(ctx, qc, q)
		return err == nil && s.GetDead() == uint64(n)
	})
	stopFailer()
	failerDone.Wait()
	byAttempts := map[uint32]int{}
	seen := 0
	for tok := ""; ; {
		l, err := raw.List(ctx, &coordv1.QueueListRequest{Queue: q, PageSize: 1000, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range l.GetJobs() {
			if _, ok := want[j.GetId()]; ok {
				seen++
				byAttempts[j.GetAttempts()]++
			}
		}
		if tok = l.GetNextPageToken(); tok == "" {
			break
		}
	}
	if seen != n || byAttempts[2] != n {
		t.Errorf("%d of %d jobs listed; by attempts %v: want all %d at attempt 2 (1: a retry lost, 3: one doubled)", seen, n, byAttempts, n)
	}
	t.Logf("jobs by attempts: %v", byAttempts)
	r.check()
}
