package node

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/testutil"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// fakeRaft is the node's Raft in unit tests: a leader of its own that
// applies each entry to the FSM at once (or, with hold, when the test lets
// it), and counts entries. Methods the tests do not need panic (the
// embedded nil interface).
type fakeRaft struct {
	raftAPI
	fsm     raftFSM
	id      raft.ServerID
	servers []raft.Server

	mu      sync.Mutex
	entries [][]byte      // every entry appended, in order
	hold    bool          // queue futures until release
	held    []*heldFuture // futures waiting for release
	failAll error         // answer every entry with this error
	leader  raft.ServerID
	n       atomic.Int64 // entries appended
	applied atomic.Uint64
	barrier chan struct{} // non-nil: Barrier answers once it is closed
}

func (r *fakeRaft) Apply(data []byte, _ time.Duration) raft.ApplyFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, data)
	r.n.Add(1)
	f := &heldFuture{r: r, data: data, done: make(chan struct{})}
	if r.hold {
		r.held = append(r.held, f)
		return f
	}
	f.finish(r.failAll)
	return f
}

// holdEntries keeps the futures of the entries appended from now on until
// release.
func (r *fakeRaft) holdEntries() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold = true
}

// release answers the held futures, in order, with err (nil: apply them).
func (r *fakeRaft) release(err error) {
	r.mu.Lock()
	held := r.held
	r.held, r.hold = nil, false
	r.mu.Unlock()
	for _, f := range held {
		f.finish(err)
	}
}

// count is the number of entries appended so far.
func (r *fakeRaft) count() int { return int(r.n.Load()) }

// entry decodes the i-th entry.
func (r *fakeRaft) entry(t *testing.T, i int) *fsmv1.Command {
	t.Helper()
	r.mu.Lock()
	data := r.entries[i]
	r.mu.Unlock()
	cmd := &fsmv1.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func (r *fakeRaft) Barrier(time.Duration) raft.Future {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.barrier != nil {
		return waitFuture(r.barrier)
	}
	return doneFuture{}
}

// waitFuture answers nil once its channel is closed.
type waitFuture chan struct{}

func (w waitFuture) Error() error { <-w; return nil }

func (r *fakeRaft) VerifyLeader() raft.Future { return doneFuture{} }
func (r *fakeRaft) Shutdown() raft.Future     { return doneFuture{} }
func (r *fakeRaft) CurrentTerm() uint64       { return 1 }
func (r *fakeRaft) AppliedIndex() uint64      { return uint64(r.count()) }
func (r *fakeRaft) State() raft.RaftState     { return raft.Leader }
func (r *fakeRaft) LeaderWithID() (raft.ServerAddress, raft.ServerID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "", r.leader
}
func (r *fakeRaft) GetConfiguration() raft.ConfigurationFuture {
	return configFuture{cfg: raft.Configuration{Servers: r.servers}}
}

type heldFuture struct {
	r    *fakeRaft
	data []byte
	done chan struct{}
	err  error
	resp any
}

func (f *heldFuture) finish(err error) {
	if err == nil {
		f.resp = f.r.fsm.Apply(&raft.Log{Type: raft.LogCommand, Data: f.data, Index: f.r.applied.Add(1)})
	}
	f.err = err
	close(f.done)
}

func (f *heldFuture) Error() error  { <-f.done; return f.err }
func (f *heldFuture) Index() uint64 { return 0 }
func (f *heldFuture) Response() any { <-f.done; return f.resp }

type doneFuture struct{}

func (doneFuture) Error() error { return nil }

type configFuture struct{ cfg raft.Configuration }

func (configFuture) Error() error                        { return nil }
func (configFuture) Index() uint64                       { return 0 }
func (c configFuture) Configuration() raft.Configuration { return c.cfg }

// testNode is a node on a fake Raft and a fake clock, leading and ready,
// without ticks or prunes unless the test configures them.
type testNode struct {
	*Node
	raft  *fakeRaft
	clock *clock.Fake
}

// start is the fake clock's epoch: an arbitrary wall time.
var start = time.Date(2026, 9, 24, 12, 0, 0, 0, time.UTC)

func newTestNode(t *testing.T, opts ...func(*Config)) *testNode {
	t.Helper()
	return newTestNodeAt(t, start, opts...)
}

// newTestNodeAt is newTestNode with the fake clock at epoch.
func newTestNodeAt(t *testing.T, epoch time.Time, opts ...func(*Config)) *testNode {
	t.Helper()
	clk := clock.NewFake(epoch)
	// An idle leader's ticks would add entries as virtual time passes;
	// tests that count entries turn them off (the tick test sets its own).
	cfg := Config{ID: "n1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", Clock: clk, TickInterval: time.Hour,
		PruneInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	n := newNode(cfg.withDefaults())
	fr := &fakeRaft{fsm: raftFSM{f: n.fsm, hub: n.watch}, id: "n1", leader: "n1",
		servers: []raft.Server{{ID: "n1", Address: "127.0.0.1:1", Suffrage: raft.Voter}}}
	n.raft = fr
	n.start()
	t.Cleanup(func() { _ = n.Close() })
	tn := &testNode{Node: n, raft: fr, clock: clk}
	tn.lead(t)
	return tn
}

// lead makes the node the leader and waits until it is ready, its first
// tick is committed and its loop armed its tick and prune tickers.
func (tn *testNode) lead(t *testing.T) {
	t.Helper()
	before := tn.raft.count()
	now := tn.clock.Now()
	tn.notifyCh <- true
	eventually(t, "leadership established", func() bool {
		return tn.IsLeader() && tn.raft.count() > before
	})
	// The tickers by what they are armed for: other leader services arm
	// timers too, so a count of them says nothing (the first tick is
	// committed before its proposal returns and the ticker starts).
	if !tn.clock.WaitArmed(now.Add(tn.cfg.TickInterval/2), 10*time.Second) ||
		!tn.clock.WaitArmed(now.Add(tn.cfg.PruneInterval), 10*time.Second) {
		t.Fatal("the leader's tick and prune tickers not armed")
	}
}

// eventually waits (real time, briefly) for cond: the node's goroutines
// react to what the test did.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Poll(t, what, 10*time.Second, time.Millisecond, cond)
}

// waiting is the number of waiters queued for name.
func (tn *testNode) waiting(name string) int {
	if q := tn.waiters.line(name); q != nil {
		return q.Len()
	}
	return 0
}

func bg() context.Context { return context.Background() }
