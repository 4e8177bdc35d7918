// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gatedLogStore is a LogStore whose StoreLogs can be held (until released)
// or made to fail.
type gatedLogStore struct {
	LogStore

	mu      sync.Mutex
	gate    chan struct{} // non-nil: StoreLogs waits until it is closed
	fail    error         // non-nil: StoreLogs returns it
	entered chan struct{} // a StoreLogs is waiting at the gate
}

func newGatedLogStore(s LogStore) *gatedLogStore {
	return &gatedLogStore{LogStore: s, entered: make(chan struct{}, 1)}
}

func (g *gatedLogStore) StoreLog(l *Log) error { return g.StoreLogs([]*Log{l}) }

func (g *gatedLogStore) StoreLogs(logs []*Log) error {
	g.mu.Lock()
	gate, fail := g.gate, g.fail
	g.mu.Unlock()
	if fail != nil {
		return fail
	}
	if gate != nil {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-gate
	}
	return g.LogStore.StoreLogs(logs)
}

func (g *gatedLogStore) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gatedLogStore) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gatedLogStore) failWith(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail = err
}

// makeGatedCluster starts n peers with ParallelLeaderWrite, each on a
// gatedLogStore.
func makeGatedCluster(t *testing.T, n int) (*cluster, []*gatedLogStore) {
	conf := inmemConfig(t)
	conf.ParallelLeaderWrite = true
	// A held write must not make the leader lose its lease while the test
	// looks at it.
	conf.LeaderLeaseTimeout = 500 * time.Millisecond
	conf.HeartbeatTimeout = 500 * time.Millisecond
	conf.ElectionTimeout = 500 * time.Millisecond
	stores := make([]*gatedLogStore, n)
	c := MakeClusterCustom(t, &MakeClusterOpts{
		Peers: n, Bootstrap: true, Conf: conf,
		WrapLogStore: func(i int, logs LogStore) LogStore {
			stores[i] = newGatedLogStore(logs)
			return stores[i]
		},
	})
	return c, stores
}

// selfMatch is the leader's own match index in its commitment.
func selfMatch(r *Raft) uint64 {
	c := r.leaderState.commitment
	c.Lock()
	defer c.Unlock()
	return c.matchIndexes[r.localID]
}

func peerMatch(r *Raft, id ServerID) uint64 {
	c := r.leaderState.commitment
	c.Lock()
	defer c.Unlock()
	return c.matchIndexes[id]
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func lastStored(t *testing.T, s LogStore) uint64 {
	t.Helper()
	idx, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	return idx
}

// The followers commit an entry while the leader's own write is held, and
// the leader counts itself only once its write has returned.
func TestRaft_ParallelLeaderWrite_FollowersCommitWhileLeaderWriteHeld(t *testing.T) {
	c, stores := makeGatedCluster(t, 3)
	defer c.Close()
	leader := c.Leader()
	c.WaitForReplication(0)
	if err := leader.Barrier(0).Error(); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	ls := stores[c.IndexOf(leader)]
	defer ls.release() // before c.Close: shutdown waits for the write

	ls.hold()
	future := leader.Apply([]byte("held"), 0)
	<-ls.entered // the leader's write of the entry has started and waits
	if err := future.Error(); err != nil {
		t.Fatalf("apply with the leader's write held: %v", err)
	}
	idx := future.Index()
	if got := lastStored(t, ls); got >= idx {
		t.Fatalf("leader store holds index %d before its write was released (entry %d)", got, idx)
	}
	if got := selfMatch(leader); got >= idx {
		t.Fatalf("leader's own match index is %d before its write returned (entry %d)", got, idx)
	}
	// The entry was applied on the leader although not yet durable there.
	if logs := getMockFSM(c.fsms[c.IndexOf(leader)]).Logs(); len(logs) != 1 || string(logs[0]) != "held" {
		t.Fatalf("leader FSM: %q", logs)
	}

	ls.release()
	waitFor(t, "the leader's match index", func() bool { return selfMatch(leader) >= idx })
	if got := lastStored(t, ls); got < idx {
		t.Fatalf("leader store ends at %d after its write returned (entry %d)", got, idx)
	}
	c.WaitForReplication(1)
	c.EnsureSame(t)
}

// With one follower down, the leader's own write is part of every quorum:
// nothing commits until it returns.
func TestRaft_ParallelLeaderWrite_NoCommitWithoutLeaderWhenQuorumNeedsIt(t *testing.T) {
	c, stores := makeGatedCluster(t, 3)
	defer c.Close()
	leader := c.Leader()
	c.WaitForReplication(0)
	if err := leader.Barrier(0).Error(); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	followers := c.Followers()
	down, up := followers[0], followers[1]
	c.Disconnect(down.localAddr)
	ls := stores[c.IndexOf(leader)]
	defer ls.release() // before c.Close: shutdown waits for the write

	ls.hold()
	future := leader.Apply([]byte("needs-leader"), 0)
	<-ls.entered
	// Wait until the remaining follower has the entry and the leader has
	// recorded that; the commit index is recalculated on that match.
	var idx uint64
	waitFor(t, "the follower's match", func() bool {
		idx = leader.getLastIndex()
		return peerMatch(leader, up.localID) >= idx
	})
	if ci := leader.leaderState.commitment.getCommitIndex(); ci >= idx {
		t.Fatalf("commit index %d covers entry %d with only one follower and the leader's write held", ci, idx)
	}
	select {
	case <-future.(*logFuture).errCh:
		t.Fatalf("apply finished before the leader's write returned: %v", future.Error())
	default:
	}

	ls.release()
	if err := future.Error(); err != nil {
		t.Fatalf("apply after the leader's write returned: %v", err)
	}
	if future.Index() != idx {
		t.Fatalf("entry index %d, want %d", future.Index(), idx)
	}
	c.FullyConnect()
	c.WaitForReplication(1)
	c.EnsureSame(t)
}

// A failed leader write makes the leader step down; the entry's index is
// not given to another entry in the leader's term, and the logs still match.
func TestRaft_ParallelLeaderWrite_FailedWriteStepsDown(t *testing.T) {
	c, stores := makeGatedCluster(t, 3)
	defer c.Close()
	leader := c.Leader()
	c.WaitForReplication(0)
	if err := leader.Barrier(0).Error(); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	term := leader.getCurrentTerm()
	ls := stores[c.IndexOf(leader)]

	ls.failWith(errors.New("disk on fire"))
	future := leader.Apply([]byte("lost-write"), 0)
	err := future.Error()
	if !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("apply with a failing leader write: %v, want %v", err, ErrLeadershipLost)
	}
	idx := future.Index()
	waitFor(t, "the leader to step down", func() bool { return leader.State() != Leader })
	ls.failWith(nil)

	// The cluster goes on under a new leader, in a newer term.
	var next *Raft
	waitFor(t, "a new leader", func() bool {
		l := c.GetInState(Leader)
		if len(l) == 1 && l[0].getCurrentTerm() > term {
			next = l[0]
			return true
		}
		return false
	})
	for i := 0; i < 5; i++ {
		if err := next.Apply([]byte(fmt.Sprintf("after-%d", i)), 0).Error(); err != nil {
			t.Fatalf("apply on the new leader: %v", err)
		}
	}
	if err := next.Barrier(0).Error(); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	last := next.getLastIndex()
	waitFor(t, "every node to store the log", func() bool {
		for _, s := range stores {
			if i, _ := s.LastIndex(); i < last {
				return false
			}
		}
		return true
	})
	c.EnsureSame(t)

	// Every node's log: the entry at idx in the old term is the one whose
	// write failed (never another one), and the logs agree entry by entry.
	for i := uint64(1); i <= last; i++ {
		var want *Log
		for n, s := range stores {
			var l Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatalf("node %d: index %d: %v", n, i, err)
			}
			if l.Term == term && l.Index >= idx && l.Type == LogCommand && string(l.Data) != "lost-write" {
				t.Fatalf("node %d: index %d of the failed leader's term %d holds %q", n, i, term, l.Data)
			}
			if want == nil {
				want = &l
				continue
			}
			if l.Term != want.Term || l.Type != want.Type || string(l.Data) != string(want.Data) {
				t.Fatalf("index %d: node %d has term %d %q, node 0 term %d %q", i, n, l.Term, l.Data, want.Term, want.Data)
			}
		}
	}
}

// A snapshot does not cover an entry that is not durable in the local log.
func TestRaft_ParallelLeaderWrite_WaitLocalDurable(t *testing.T) {
	r := &Raft{pending: newPendingLogs(), shutdownCh: make(chan struct{})}
	r.setLastLog(7, 1)
	r.pending.add([]*Log{{Index: 6, Term: 1}, {Index: 7, Term: 1}})

	if err := r.waitLocalDurable(5); err != nil {
		t.Fatalf("index 5 is durable: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.waitLocalDurable(6) }()
	select {
	case err := <-done:
		t.Fatalf("waitLocalDurable(6) returned %v while 6 is pending", err)
	case <-time.After(20 * time.Millisecond):
	}
	r.pending.release(6)
	if err := <-done; err != nil {
		t.Fatalf("after 6 was written: %v", err)
	}

	// The write of 7 failed: the last log index goes back to 6 first.
	go func() { done <- r.waitLocalDurable(7) }()
	r.setLastLog(6, 1)
	r.pending.clear()
	if err := <-done; err == nil {
		t.Fatalf("waitLocalDurable(7) after the write of 7 failed: want an error")
	}
}

// Entries pending in the leader's buffer are readable through getLog.
func TestRaft_ParallelLeaderWrite_GetLogReadsPending(t *testing.T) {
	store := NewInmemStore()
	if err := store.StoreLogs([]*Log{{Index: 1, Term: 1, Data: []byte("one")}}); err != nil {
		t.Fatal(err)
	}
	r := &Raft{pending: newPendingLogs(), logs: store}
	r.pending.add([]*Log{{Index: 2, Term: 1, Data: []byte("two")}})
	for _, tc := range []struct {
		index uint64
		data  string
	}{{1, "one"}, {2, "two"}} {
		var l Log
		if err := r.getLog(tc.index, &l); err != nil || string(l.Data) != tc.data {
			t.Fatalf("getLog(%d) = %q, %v; want %q", tc.index, l.Data, err, tc.data)
		}
	}
	var l Log
	if err := r.getLog(3, &l); !errors.Is(err, ErrLogNotFound) {
		t.Fatalf("getLog(3): %v, want ErrLogNotFound", err)
	}
}
