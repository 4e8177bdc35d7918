package node

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/probe"
)

func failedNames(cs []probe.Check) string {
	var names []string
	for _, c := range probe.Failed(cs) {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

// Readiness: a leader known, heard from recently (or this node leads past
// its Barrier), the applied index close to the commit index.
func TestReadiness(t *testing.T) {
	const contact, lag = 2 * time.Second, 100
	for _, c := range []struct {
		name   string
		v      raftView
		failed string
	}{
		{"ready follower", raftView{state: raft.Follower, leaderID: "n1", sinceLeader: 50 * time.Millisecond, commit: 10, applied: 10}, ""},
		{"ready leader", raftView{state: raft.Leader, leaderID: "n1", leaderReady: true, commit: 10, applied: 10}, ""},
		{"leader before its barrier", raftView{state: raft.Leader, leaderID: "n1", commit: 10, applied: 9}, "leader_contact"},
		{"candidate", raftView{state: raft.Candidate, sinceLeader: 3 * time.Second, commit: 10, applied: 10}, "leader,leader_contact"},
		{"follower never in contact", raftView{state: raft.Follower, sinceLeader: -1}, "leader,leader_contact"},
		{"follower whose leader went quiet", raftView{state: raft.Follower, leaderID: "n1", sinceLeader: 2500 * time.Millisecond}, "leader_contact"},
		{"lag at the bound", raftView{state: raft.Follower, leaderID: "n1", commit: 200, applied: 100}, ""},
		{"behind", raftView{state: raft.Follower, leaderID: "n1", commit: 201, applied: 100}, "applied"},
		{"shut down", raftView{state: raft.Shutdown, sinceLeader: -1}, "raft,leader,leader_contact"},
	} {
		got := readiness(c.v, contact, lag)
		if f := failedNames(got); f != c.failed {
			t.Errorf("%s: failed %q, want %q (%+v)", c.name, f, c.failed, got)
		}
		if len(got) != 4 {
			t.Errorf("%s: %d checks, want raft, leader, leader_contact, applied", c.name, len(got))
		}
	}
}

// The node's leadership and proposer loops take liveness pings while they
// run, the proposer also while it waits for Raft; once they stopped, they fail after StallTimeout of the node's clock.
func TestLoopsTakeLivenessPings(t *testing.T) {
	n := newTestNode(t)
	if cs := n.live.Loops(); failedNames(cs) != "" || len(cs) != 2 {
		t.Fatalf("running loops: %+v", cs)
	}
	// The proposer waits for Raft: it still turns.
	n.raft.holdEntries()
	done := proposeAsync(bg(), n, acquireCmd("held"))
	eventually(t, "an entry in flight", func() bool {
		n.raft.mu.Lock()
		defer n.raft.mu.Unlock()
		return len(n.raft.held) > 0
	})
	if cs := n.live.Loops(); failedNames(cs) != "" {
		t.Fatalf("proposer with an entry in flight: %+v", cs)
	}
	n.raft.release(nil)
	<-done
	// Stopped loops: still live within the bound, then not.
	n.stop()
	n.wg.Wait()
	n.clock.Advance(n.cfg.StallTimeout)
	if cs := n.live.Loops(); failedNames(cs) != "" {
		t.Fatalf("within the bound: %+v", cs)
	}
	n.clock.Advance(time.Second)
	if f := failedNames(n.live.Loops()); f != "leadership_loop,proposer_loop" {
		t.Fatalf("stopped loops past the bound: failed %q", f)
	}
}
