package watchhub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/testutil"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

var start = time.Date(2026, 9, 24, 12, 0, 0, 0, time.UTC)

// watchNode is just enough of a node to watch: an FSM, a hub fed as the
// node's apply path feeds it, a fake clock that drives the reaper and
// progress.
type watchNode struct {
	fsm     *fsm.FSM
	watch   *Hub
	rf      feed
	clock   *clock.Fake
	index   uint64
	stopped chan struct{}
}

// feed is the node's raft adapter as the hub sees it: each applied entry's
// events published with its index, a restore followed by Restored.
type feed struct {
	f   *fsm.FSM
	hub *Hub
}

func (r feed) apply(index uint64, data []byte) {
	r.f.ApplyBatchTo([][]byte{data}, func(_ int, evs []fsm.Event) { r.hub.Publish(index, evs) })
}

func (r feed) Restore(rc io.ReadCloser) error {
	if err := r.f.Restore(rc); err != nil {
		return err
	}
	r.hub.Restored()
	return nil
}

func newWatchNode(t *testing.T, cfg Config) *watchNode {
	t.Helper()
	clk := clock.NewFake(start)
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchNode{fsm: fsm.New(), watch: New(cfg, clk), clock: clk, stopped: make(chan struct{})}
	w.rf = feed{f: w.fsm, hub: w.watch}
	var wg sync.WaitGroup
	wg.Go(func() { w.watch.RunReaper(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	if clk.WaitTimers(1, 50*time.Millisecond) {
		t.Fatal("the reaper armed a timer without watchers")
	}
	return w
}

func (w *watchNode) Watch(ctx context.Context, from fsm.Position, initial bool, match func(*fsm.Event) bool,
	send func(fsm.WatchBatch) error) error {
	return w.watch.Watch(ctx, w.stopped, w.fsm, from, initial, match, send)
}

func (w *watchNode) Watchers() int { return w.watch.Watchers() }

// pollFor reports whether cond holds within timeout (real time), polling.
func pollFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Poll(t, what, 10*time.Second, time.Millisecond, cond)
}

// apply applies one entry holding body (a batch when several).
func (w *watchNode) apply(t *testing.T, bodies ...any) uint64 {
	t.Helper()
	var cmd *fsmv1.Command
	if len(bodies) == 1 {
		cmd = fsm.Envelope(int64(w.index+1)*10, bodies[0])
	} else {
		b := &fsmv1.Batch{}
		for _, body := range bodies {
			b.Commands = append(b.Commands, fsm.Envelope(int64(w.index+1)*10, body))
		}
		cmd = fsm.Envelope(0, b)
	}
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	w.index++
	w.rf.apply(w.index, data)
	return w.index
}

func lease(name string) *fsmv1.Acquire {
	return &fsmv1.Acquire{Name: name, Owner: "o", TtlMs: 1_000_000, RequestId: name}
}

// received is what a test watcher got.
type received struct {
	mu      sync.Mutex
	batches []fsm.WatchBatch
	events  []string // "index.offset key"
	ch      chan struct{}
}

func newReceived() *received { return &received{ch: make(chan struct{}, 1000)} }

func (r *received) send(b fsm.WatchBatch) error {
	r.mu.Lock()
	cp := fsm.WatchBatch{View: b.View, Next: b.Next}
	for _, e := range b.Events {
		cp.Events = append(cp.Events, e)
		r.events = append(r.events, fmt.Sprintf("%d.%d %s", e.Index, e.Offset, e.Key))
	}
	r.batches = append(r.batches, cp)
	r.mu.Unlock()
	r.ch <- struct{}{}
	return nil
}

func (r *received) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got := append([]string(nil), r.events...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("got %d events, want %d: %v", len(got), n, got)
		}
	}
}

func (r *received) last() fsm.WatchBatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.batches[len(r.batches)-1]
}

// watch runs Watch in the background; the returned func cancels it and
// returns its error.
func (w *watchNode) watchBG(from fsm.Position, initial bool, match func(*fsm.Event) bool, send func(fsm.WatchBatch) error) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Watch(ctx, from, initial, match, send) }()
	return func() error {
		cancel()
		return <-errc
	}
}

func reasonOf(err error) coorderr.Reason {
	var we interface {
		WatchRefused() (coorderr.Reason, map[string]string)
	}
	if errors.As(err, &we) {
		r, _ := we.WatchRefused()
		return r
	}
	return coorderr.Unspecified
}

func TestWatchFromNowAndFromAPosition(t *testing.T) {
	w := newWatchNode(t, Config{})
	w.apply(t, lease("a"))
	w.apply(t, &fsmv1.Tick{}) // index 2: no events

	now := newReceived()
	stop := w.watchBG(fsm.Position{}, false, nil, now.send)
	now.wait(t, 0)
	eventually(t, "first batch", func() bool { now.mu.Lock(); defer now.mu.Unlock(); return len(now.batches) == 1 })
	if first := now.last(); first.Next != (fsm.Position{Index: 3}) || len(first.Events) != 0 {
		t.Fatalf("first batch %+v", first)
	}
	w.apply(t, lease("b"), lease("c"))                               // index 3: two events
	w.apply(t, &fsmv1.Release{Name: "a", Owner: "o", Generation: 1}) // index 4
	got := now.wait(t, 3)
	want := []string{"3.0 b", "3.1 c", "4.0 a"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("from now: %v, want %v", got, want)
	}
	if next := now.last().Next; next != (fsm.Position{Index: 5}) { // entry 4 is applied whole
		t.Fatalf("resume position %+v", next)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled watch: %v", err)
	}

	// From a position inside an entry: the rest of it, then what follows.
	mid := newReceived()
	stop = w.watchBG(fsm.Position{Index: 3, Offset: 1}, false, nil, mid.send)
	if got := mid.wait(t, 2); fmt.Sprint(got) != fmt.Sprint([]string{"3.1 c", "4.0 a"}) {
		t.Fatalf("from 3.1: %v", got)
	}
	stop()

	// A filter: events that do not match are skipped, and still move the
	// resume position.
	only := newReceived()
	stop = w.watchBG(fsm.Position{Index: 1}, false, func(e *fsm.Event) bool { return e.Key == "b" }, only.send)
	if got := only.wait(t, 1); fmt.Sprint(got) != "[3.0 b]" {
		t.Fatalf("filtered: %v", got)
	}
	stop()

	// A position not applied yet is waited for.
	future := newReceived()
	stop = w.watchBG(fsm.Position{Index: 7}, false, nil, future.send)
	w.apply(t, lease("d")) // 5
	w.apply(t, lease("e")) // 6
	w.apply(t, lease("f")) // 7
	if got := future.wait(t, 1); fmt.Sprint(got) != "[7.0 f]" {
		t.Fatalf("from the future: %v", got)
	}
	stop()
}

func TestWatchCompactedRingAndReset(t *testing.T) {
	w := newWatchNode(t, Config{Events: 4})
	for i := range 6 {
		w.apply(t, lease(fmt.Sprintf("l%d", i))) // indexes 1..6, one event each
	}
	err := w.Watch(context.Background(), fsm.Position{Index: 2}, false, nil, newReceived().send)
	if reasonOf(err) != coorderr.WatchIndexCompacted {
		t.Fatalf("from an evicted index: %v", err)
	}
	if _, meta := err.(*watchError).WatchRefused(); meta["oldest_index"] != "3" {
		t.Fatalf("metadata %v", meta)
	}
	ok := newReceived()
	stop := w.watchBG(fsm.Position{Index: 3}, false, nil, ok.send)
	if got := ok.wait(t, 4); fmt.Sprint(got) != "[3.0 l2 4.0 l3 5.0 l4 6.0 l5]" {
		t.Fatalf("from the oldest index: %v", got)
	}
	// A snapshot replaces the state: the watcher is dropped, and watches
	// start after the snapshot's index.
	w.watch.OpeningSnapshot(20)
	w.rf.Restore(snapshotOf(t, w.fsm))
	if err := stop(); reasonOf(err) != coorderr.WatchIndexCompacted {
		t.Fatalf("watcher across a restore: %v", err)
	}
	if err := w.Watch(context.Background(), fsm.Position{Index: 20}, false, nil, newReceived().send); reasonOf(err) != coorderr.WatchIndexCompacted {
		t.Fatalf("from the snapshot's index: %v", err)
	}
	after := newReceived()
	stop = w.watchBG(fsm.Position{Index: 21}, false, nil, after.send)
	w.index = 20
	w.apply(t, lease("x"))
	if got := after.wait(t, 1); fmt.Sprint(got) != "[21.0 x]" {
		t.Fatalf("after the restore: %v", got)
	}
	stop()
}

type snapshotReader struct{ buf bytes.Buffer }

func (r *snapshotReader) Read(p []byte) (int, error) { return r.buf.Read(p) }
func (r *snapshotReader) Close() error               { return nil }

func snapshotOf(t *testing.T, f *fsm.FSM) *snapshotReader {
	t.Helper()
	r := &snapshotReader{}
	if err := f.WriteSnapshot(&r.buf); err != nil {
		t.Fatal(err)
	}
	return r
}

// A watcher whose send blocks is dropped once its unread events leave the
// ring, and Watch returns without waiting for the send; the apply path
// never waits for it.
func TestWatchSlowWatcherDropped(t *testing.T) {
	w := newWatchNode(t, Config{Events: 8})
	block := make(chan struct{})
	defer close(block)
	started := make(chan struct{}, 1)
	send := func(b fsm.WatchBatch) error {
		if len(b.Events) > 0 {
			started <- struct{}{}
			<-block
		}
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Watch(context.Background(), fsm.Position{}, false, nil, send) }()
	eventually(t, "watcher registered", func() bool { return w.Watchers() == 1 })
	w.apply(t, lease("first"))
	<-started
	for i := range 20 {
		w.apply(t, lease(fmt.Sprintf("l%d", i)))
	}
	if !w.clock.WaitArmed(start.Add(reapInterval), 10*time.Second) {
		t.Fatal("the reaper did not arm its timer for the watcher")
	}
	w.clock.Advance(reapInterval)
	select {
	case err := <-errc:
		if reasonOf(err) != coorderr.WatcherTooSlow {
			t.Fatalf("slow watcher: %v", err)
		}
		_, meta := err.(*watchError).WatchRefused()
		if meta["resume_index"] != "2" || meta["resume_position"] != "0" { // after the batch it was sending
			t.Fatalf("metadata %v", meta)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slow watcher was not dropped")
	}
	eventually(t, "watcher gone", func() bool { return w.Watchers() == 0 })
}

// A watcher whose prefix is quiet while others change hears its resume
// position after ProgressInterval, so it can resume from a recent index.
func TestWatchProgress(t *testing.T) {
	w := newWatchNode(t, Config{ProgressInterval: time.Second})
	r := newReceived()
	stop := w.watchBG(fsm.Position{}, false, func(e *fsm.Event) bool { return e.Key == "quiet" }, r.send)
	defer stop()
	eventually(t, "first batch", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.batches) == 1 })
	w.apply(t, lease("busy"))
	w.apply(t, lease("busy2"))
	eventually(t, "progress timer", func() bool { return w.clock.Pending() >= 2 }) // the reaper's ticker and the progress timer
	progressed := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		b := r.batches[len(r.batches)-1]
		return len(r.batches) == 2 && len(b.Events) == 0 && b.Next == fsm.Position{Index: 3}
	}
	// The timer seen armed may be the one set after the first entry: when
	// the second wakes the hub while the clock moves, the hub re-arms it a
	// full interval from then (a relative timer on a clock that moved). So
	// virtual time moves in intervals until the batch comes, at most three.
	for i := 1; ; i++ {
		w.clock.Advance(time.Second)
		if pollFor(2*time.Second, progressed) {
			break
		}
		if i == 3 {
			t.Fatal("no progress batch after three progress intervals")
		}
	}
}

func TestWatchLimit(t *testing.T) {
	w := newWatchNode(t, Config{MaxWatchers: 1})
	stop := w.watchBG(fsm.Position{}, false, nil, newReceived().send)
	defer stop()
	eventually(t, "watcher registered", func() bool { return w.Watchers() == 1 })
	if err := w.Watch(context.Background(), fsm.Position{}, false, nil, newReceived().send); reasonOf(err) != coorderr.WatchLimit {
		t.Fatalf("second watcher: %v", err)
	}
}

// The initial View and the events after it add up to the state, exactly,
// while entries keep applying during the registration.
func TestWatchInitialViewIsConsistent(t *testing.T) {
	w := newWatchNode(t, Config{})
	var wg sync.WaitGroup
	stopApply := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopApply:
				return
			default:
			}
			w.apply(t, lease(fmt.Sprintf("k%d", i%50)), &fsmv1.Renew{Name: fmt.Sprintf("k%d", (i+7)%50), Owner: "o", Generation: 1})
		}
	})
	for round := range 5 {
		var mu sync.Mutex
		seen := map[string]uint64{} // lease -> renewals
		var view *fsm.View
		send := func(b fsm.WatchBatch) error {
			mu.Lock()
			defer mu.Unlock()
			if b.View != nil {
				view = b.View
				b.View.Records("", nil, func(e fsm.Event) bool {
					seen[e.Key] = e.Record.(*fsm.Lease).Renewals
					return true
				})
			}
			for _, e := range b.Events {
				if l := e.Record.(*fsm.Lease); l.Renewals < seen[e.Key] {
					return fmt.Errorf("round %d: %s went back from %d to %d renewals at %d.%d", round, e.Key, seen[e.Key], l.Renewals, e.Index, e.Offset)
				}
				seen[e.Key] = e.Record.(*fsm.Lease).Renewals
			}
			return nil
		}
		stop := w.watchBG(fsm.Position{}, true, nil, send)
		time.Sleep(20 * time.Millisecond)
		if round == 4 {
			close(stopApply)
			wg.Wait()
		}
		// Let the watcher catch up with the last entry.
		last := w.watch.last.Load()
		eventually(t, "caught up", func() bool {
			p := fsm.Position{}
			w.watch.mu.Lock()
			for x := range w.watch.watchers {
				p = x.position()
			}
			w.watch.mu.Unlock()
			return !p.Before(fsm.Position{Index: last + 1})
		})
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if view == nil {
			t.Fatal("no initial view")
		}
		if round == 4 {
			for k, n := range seen {
				if l, _, _ := w.fsm.Lease(k); l.Renewals != n {
					t.Fatalf("%s: %d renewals, the watcher saw %d", k, l.Renewals, n)
				}
			}
		}
	}
}
