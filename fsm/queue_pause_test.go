package fsm

import (
	"fmt"
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

func pauseQ(t testing.TB, f *FSM, cal int64, queue string, paused bool) *PauseResult {
	t.Helper()
	out := runAt(t, f, 0, cal, &fsmv1.PauseQueue{Queue: queue, Paused: paused, Identity: "ops"})
	r, ok := out.(*PauseResult)
	if !ok {
		t.Fatalf("pause %q (%v) at %d: %#v", queue, paused, cal, out)
	}
	return r
}

// TestQueuePauseStopsFetches: a paused queue hands out nothing (pull
// fetches, and its targeted jobs leave the delivery lane) while submits,
// completions and lapses go on; the pause records who and when; a second
// pause keeps the first's record; resume hands out nothing by itself and
// the next fetch takes the queue's jobs in their usual order.
func TestQueuePauseStopsFetches(t *testing.T) {
	f := New()
	submit(t, f, t0, jspec("a", "k", vis(1000)), jspec("a", "k"), jspec("b", "k"))
	running := fetch(t, f, t0+1, "w1", 1, "a")
	if len(running) != 1 || running[0].ID != 1 {
		t.Fatalf("first fetch: %v", ids(running))
	}
	r := pauseQ(t, f, t0+10, "a", true)
	if r.Already || r.Pause == nil || r.Pause.PausedBy != "ops" || r.Pause.PausedAt != t0+10 {
		t.Fatalf("pause: %+v", r)
	}
	if again := runAt(t, f, 0, t0+11, &fsmv1.PauseQueue{Queue: "a", Paused: true, Identity: "other"}).(*PauseResult); !again.Already || again.Pause.PausedBy != "ops" || again.Pause.PausedAt != t0+10 {
		t.Fatalf("second pause: %+v", again)
	}
	// Submits are accepted; fetches of a take nothing, b's go on.
	submit(t, f, t0+12, jspec("a", "k"))
	if got := fetch(t, f, t0+13, "w2", 10, "a", "b"); fmt.Sprint(ids(got)) != "[3]" {
		t.Fatalf("fetch while a is paused: %v", ids(got))
	}
	if f.JobsReady([]string{"a"}, t0+13) {
		t.Fatal("a paused queue reports ready jobs to long polls")
	}
	// The running attempt lapses as usual and its job stays put.
	tick(t, f, t0+2000)
	if j := jobState(t, f, 1); j.State != JobAvailable || j.Attempts != 1 {
		t.Fatalf("lapsed job in a paused queue: %s attempt %d", j.State, j.Attempts)
	}
	if got := fetch(t, f, t0+2001, "w2", 10, "a"); len(got) != 0 {
		t.Fatalf("fetch from paused a: %v", ids(got))
	}
	st := f.QueueStats("a", t0+2001)
	if len(st) != 1 || st[0].Pause == nil || st[0].Pause.PausedBy != "ops" || st[0].Available != 3 {
		t.Fatalf("stats of paused a: %+v", st)
	}
	// A paused queue without jobs is listed too.
	pauseQ(t, f, t0+2002, "empty", true)
	if st := f.QueueStats("empty", t0+2002); len(st) != 1 || st[0].Pause == nil || st[0].Available != 0 {
		t.Fatalf("stats of an empty paused queue: %+v", st)
	}
	if all := f.QueueStats("", t0+2002); len(all) != 3 || all[2].Queue != "empty" {
		t.Fatalf("all stats: %+v", all)
	}
	// Resume: nothing is handed out by it; the next fetch takes a's jobs
	// in order, at most what it asks for.
	if r := pauseQ(t, f, t0+3000, "a", false); r.Already || r.Pause != nil {
		t.Fatalf("resume: %+v", r)
	}
	if j := jobState(t, f, 2); j.State != JobAvailable {
		t.Fatalf("resume changed a job: %s", j.State)
	}
	if r := pauseQ(t, f, t0+3001, "a", false); !r.Already {
		t.Fatalf("second resume: %+v", r)
	}
	if got := fetch(t, f, t0+3002, "w3", 2, "a"); fmt.Sprint(ids(got)) != "[1 2]" {
		t.Fatalf("fetch after resume: %v", ids(got))
	}
	if st := f.QueueStats("a", t0+3002); st[0].Pause != nil {
		t.Fatalf("stats after resume: %+v", st[0])
	}
	if d := f.st.queueIndexDiff(); d != "" {
		t.Fatal(d)
	}
}

// TestQueuePauseDeliveries: a paused queue's jobs with a target leave the
// delivery lane (another queue's stay), and come back on resume.
func TestQueuePauseDeliveries(t *testing.T) {
	f := New()
	if _, ok := submitRules(t, f, t0, JobSpecRules, jspec("q", "push", target("https://app.example/a")),
		jspec("other", "push", target("https://app.example/b"))).(*SubmitResult); !ok {
		t.Fatal("submit")
	}
	pauseQ(t, f, t0+1, "q", true)
	if d := f.st.queueIndexDiff(); d != "" {
		t.Fatal(d)
	}
	if n := f.DeliveriesAvailable(); n != 1 {
		t.Fatalf("delivery lane while q is paused: %d jobs", n)
	}
	// A job submitted to the paused queue stays out of the lane too.
	submitRules(t, f, t0+2, JobSpecRules, jspec("q", "push", target("https://app.example/c")))
	if got := fetchTargeted(t, f, t0+3, "d1", 10); fmt.Sprint(ids(got)) != "[2]" {
		t.Fatalf("targeted fetch while q is paused: %v", ids(got))
	}
	if st := f.QueueStats("q", t0+3); st[0].Deliveries != 2 || st[0].Available != 2 {
		t.Fatalf("stats of paused q: %+v", st[0])
	}
	pauseQ(t, f, t0+4, "q", false)
	if d := f.st.queueIndexDiff(); d != "" {
		t.Fatal(d)
	}
	if got := fetchTargeted(t, f, t0+5, "d1", 10); fmt.Sprint(ids(got)) != "[1 3]" {
		t.Fatalf("targeted fetch after resume: %v", ids(got))
	}
}

// TestQueuePauseSnapshot: the pause is replicated state: in the snapshot
// (same digest), and the restored copy keeps refusing fetches.
func TestQueuePauseSnapshot(t *testing.T) {
	f, g := twins(t, func(t testing.TB, f *FSM) {
		submit(t, f, t0, jspec("a", "k"))
		submitRules(t, f, t0, JobSpecRules, jspec("a", "push", target("https://app.example/a")))
		pauseQ(t, f, t0+1, "a", true)
	})
	if p := g.QueuePauses(""); len(p) != 1 || p[0] != (QueuePause{Queue: "a", PausedBy: "ops", PausedAt: t0 + 1}) {
		t.Fatalf("restored pauses: %+v", p)
	}
	for _, x := range []*FSM{f, g} {
		if got := fetch(t, x, t0+2, "w", 10, "a"); len(got) != 0 {
			t.Fatalf("fetch from a paused queue after restore: %v", ids(got))
		}
		if x.DeliveriesAvailable() != 0 {
			t.Fatal("a paused queue's delivery in the lane after restore")
		}
		pauseQ(t, x, t0+3, "a", false)
		if got := fetch(t, x, t0+4, "w", 10, "a"); fmt.Sprint(ids(got)) != "[1]" {
			t.Fatalf("fetch after resume: %v", ids(got))
		}
	}
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs")
	}
}

func TestQueuePauseBadQueue(t *testing.T) {
	f := New()
	for _, q := range []string{"", string(make([]byte, MaxQueueNameBytes+1)), "a\x00b"} {
		rej, ok := runAt(t, f, 0, t0, &fsmv1.PauseQueue{Queue: q, Paused: true}).(*Rejection)
		if !ok || rej.Reason != coorderr.InvalidArgument || rej.Metadata["field"] != "queue" {
			t.Fatalf("pause %q: %#v", q, rej)
		}
	}
	if len(f.QueuePauses("")) != 0 {
		t.Fatal("a refused pause was recorded")
	}
}
