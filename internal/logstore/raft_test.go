package logstore

import (
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/testutil"
)

// sumFSM adds up uint64 commands.
type sumFSM struct {
	mu       sync.Mutex
	n, total uint64
}

func (f *sumFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.total += binary.BigEndian.Uint64(l.Data)
	return nil
}

func (f *sumFSM) state() (uint64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.total
}

type sumSnapshot struct{ n, total uint64 }

func (f *sumFSM) Snapshot() (raft.FSMSnapshot, error) {
	n, total := f.state()
	return sumSnapshot{n, total}, nil
}

func (s sumSnapshot) Persist(sink raft.SnapshotSink) error {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], s.n)
	binary.BigEndian.PutUint64(b[8:], s.total)
	if _, err := sink.Write(b[:]); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (sumSnapshot) Release() {}

func (f *sumFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [16]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n, f.total = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	return nil
}

type raftNode struct {
	id    string
	dir   string
	st    *Store
	fsm   *sumFSM
	trans *raft.InmemTransport
	// tcp, when set, is the node's transport instead of trans: hashicorp's
	// NetworkTransport on loopback, as coordd's nodes talk. stop closes it,
	// so such a node is not started again.
	tcp *raft.NetworkTransport
	r   *raft.Raft
}

// address is the node's Raft address on its transport.
func (n *raftNode) address() raft.ServerAddress {
	if n.tcp != nil {
		return n.tcp.LocalAddr()
	}
	return raft.ServerAddress(n.id)
}

type raftCluster struct {
	t     testing.TB
	kind  Kind
	nodes []*raftNode
	// serial: the leader writes before it replicates (ParallelLeaderWrite off).
	serial bool
}

func (c *raftCluster) start(n *raftNode) {
	c.t.Helper()
	n.st = mustOpen(c.t, n.dir, Options{Kind: c.kind, WALSegmentSize: 16 << 10})
	if n.st.Kind != c.kind {
		c.t.Fatalf("%s opened %s", n.id, n.st.Kind)
	}
	n.fsm = &sumFSM{}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.dir, 2, hclog.NewNullLogger())
	if err != nil {
		c.t.Fatal(err)
	}
	var trans raft.Transport = n.tcp
	if n.tcp == nil {
		_, n.trans = raft.NewInmemTransport(raft.ServerAddress(n.id))
		for _, o := range c.nodes {
			if o != n && o.r != nil {
				n.trans.Connect(raft.ServerAddress(o.id), o.trans)
				o.trans.Connect(raft.ServerAddress(n.id), n.trans)
			}
		}
		trans = n.trans
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(n.id)
	conf.ParallelLeaderWrite = !c.serial
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.SnapshotThreshold, conf.SnapshotInterval = 1<<40, time.Hour // snapshots on demand only
	conf.TrailingLogs = 20
	conf.Logger = hclog.NewNullLogger()
	logs, err := raft.NewLogCache(64, n.st.Logs)
	if err != nil {
		c.t.Fatal(err)
	}
	existing, err := raft.HasExistingState(logs, n.st.Stable, snaps)
	if err != nil {
		c.t.Fatal(err)
	}
	if n.r, err = raft.NewRaft(conf, n.fsm, logs, n.st.Stable, snaps, trans); err != nil {
		c.t.Fatal(err)
	}
	if !existing && n == c.nodes[0] {
		var servers []raft.Server
		for _, o := range c.nodes {
			servers = append(servers, raft.Server{ID: raft.ServerID(o.id), Address: o.address()})
		}
		if err := n.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *raftCluster) stop(n *raftNode) {
	c.t.Helper()
	if err := n.r.Shutdown().Error(); err != nil {
		c.t.Fatal(err)
	}
	if n.tcp != nil {
		if err := n.tcp.Close(); err != nil {
			c.t.Fatal(err)
		}
	}
	for _, o := range c.nodes {
		if o != n && o.trans != nil {
			o.trans.Disconnect(raft.ServerAddress(n.id))
		}
	}
	n.r = nil
	closeStore(c.t, n.st)
}

func (c *raftCluster) leader() *raftNode {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			if n.r != nil && n.r.State() == raft.Leader {
				return n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader")
	return nil
}

// apply proposes values from..to on the leader, many in flight.
func (c *raftCluster) apply(from, to uint64) {
	c.t.Helper()
	l := c.leader()
	var fs []raft.ApplyFuture
	for v := from; v <= to; v++ {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, v)
		fs = append(fs, l.r.Apply(b, 5*time.Second))
	}
	for _, f := range fs {
		if err := f.Error(); err != nil {
			c.t.Fatalf("apply: %v", err)
		}
	}
}

// converged waits until every running node applied n commands adding up
// to the sum of 1..n.
func (c *raftCluster) converged(n uint64) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, nd := range c.nodes {
			if nd.r == nil {
				continue
			}
			if got, total := nd.fsm.state(); got != n || total != n*(n+1)/2 {
				ok = false
				if time.Now().After(deadline) {
					c.t.Fatalf("%s applied %d commands (sum %d), want %d", nd.id, got, total, n)
				}
			}
		}
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkLog reads every entry a node's store holds. The bolt store may keep
// a gap below an installed snapshot (raft only clears the whole log for
// stores that refuse gaps, like the WAL).
func checkLog(t *testing.T, n *raftNode) (first, last uint64) {
	t.Helper()
	first, err := n.st.Logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err = n.st.Logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i <= last && last > 0; i++ {
		var l raft.Log
		err := n.st.Logs.GetLog(i, &l)
		if err == raft.ErrLogNotFound && n.st.Kind == Bolt && i < last {
			continue
		}
		if err != nil || l.Index != i {
			t.Fatalf("%s: entry %d of %d..%d: %v", n.id, i, first, last, err)
		}
	}
	return first, last
}

// Raft on each store: a follower misses enough entries that the leader
// compacted them after a snapshot, so it gets the snapshot, its log is
// replaced, and it follows on; then every node restarts from its store.
func TestRaftSnapshotsTruncationAndRestartOnEachStore(t *testing.T) {
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			c := &raftCluster{t: t, kind: k}
			base := t.TempDir()
			for i := 1; i <= 3; i++ {
				c.nodes = append(c.nodes, &raftNode{id: fmt.Sprintf("n%d", i), dir: filepath.Join(base, fmt.Sprintf("n%d", i))})
			}
			for _, n := range c.nodes {
				c.start(n)
			}
			t.Cleanup(func() {
				for _, n := range c.nodes {
					if n.r != nil {
						c.stop(n)
					}
				}
			})
			c.apply(1, 100)
			c.converged(100)

			var lagging *raftNode
			for _, n := range c.nodes {
				if n != c.leader() {
					lagging = n
					break
				}
			}
			_, lagLast := checkLog(t, lagging)
			c.stop(lagging)
			c.apply(101, 400)
			for _, n := range c.nodes {
				if n.r != nil {
					if err := n.r.Snapshot().Error(); err != nil {
						t.Fatalf("snapshot on %s: %v", n.id, err)
					}
				}
			}
			l := c.leader()
			first, _ := checkLog(t, l)
			if first <= lagLast+1 {
				t.Fatalf("the leader kept entries from %d; the lagging node needs %d: no snapshot install to test", first, lagLast+1)
			}
			c.start(lagging)
			c.converged(400)
			c.apply(401, 450)
			c.converged(450)
			lFirst, lLast := checkLog(t, c.leader())
			gFirst, gLast := checkLog(t, lagging)
			// The WAL's log was cleared and restarted after the snapshot; bolt
			// keeps its old entries below a gap.
			if gLast != lLast || (k == WAL && gFirst <= lagLast) {
				t.Fatalf("after the snapshot install: leader log %d..%d, lagging node %d..%d (had up to %d)", lFirst, lLast, gFirst, gLast, lagLast)
			}

			for _, n := range c.nodes {
				c.stop(n)
			}
			for _, n := range c.nodes {
				c.start(n)
			}
			c.apply(451, 500)
			c.converged(500)
			for _, n := range c.nodes {
				checkLog(t, n)
			}
		})
	}
}

// BenchmarkRaftCommit: one client's commits one after the other through a
// 3-node cluster (each node on its own store on this disk), so ns/op is the
// commit latency: with serial the leader's write and then a follower's are
// on the critical path, with parallel one of them
// (raft.Config.ParallelLeaderWrite, third_party/raft/README.fork.md). The
// nodes talk over the in-memory transport, and with tcp over hashicorp's
// NetworkTransport on loopback, as coordd's do; cpu-µs/op is this process's
// CPU (the three nodes, user and system) per commit.
//
//	go test ./internal/logstore/ -run '^$' -bench RaftCommit -benchtime 2000x -count 3
func BenchmarkRaftCommit(b *testing.B) {
	for _, k := range kinds {
		for _, mode := range []struct {
			name        string
			serial, tcp bool
		}{{"serial=true", true, false}, {"serial=false", false, false}, {"serial=false/tcp", false, true}} {
			b.Run(fmt.Sprintf("%s/%s", k, mode.name), func(b *testing.B) {
				c := &raftCluster{t: b, kind: k, serial: mode.serial}
				base := b.TempDir()
				for i := 1; i <= 3; i++ {
					n := &raftNode{id: fmt.Sprintf("n%d", i), dir: filepath.Join(base, fmt.Sprintf("n%d", i))}
					if mode.tcp {
						tcp, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
						if err != nil {
							b.Fatal(err)
						}
						n.tcp = tcp
					}
					c.nodes = append(c.nodes, n)
				}
				for _, n := range c.nodes {
					c.start(n)
				}
				defer func() {
					for _, n := range c.nodes {
						c.stop(n)
					}
				}()
				l := c.leader()
				if err := l.r.Barrier(10 * time.Second).Error(); err != nil {
					b.Fatal(err)
				}
				cmd := make([]byte, 8)
				cpu0 := testutil.ProcessCPU()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					binary.BigEndian.PutUint64(cmd, uint64(i))
					if err := l.r.Apply(cmd, 5*time.Second).Error(); err != nil {
						b.Fatalf("apply %d: %v", i, err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}
