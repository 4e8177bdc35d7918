package fsm

import (
	"strings"
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

func maxRun(ms int64) func(*fsmv1.QueueJobSpec) {
	return func(s *fsmv1.QueueJobSpec) { s.MaxRunMs = ms }
}

// A heartbeating attempt ends at start + max_run; its later heartbeat,
// completion and fenced write are refused; the job is retried after its
// backoff.
func TestQueueMaxRunEndsAHeartbeatingAttempt(t *testing.T) {
	f := New()
	j := submitOne(t, f, t0, jspec("q", "k", vis(1000), maxRun(2500), backoff(100, 1000, 2000)))
	a := fetch(t, f, t0, "w", 1, "q")[0]
	if cur, _ := a.Current(); cur.RunUntil != t0+2500 || cur.Deadline != t0+1000 {
		t.Fatalf("attempt %+v", cur)
	}
	for _, cal := range []int64{t0 + 800, t0 + 1600, t0 + 2400} {
		o := okJob(t, heartbeat(f, t, cal, "w", j.ID, 1))
		if cur, _ := o.Job.Current(); cur.Deadline != min(cal+1000, t0+2500) {
			t.Fatalf("heartbeat at %d: deadline %d", cal-t0, cur.Deadline-t0)
		}
	}
	tick(t, f, t0+2500)
	got := jobState(t, f, j.ID)
	last := got.Log[len(got.Log)-1]
	if got.State != JobRetryable || got.RunAt != t0+2500+100 || last.Outcome != AttemptLapsed || last.FinishedAt != t0+2500 ||
		!strings.Contains(last.Error, "max_run exceeded") {
		t.Fatalf("after max_run: %s run_at +%d, attempt %+v", got.State, got.RunAt-t0, last)
	}
	for what, out := range map[string]any{
		"heartbeat":    one(t, heartbeat(f, t, t0+2501, "w", j.ID, 1)),
		"complete":     one(t, complete(f, t, t0+2501, "w", j.ID, 1, `"late"`)),
		"fenced write": runAt(t, f, 0, t0+2501, &fsmv1.FencedCommit{JobId: j.ID, Generation: 1, Resource: "r", IdempotencyKey: "k"}),
	} {
		rej, ok := out.(*Rejection)
		if !ok || (rej.Reason != coorderr.AttemptExpired && rej.Reason != coorderr.StaleToken) {
			t.Errorf("%s after max_run: %#v", what, out)
		}
		if ok && rej.Reason == coorderr.AttemptExpired && !strings.Contains(rej.Message, "max_run") {
			t.Errorf("%s: %q does not say max_run", what, rej.Message)
		}
	}
	// The retry runs as attempt 2, bounded again.
	b := fetch(t, f, t0+2600, "w", 1, "q")
	if cur, _ := b[0].Current(); len(b) != 1 || cur.Number != 2 || cur.RunUntil != t0+2600+2500 {
		t.Fatalf("retry %+v", b)
	}
	// The bound survives a snapshot.
	if g := restored(t, f); g.Digest() != f.Digest() {
		t.Fatal("digest differs after restore")
	}
}

// A queue's max_run applies to its jobs without one, from the fetch on; a
// job's own wins.
func TestQueueMaxRunQueueDefault(t *testing.T) {
	f := New()
	setLimits(t, f, t0, "q", &fsmv1.QueueLimitsSpec{MaxRunMs: 5000})
	own := submitOne(t, f, t0, jspec("q", "k", maxRun(700), prio(1)))
	dflt := submitOne(t, f, t0, jspec("q", "k", attempts(1)))
	js := fetch(t, f, t0, "w", 2, "q")
	bound := map[uint64]int64{}
	for _, j := range js {
		cur, _ := j.Current()
		bound[j.ID] = cur.RunUntil - t0
	}
	if bound[own.ID] != 700 || bound[dflt.ID] != 5000 {
		t.Fatalf("bounds %v", bound)
	}
	tick(t, f, t0+5000)
	if got := jobState(t, f, dflt.ID); got.State != JobDead {
		t.Fatalf("the one-attempt job after max_run: %s", got.State)
	}
}

func TestQueueMaxRunSpecCheck(t *testing.T) {
	for _, ms := range []int64{-1, MaxRunMs + 1} {
		if field, _ := CheckJobSpec(jspec("q", "k", maxRun(ms))); field != "max_run" {
			t.Errorf("max_run %d: field %q", ms, field)
		}
	}
}
