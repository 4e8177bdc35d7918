package node

import (
	"testing"
	"time"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// A long poll on a paused queue keeps waiting through submits to it (one
// entry per submit: no fetch is proposed for a paused queue) and gets the
// jobs once the queue is resumed.
func TestLongPollWaitsOnAPausedQueue(t *testing.T) {
	n := newTestNode(t)
	if _, err := n.PauseQueue(bg(), &fsmv1.PauseQueue{Queue: "q", Paused: true, Identity: "ops"}); err != nil {
		t.Fatal(err)
	}
	base := n.raft.count()
	ch := n.longPoll(bg(), "w", 10, 10*time.Second, "q")
	eventually(t, "the poll waits", func() bool { return n.fetchers() == 1 })
	ids := n.submit(t, "q", 0, 0)
	stillWaiting(t, ch, "a poll on a paused queue")
	if got := n.raft.count() - base; got != 1 {
		t.Fatalf("%d entries for one submit to a paused queue", got)
	}
	if r, err := n.Fetch(bg(), &fsmv1.FetchJobs{Queues: []string{"q"}, Max: 10, WorkerId: "w2"}, 0); err != nil || len(r.Jobs) != 0 {
		t.Fatalf("a fetch without wait from a paused queue: %+v %v", r, err)
	}
	r, err := n.PauseQueue(bg(), &fsmv1.PauseQueue{Queue: "q", Paused: false, Identity: "ops"})
	if err != nil || r.Already {
		t.Fatalf("resume: %+v %v", r, err)
	}
	res := got(t, ch, "the poll after the resume")
	if len(res.Jobs) != 2 || res.Jobs[0].ID != ids[0] || res.Jobs[1].ID != ids[1] {
		t.Fatalf("fetched %+v, want %v", res.Jobs, ids)
	}
	if st := n.fsm.QueueStats("q", n.fsm.CalendarTime()); st[0].Running != 2 || st[0].Pause != (*fsm.QueuePause)(nil) {
		t.Fatalf("stats %+v", st[0])
	}
}
