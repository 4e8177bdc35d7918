package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// eventID identifies an event and what it says, for comparing streams.
func eventID(e *coordv1.WatchEvent) string {
	return fmt.Sprintf("%d.%d %s %s gen=%d renewals=%d released=%t", e.GetIndex(), e.GetPosition(), e.GetKind(), e.GetKey(),
		e.GetLease().GetGeneration(), e.GetLease().GetRenewals(), e.GetLease().GetReleased())
}

// watchUntil collects the events of w until one has key stop.
func watchUntil(t *testing.T, w *client.Watcher, stop string, timeout time.Duration) []*coordv1.WatchEvent {
	t.Helper()
	var got []*coordv1.WatchEvent
	deadline := time.After(timeout)
	for {
		select {
		case resp, ok := <-w.Responses():
			if !ok {
				t.Fatalf("watch ended after %d events: %v", len(got), w.Err())
			}
			for _, e := range resp.Events {
				got = append(got, e)
				if e.GetKey() == stop {
					return got
				}
			}
		case <-deadline:
			t.Fatalf("no %q after %s (%d events)", stop, timeout, len(got))
		}
	}
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func nodeAt(c *testcluster.Cluster, addr string) *testcluster.Node {
	for i, ep := range c.Endpoints() {
		if ep == addr {
			return c.Nodes[i]
		}
	}
	return nil
}

// A watcher sees every change exactly once, in index order, while the node
// it is connected to is stopped and restarted twice with writes going on:
// its stream equals that of a watcher on a node that never stopped, and
// holds every grant and release the writers were told about.
func TestWatchAcrossNodeRestarts(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	c := testcluster.New(t, 3)
	cl := newClient(t, c, "watcher", client.WithRetryBackoff(10*time.Millisecond, 200*time.Millisecond),
		client.WithLogger(slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer rcancel()

	// Where "now" is: the first response of a watch from now.
	w := cl.Watch(ctx, "w/", 0)
	var start uint64
	select {
	case r := <-w.Responses():
		start = r.ResumeIndex
	case <-ctx.Done():
		t.Fatal("no first response")
	}
	first := w.Endpoint()
	// Read the watch all along (a watch nobody reads stays on its stream).
	var (
		gotMu sync.Mutex
		got   []*coordv1.WatchEvent
		ended = make(chan struct{})
	)
	go func() {
		defer close(ended)
		for r := range w.Responses() {
			gotMu.Lock()
			got = append(got, r.Events...)
			gotMu.Unlock()
		}
	}()
	has := func(key string) bool {
		gotMu.Lock()
		defer gotMu.Unlock()
		for _, e := range got {
			if e.GetKey() == key {
				return true
			}
		}
		return false
	}

	// Writers: acquire and release, recording what they were told.
	var (
		mu      sync.Mutex
		granted = map[string]bool{} // "name gen"
	)
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 6 {
		writer := newClient(t, c, fmt.Sprintf("writer%d", i), client.WithRetryBackoff(10*time.Millisecond, 200*time.Millisecond))
		wg.Go(func() {
			for n := 0; wctx.Err() == nil; n++ {
				name := fmt.Sprintf("w/%d-%d", i, n%4)
				l, err := writer.Acquire(wctx, name, 5*time.Second)
				if err != nil {
					continue // a failover: the next name
				}
				mu.Lock()
				granted[fmt.Sprintf("%s %d", name, l.Generation())] = true
				mu.Unlock()
				_ = l.Release(wctx)
			}
		})
	}

	restarted := map[string]bool{}
	for round := range 2 {
		time.Sleep(time.Second)
		victim := nodeAt(c, w.Endpoint())
		if victim == nil || !victim.Running() {
			t.Fatalf("round %d: the watcher's node %s is not a running member", round, w.Endpoint())
		}
		t.Logf("round %d: stopping %s, which serves the watch (leader: %t)", round, victim.ID, victim.Node.IsLeader())
		c.Stop(victim)
		time.Sleep(700 * time.Millisecond)
		c.Restart(victim)
		restarted[victim.ID] = true
		c.WaitLeader()
	}
	time.Sleep(500 * time.Millisecond)
	stopWriters()
	wg.Wait()
	if _, err := newClient(t, c, "marker").Acquire(ctx, "w/zz-end", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Eventually("the watcher sees the end marker", 30*time.Second, func() bool { return has("w/zz-end") })
	cancel()
	<-ended
	if w.Endpoint() == first {
		t.Logf("the watch came back to %s", first)
	}

	// Order: strictly increasing positions, none twice.
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if b.GetIndex() < a.GetIndex() || (b.GetIndex() == a.GetIndex() && b.GetPosition() <= a.GetPosition()) {
			t.Fatalf("event %s after %s", eventID(b), eventID(a))
		}
	}
	if got[0].GetIndex() < start {
		t.Fatalf("first event %s before the start %d", eventID(got[0]), start)
	}
	// Every grant the writers were told about is there.
	seen := map[string]bool{}
	for _, e := range got {
		if e.GetKind() == coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT && !e.GetLease().GetReleased() && e.GetLease().GetRenewals() == 0 {
			seen[fmt.Sprintf("%s %d", e.GetKey(), e.GetLease().GetGeneration())] = true
		}
	}
	mu.Lock()
	for g := range granted {
		if !seen[g] {
			t.Fatalf("grant %s is not in the stream", g)
		}
	}
	t.Logf("%d events from index %d, %d grants, %d restarts", len(got), start, len(granted), len(restarted))
	mu.Unlock()

	// The same stream, read in one go from a node that was never stopped.
	var steady *testcluster.Node
	for _, n := range c.Nodes {
		if !restarted[n.ID] {
			steady = n
		}
	}
	ref, err := client.New(rctx, []string{steady.API.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want := watchUntil(t, ref.Watch(rctx, "w/", start), "w/zz-end", 30*time.Second)
	if len(want) != len(got) {
		t.Fatalf("%d events across restarts, %d on %s", len(got), len(want), steady.ID)
	}
	for i := range want {
		if eventID(got[i]) != eventID(want[i]) {
			t.Fatalf("event %d: %s across restarts, %s on %s", i, eventID(got[i]), eventID(want[i]), steady.ID)
		}
	}
}

// A watch from an index the nodes no longer hold fails with
// FAILED_PRECONDITION / WATCH_INDEX_COMPACTED and the oldest index; the
// client then re-reads (an initial set) and watches on.
func TestWatchIndexCompacted(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.Node.Watch.Events = 32 }))
	cl := newClient(t, c, "o")
	ctx := ctxT(t)
	for i := range 40 {
		if _, err := cl.Acquire(ctx, fmt.Sprintf("c/%d", i), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Raw, on one node: the status and its metadata.
	s, err := coordv1.NewWatchClient(c.Conn(c.Nodes[0])).Watch(ctx, &coordv1.WatchRequest{Prefix: "c/", StartIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	meta := wantErr(t, err, codes.FailedPrecondition, coorderr.Name(coorderr.WatchIndexCompacted))
	if meta["oldest_index"] == "" || meta["oldest_index"] == "1" {
		t.Fatalf("metadata %v", meta)
	}
	// The SDK tries every node, then gives up with ErrWatchCompacted.
	w := cl.Watch(ctx, "c/", 1)
	for range w.Responses() {
	}
	if !errors.Is(w.Err(), client.ErrWatchCompacted) || client.OldestIndex(w.Err()) <= 1 {
		t.Fatalf("watch from 1: %v (oldest %d)", w.Err(), client.OldestIndex(w.Err()))
	}
	// Re-read and watch on: the initial set has all 40, then changes.
	w = cl.Watch(ctx, "c/", 0, client.WatchInitial(), client.WatchFamilies(coordv1.WatchFamily_WATCH_FAMILY_LEASE))
	existing := 0
	for r := range w.Responses() {
		for _, e := range r.Events {
			if e.GetKind() == coordv1.WatchEventKind_WATCH_EVENT_KIND_EXISTING {
				existing++
			}
		}
		if r.Synced {
			break
		}
	}
	if existing != 40 {
		t.Fatalf("initial set of %d leases", existing)
	}
	if _, err := cl.Acquire(ctx, "c/new", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := watchUntil(t, w, "c/new", 10*time.Second); got[len(got)-1].GetKind() != coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT {
		t.Fatalf("after the initial set: %v", got)
	}
}

// A watcher that does not read is dropped with RESOURCE_EXHAUSTED /
// WATCHER_TOO_SLOW once its unread events leave the ring, and writes go on
// at their pace meanwhile.
func TestWatchSlowWatcherDropped(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.Node.Watch.Events = 64 }))
	cl := newClient(t, c, "o")
	ctx := ctxT(t)
	big := make([]byte, 60<<10)
	// A fixed 64 KiB flow-control window (no BDP growth): the node can get
	// about one completed window ahead of a reader that does not read.
	conn, err := grpc.NewClient(c.Endpoints()[0], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := coordv1.NewWatchClient(conn).Watch(ctx, &coordv1.WatchRequest{Prefix: "slow/"}, grpc.MaxCallRecvMsgSize(32<<20))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil { // the start; then it stops reading
		t.Fatal(err)
	}
	// Completed windows carry their result: the stream's flow-control window
	// fills after a few, and the ring of 64 moves past the watcher.
	l, err := cl.Acquire(ctx, "slow/lease", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := range 200 {
		win := fmt.Sprintf("w%d", i)
		claim, err := l.ClaimWindow(ctx, "slow/job", win)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := claim.Complete(ctx, big); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("400 writes in %s with a stuck watcher", time.Since(began))
	var end error
	for n := 0; end == nil; n++ {
		_, end = s.Recv()
	}
	wantErr(t, end, codes.ResourceExhausted, coorderr.Name(coorderr.WatcherTooSlow))
	c.Eventually("the watcher gone", 5*time.Second, func() bool { return c.Nodes[0].Node.Watchers() == 0 })
}
