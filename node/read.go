package node

import (
	"context"

	"github.com/coordd/coordd/fsm"
)

// Read returns the committed state to read and the lease time to judge
// expiry at.
//
// Linearizable (stale false): on the ready leader, after a VerifyLeader
// round with a quorum. Every acknowledged write was applied to the
// leader's FSM before it was acknowledged, so the read sees it; expiry is
// judged at the leader's current lease time. Stale: any node answers
// from its own FSM at its applied clock (it may lag; for dashboards).
//
// The FSM is for reading only: its writes go through Propose.
func (n *Node) Read(ctx context.Context, stale bool) (*fsm.FSM, int64, error) {
	if stale {
		return n.fsm, n.fsm.LeaseTime(), nil
	}
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := n.await(ctx, n.raft.VerifyLeader()); err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, n.notLeader()
	}
	return n.fsm, ls.clock.leaseTime(), nil
}
