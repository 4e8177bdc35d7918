package node

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The queue's leader loops (dispatch, fetch pump) are woken after a
// command only when it changed the queue: lease, window and fence traffic
// leaves them asleep, everything that can hand out a job wakes both.
func TestQueueLoopsWokenOnlyByQueueChanges(t *testing.T) {
	cfg := Config{ID: "n1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", Clock: clock.NewFake(start),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n := newNode(cfg.withDefaults()) // no loops run: the pokes stay in the wakers
	cal := start.UnixMilli()
	apply := func(body any) {
		n.fsm.ApplyCommand(fsm.EnvelopeAt(1, cal, body))
		n.queueChanged()
	}
	woken := func(what string, want bool) {
		t.Helper()
		d, p := len(n.dispatcher.C()) == 1, len(n.fetchPump.C()) == 1
		if d != want || p != want {
			t.Fatalf("%s: dispatcher woken %v, fetch pump woken %v; want %v", what, d, p, want)
		}
		select { // take the pokes
		case <-n.dispatcher.C():
		default:
		}
		select {
		case <-n.fetchPump.C():
		default:
		}
	}
	apply(&fsmv1.Acquire{Name: "l", Owner: "o", TtlMs: 60_000})
	woken("acquire", false)
	apply(&fsmv1.FencedCommit{Resource: "r", LeaseName: "l", Generation: 1, IdempotencyKey: "k"})
	woken("fenced commit", false)
	spec := &fsmv1.QueueJobSpec{Queue: "q", Kind: "k", Args: []byte(`{}`), RunAtMs: cal + time.Minute.Milliseconds()}
	fsm.FillJobDefaults(spec)
	apply(&fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{spec}, Identity: "s"})
	woken("submit", true)
	apply(&fsmv1.Release{Name: "l", Owner: "o", Generation: 1})
	woken("release", false)
	cal += time.Minute.Milliseconds() // the job comes due under a lease command's stamp
	apply(&fsmv1.Acquire{Name: "l", Owner: "o", TtlMs: 60_000})
	woken("acquire whose stamp made a job due", true)
}
