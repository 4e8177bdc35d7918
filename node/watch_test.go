package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/internal/watchhub"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The node's glue to its watch hub (node/internal/watchhub, where the
// ring and the watchers are tested): the raft adapter publishes what it
// applies with the entry's index, a snapshot raft opens and restores
// resets the ring after that snapshot's index, and Node.Watch ends with
// ErrShutdown when the node stops.

func newGlueNode(t *testing.T) (*Node, raftFSM) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := &Node{fsm: fsm.New(), watch: watchhub.New(WatchConfig{}, clock.NewFake(start)), ctx: ctx, stop: cancel}
	return n, raftFSM{f: n.fsm, hub: n.watch}
}

func applyAt(t *testing.T, rf raftFSM, index uint64, body any) {
	t.Helper()
	data, err := proto.Marshal(fsm.Envelope(int64(index)*10, body))
	if err != nil {
		t.Fatal(err)
	}
	rf.ApplyBatch([]*raft.Log{{Type: raft.LogCommand, Index: index, Data: data}})
}

func TestWatchGlueAppliedEventsAndShutdown(t *testing.T) {
	n, rf := newGlueNode(t)
	got := make(chan string, 10)
	errc := make(chan error, 1)
	go func() {
		errc <- n.Watch(bg(), fsm.Position{Index: 5}, false, nil, func(b fsm.WatchBatch) error {
			for _, e := range b.Events {
				got <- fmt.Sprintf("%d.%d %s", e.Index, e.Offset, e.Key)
			}
			return nil
		})
	}()
	eventually(t, "watcher registered", func() bool { return n.Watchers() == 1 })
	applyAt(t, rf, 5, &fsmv1.Acquire{Name: "a", Owner: "o", TtlMs: 1_000_000, RequestId: "a"})
	if e := <-got; e != "5.0 a" {
		t.Fatalf("event %q, want the entry's index: 5.0 a", e)
	}
	n.stop()
	if err := <-errc; !errors.Is(err, ErrShutdown) {
		t.Fatalf("Watch after the node stopped: %v, want ErrShutdown", err)
	}
	eventually(t, "watcher gone", func() bool { return n.Watchers() == 0 })
}

func TestWatchGlueSnapshotRestoreResetsTheRing(t *testing.T) {
	n, rf := newGlueNode(t)
	applyAt(t, rf, 1, &fsmv1.Acquire{Name: "a", Owner: "o", TtlMs: 1_000_000, RequestId: "a"})
	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(raft.SnapshotVersionMax, 20, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.fsm.WriteSnapshot(sink); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	_, rc, err := indexedSnapshots{store, n.watch}.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := rf.Restore(io.NopCloser(rc)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg(), 10*time.Second) // a watch that is not refused waits
	defer cancel()
	err = n.Watch(ctx, fsm.Position{Index: 20}, false, nil, func(fsm.WatchBatch) error { return nil })
	var we interface {
		WatchRefused() (coorderr.Reason, map[string]string)
	}
	if !errors.As(err, &we) {
		t.Fatalf("watch from the snapshot's index after the restore: %v, want WATCH_INDEX_COMPACTED", err)
	}
	if r, meta := we.WatchRefused(); r != coorderr.WatchIndexCompacted || meta["oldest_index"] != "21" {
		t.Fatalf("refused %v %v, want WATCH_INDEX_COMPACTED from index 21", r, meta)
	}
}
