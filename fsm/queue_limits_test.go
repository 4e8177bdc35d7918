package fsm

import (
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

func setLimits(t testing.TB, f *FSM, cal int64, queue string, sp *fsmv1.QueueLimitsSpec) any {
	t.Helper()
	return runAt(t, f, 0, cal, &fsmv1.SetQueueLimits{Queue: queue, Limits: sp, Identity: "admin"})
}

func submitN(t testing.TB, f *FSM, cal int64, n int, spec func(i int) *fsmv1.QueueJobSpec) {
	t.Helper()
	specs := make([]*fsmv1.QueueJobSpec, n)
	for i := range specs {
		specs[i] = spec(i)
	}
	submit(t, f, cal, specs...)
}

func running(f *FSM, queue string) uint64 {
	st := f.QueueStats(queue, 0)
	if len(st) == 0 {
		return 0
	}
	return st[0].Running
}

func TestQueueConcurrencyLimitHoldsUntilAttemptsEnd(t *testing.T) {
	f := New()
	if _, ok := setLimits(t, f, t0, "q", &fsmv1.QueueLimitsSpec{Concurrency: 2}).(*QueueLimits); !ok {
		t.Fatal("set limits refused")
	}
	submitN(t, f, t0, 5, func(int) *fsmv1.QueueJobSpec { return jspec("q", "k", vis(1000)) })
	if got := f.Fetchable("q", t0, 100); got != 2 {
		t.Fatalf("fetchable = %d, want 2", got)
	}
	a := fetch(t, f, t0, "w1", 10, "q")
	if len(a) != 2 || running(f, "q") != 2 {
		t.Fatalf("first fetch handed out %d (running %d), want 2", len(a), running(f, "q"))
	}
	if got := fetch(t, f, t0+1, "w2", 10, "q"); len(got) != 0 {
		t.Fatalf("fetch at the limit handed out %d", len(got))
	}
	if f.JobsReady([]string{"q"}, t0+1) {
		t.Fatal("JobsReady with the queue at its limit")
	}
	// A completion gives its place back.
	okJob(t, complete(f, t, t0+10, "w1", a[0].ID, 1, `"ok"`))
	b := fetch(t, f, t0+11, "w2", 10, "q")
	if len(b) != 1 {
		t.Fatalf("after a completion: %d handed out, want 1", len(b))
	}
	// A frozen worker (a[1], no heartbeat) holds its place until its
	// attempt lapses at its visibility deadline, then its writes are
	// refused; b[0] heartbeats and keeps its own.
	okJob(t, heartbeat(f, t, t0+900, "w2", b[0].ID, 1))
	if got := fetch(t, f, t0+999, "w3", 10, "q"); len(got) != 0 {
		t.Fatalf("before the frozen attempt lapsed: %d handed out", len(got))
	}
	c := fetch(t, f, t0+1000, "w3", 10, "q")
	if len(c) != 1 {
		t.Fatalf("at the frozen attempt's deadline: %d handed out, want 1", len(c))
	}
	if rej, ok := one(t, complete(f, t, t0+1001, "w1", a[1].ID, 1, `"late"`)).(*Rejection); !ok || rej.Reason != coorderr.AttemptExpired {
		t.Fatalf("the frozen worker's late completion: %#v", one(t, complete(f, t, t0+1001, "w1", a[1].ID, 1, `"late"`)))
	}
	if running(f, "q") != 2 {
		t.Fatalf("running = %d, want 2", running(f, "q"))
	}
	// Clearing the limits hands out the rest.
	setLimits(t, f, t0+1002, "q", nil)
	if got := fetch(t, f, t0+1003, "w4", 10, "q"); len(got) != 2 { // 5 - 1 done - 2 running
		t.Fatalf("after clearing: %d handed out, want 2", len(got))
	}
}

func TestQueueKindLimitPassesOverFullKinds(t *testing.T) {
	f := New()
	setLimits(t, f, t0, "q", &fsmv1.QueueLimitsSpec{Kinds: []*fsmv1.KindLimit{{Kind: "a", Concurrency: 1}}})
	// a jobs first (higher priority), then b jobs.
	submitN(t, f, t0, 6, func(i int) *fsmv1.QueueJobSpec {
		if i < 3 {
			return jspec("q", "a", prio(10))
		}
		return jspec("q", "b")
	})
	if got := f.Fetchable("q", t0, 100); got != 4 {
		t.Fatalf("fetchable = %d, want 4 (one a, three b)", got)
	}
	got := fetch(t, f, t0, "w", 100, "q")
	kinds := map[string]int{}
	for _, j := range got {
		kinds[j.Kind]++
	}
	if kinds["a"] != 1 || kinds["b"] != 3 {
		t.Fatalf("handed out %v, want a:1 b:3", kinds)
	}
	if more := fetch(t, f, t0+1, "w", 100, "q"); len(more) != 0 {
		t.Fatalf("second fetch handed out %d", len(more))
	}
	var a *QueueJob
	for _, j := range got {
		if j.Kind == "a" {
			a = j
		}
	}
	okJob(t, fail(f, t, t0+2, "w", a.ID, 1, false, 0))
	if more := fetch(t, f, t0+3, "w", 100, "q"); len(more) != 1 || more[0].Kind != "a" {
		t.Fatalf("after the a attempt failed: %v", ids(more))
	}
}

func TestQueueRateLimitTokenBucket(t *testing.T) {
	f := New()
	// 2 per second, a burst of 2.
	setLimits(t, f, t0, "q", &fsmv1.QueueLimitsSpec{RateMilli: 2000, Burst: 2})
	submitN(t, f, t0, 200, func(int) *fsmv1.QueueJobSpec { return jspec("q", "k", vis(3_600_000)) })
	if got := fetch(t, f, t0, "w", 100, "q"); len(got) != 2 {
		t.Fatalf("burst: %d, want 2", len(got))
	}
	if got := fetch(t, f, t0+100, "w", 100, "q"); len(got) != 0 {
		t.Fatalf("empty bucket: %d", len(got))
	}
	// The next token comes 500 ms after the bucket emptied: the
	// dispatcher's next due time says so.
	if due, ok := f.NextJobDue(); !ok || due != t0+500 {
		t.Fatalf("NextJobDue = %d, %v; want t0+500", due-t0, ok)
	}
	if got := fetch(t, f, t0+499, "w", 100, "q"); len(got) != 0 {
		t.Fatalf("at 499 ms: %d", len(got))
	}
	if got := fetch(t, f, t0+500, "w", 100, "q"); len(got) != 1 {
		t.Fatalf("at 500 ms: %d, want 1", len(got))
	}
	// A worker fetching every 10 ms for 30 s of calendar time gets the
	// rate: 2/s (with the burst already spent).
	started := 0
	for cal := t0 + 510; cal <= t0+30_500; cal += 10 {
		started += len(fetch(t, f, cal, "w", 100, "q"))
	}
	if started != 60 {
		t.Fatalf("30 s at 2/s started %d, want 60", started)
	}
	// The bucket survives a snapshot: the copy hands out the same.
	g := restored(t, f)
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs after restore")
	}
	a, b := fetch(t, f, t0+31_000, "w", 100, "q"), fetch(t, g, t0+31_000, "w", 100, "q")
	if len(a) != 1 || len(b) != 1 || a[0].ID != b[0].ID {
		t.Fatalf("after restore: %v vs %v", ids(a), ids(b))
	}
	// An idle spell fills the bucket to its burst, no more.
	if got := fetch(t, f, t0+60_000, "w", 100, "q"); len(got) != 2 {
		t.Fatalf("after idling: %d, want the burst of 2", len(got))
	}
}

func TestQueueLimitsRefuseBadSpecs(t *testing.T) {
	for _, c := range []struct {
		sp    *fsmv1.QueueLimitsSpec
		field string
	}{
		{&fsmv1.QueueLimitsSpec{Concurrency: MaxQueueConcurrency + 1}, "concurrency"},
		{&fsmv1.QueueLimitsSpec{RateMilli: 1000}, "burst"},
		{&fsmv1.QueueLimitsSpec{RateMilli: MaxRateMilli + 1, Burst: 1}, "rate"},
		{&fsmv1.QueueLimitsSpec{MaxRunMs: -1}, "max_run"},
		{&fsmv1.QueueLimitsSpec{Kinds: []*fsmv1.KindLimit{{Kind: "b", Concurrency: 1}, {Kind: "a", Concurrency: 1}}}, "kind_concurrency"},
		{&fsmv1.QueueLimitsSpec{Kinds: []*fsmv1.KindLimit{{Kind: "a"}}}, "kind_concurrency"},
	} {
		rej, ok := setLimits(t, New(), t0, "q", c.sp).(*Rejection)
		if !ok || rej.Reason != coorderr.InvalidArgument || rej.Metadata["field"] != c.field {
			t.Errorf("%v: %#v, want INVALID_ARGUMENT on %s", c.sp, rej, c.field)
		}
	}
}

// TestQueuePausedQueueWithLimits: a paused queue hands nothing out
// whatever its limits allow (fetch, Fetchable, JobsReady), its empty rate
// bucket does not make the dispatcher tick, its bucket is not spent while
// paused, and after the resume the limits hold as before.
func TestQueuePausedQueueWithLimits(t *testing.T) {
	f := New()
	setLimits(t, f, t0, "q", &fsmv1.QueueLimitsSpec{Concurrency: 3, RateMilli: 2000, Burst: 2})
	submitN(t, f, t0, 10, func(int) *fsmv1.QueueJobSpec { return jspec("q", "k", vis(3_600_000)) })
	if got := fetch(t, f, t0, "w", 100, "q"); len(got) != 2 { // the burst
		t.Fatalf("burst: %d, want 2", len(got))
	}
	if due, ok := f.NextJobDue(); !ok || due != t0+500 {
		t.Fatalf("NextJobDue = %d, %v; want t0+500", due-t0, ok)
	}
	pauseQ(t, f, t0+1, "q", true)
	if due, ok := f.NextJobDue(); ok && due < t0+3_600_000 {
		t.Fatalf("paused: NextJobDue = t0+%d (the bucket's token of a paused queue)", due-t0)
	}
	// 5 s later the bucket would allow the burst and the queue has room for
	// one more: a paused queue still hands out nothing.
	if got := f.Fetchable("q", t0+5000, 100); got != 0 {
		t.Fatalf("paused: Fetchable = %d", got)
	}
	if f.JobsReady([]string{"q"}, t0+5000) {
		t.Fatal("paused: JobsReady")
	}
	if got := fetch(t, f, t0+5000, "w", 100, "q"); len(got) != 0 {
		t.Fatalf("paused: fetch handed out %d", len(got))
	}
	pauseQ(t, f, t0+5001, "q", false)
	if got := f.Fetchable("q", t0+5002, 100); got != 1 { // concurrency 3, 2 running
		t.Fatalf("resumed: Fetchable = %d, want 1", got)
	}
	if got := fetch(t, f, t0+5002, "w", 100, "q"); len(got) != 1 || running(f, "q") != 3 {
		t.Fatalf("resumed: fetch handed out %d (running %d), want 1 (3)", len(got), running(f, "q"))
	}
}
