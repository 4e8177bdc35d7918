package node

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/probe"
)

// The checks behind /livez and /readyz (api/probes.go serves them,
// docs/configuration.md documents them).
//
// Liveness is this process's own: its loops turn and Raft applies what it
// committed. It never depends on a quorum, so a probe that restarts a
// process on it does not restart a whole cluster that lost one.
// Readiness is whether this node serves reads and writes now: a leader is
// known, this node hears from it (or is it, past its Barrier), and it
// applied what it knows is committed.

// livePings are the channels the node's loops take liveness pings on (in
// the select each waits in).
type livePings struct {
	leadership, proposer <-chan struct{}
}

// pingWait is how long a liveness ping waits for its loop: well inside a
// Kubernetes probe's default 1 s timeout.
const pingWait = 200 * time.Millisecond

func (n *Node) newLiveness() {
	n.live = probe.NewTracker(n.clock, n.cfg.StallTimeout, pingWait)
	n.livePings = livePings{leadership: n.live.Add("leadership_loop"), proposer: n.live.Add("proposer_loop")}
}

// Liveness is /livez's checks: the leadership and proposer loops turn
// (each took a ping within StallTimeout), and the Raft apply loop is not
// stuck below the commit index for longer than StallTimeout.
func (n *Node) Liveness() []probe.Check {
	checks := n.live.Loops()
	r := n.raft
	if r.State() == raft.Shutdown {
		return append(checks, probe.Fail("raft", "raft is shut down"))
	}
	return append(checks, n.live.Progress("raft_apply", r.AppliedIndex(), r.CommitIndex()))
}

// raftView is what readiness is judged on, read from Raft at once.
type raftView struct {
	state       raft.RaftState
	leaderID    string
	leaderReady bool          // this node leads and its Barrier is done
	sinceLeader time.Duration // since a follower last heard from its leader; <0: never
	commit      uint64
	applied     uint64
}

func (n *Node) raftView() raftView {
	r := n.raft
	_, id := r.LeaderWithID()
	v := raftView{state: r.State(), leaderID: string(id), leaderReady: n.IsLeader(),
		commit: r.CommitIndex(), applied: r.AppliedIndex(), sinceLeader: -1}
	if lc := r.LastContact(); !lc.IsZero() {
		v.sinceLeader = time.Since(lc) // Raft's time, not the node's clock
	}
	return v
}

// Readiness is /readyz's checks (see readiness).
func (n *Node) Readiness() []probe.Check {
	return readiness(n.raftView(), n.cfg.ReadyContact, n.cfg.ReadyMaxApplyLag)
}

// readiness judges v: raft runs; a leader is known; the leader is past
// its Barrier, or a follower heard from it within contact; the applied
// index trails the commit index by at most maxLag.
func readiness(v raftView, contact time.Duration, maxLag uint64) []probe.Check {
	checks := make([]probe.Check, 0, 4)
	if v.state == raft.Shutdown {
		checks = append(checks, probe.Fail("raft", "raft is shut down"))
	} else {
		checks = append(checks, probe.Pass("raft"))
	}
	switch {
	case v.leaderID != "":
		checks = append(checks, probe.Pass("leader"))
	default:
		checks = append(checks, probe.Fail("leader", "no leader known (this node is %s)", v.state))
	}
	switch {
	case v.state == raft.Leader && v.leaderReady:
		checks = append(checks, probe.Pass("leader_contact"))
	case v.state == raft.Leader:
		checks = append(checks, probe.Fail("leader_contact", "this node leads but has not applied its predecessors' entries yet (Barrier)"))
	case v.sinceLeader < 0:
		checks = append(checks, probe.Fail("leader_contact", "this node has never heard from a leader"))
	case v.sinceLeader > contact:
		checks = append(checks, probe.Fail("leader_contact", "last heard from the leader %s ago (bound %s)",
			v.sinceLeader.Round(time.Millisecond), contact))
	default:
		checks = append(checks, probe.Pass("leader_contact"))
	}
	if v.commit > v.applied && v.commit-v.applied > maxLag {
		checks = append(checks, probe.Fail("applied", "applied index %d trails the commit index %d by %d (bound %d)",
			v.applied, v.commit, v.commit-v.applied, maxLag))
	} else {
		checks = append(checks, probe.Pass("applied"))
	}
	return checks
}
