package fsm

import (
	"bytes"
	"testing"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// QueueEpoch moves exactly when the job queue may have changed, so the
// leader's queue loops sleep through lease, window and fence traffic and
// still wake for everything that can hand out a job.
func TestQueueEpoch(t *testing.T) {
	f := New()
	last := f.QueueEpoch()
	step := func(what string, wantChange bool, body any, cal int64) {
		t.Helper()
		runAt(t, f, 0, cal, body)
		e := f.QueueEpoch()
		if changed := e != last; changed != wantChange {
			t.Fatalf("%s: epoch %d -> %d, want changed=%v", what, last, e, wantChange)
		}
		last = e
	}
	step("acquire", false, &fsmv1.Acquire{Name: "l", Owner: "o", TtlMs: 60_000}, t0)
	step("renew", false, &fsmv1.Renew{Name: "l", Owner: "o", Generation: 1, TtlMs: 60_000}, t0)
	step("fenced commit", false, &fsmv1.FencedCommit{Resource: "r", LeaseName: "l", Generation: 1, IdempotencyKey: "k"}, t0)
	step("release", false, &fsmv1.Release{Name: "l", Owner: "o", Generation: 1}, t0)
	step("submit of a job due later", true, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "k", at(t0+1000))}, Identity: "s"}, t0)
	step("acquire before the job is due", false, &fsmv1.Acquire{Name: "l", Owner: "o", TtlMs: 60_000}, t0+500)
	// The stamp of a lease command makes the job due: the queue changed.
	step("acquire that makes the job due", true, &fsmv1.Acquire{Name: "m", Owner: "o", TtlMs: 60_000}, t0+1000)
	step("tick (rate tokens come with time)", true, &fsmv1.Tick{}, t0+1000)
	step("fetch", true, &fsmv1.FetchJobs{Queues: []string{"q"}, Max: 1, WorkerId: "w", Identity: "w"}, t0+1000)
	step("pause", true, &fsmv1.PauseQueue{Queue: "q", Paused: true}, t0+1000)
	// A batch counts through its commands.
	step("batch of lease commands", false, &fsmv1.Batch{Commands: []*fsmv1.Command{
		EnvelopeAt(0, t0+1000, &fsmv1.Renew{Name: "m", Owner: "o", Generation: 1, TtlMs: 60_000}),
	}}, 0)
	step("batch with a submit", true, &fsmv1.Batch{Commands: []*fsmv1.Command{
		EnvelopeAt(0, t0+1000, &fsmv1.Renew{Name: "m", Owner: "o", Generation: 1, TtlMs: 60_000}),
		EnvelopeAt(0, t0+1000, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "k")}, Identity: "s"}),
	}}, 0)

	var buf bytes.Buffer
	if err := f.Snapshot().Persist(&buf); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if f.QueueEpoch() == last {
		t.Fatalf("a restore left the epoch at %d", last)
	}
}
