package node

import (
	"context"
	"time"

	"github.com/coordd/coordd/internal/backoff"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// AddVoterFunc asks the member at the gRPC address addr to add (or update)
// a voter: the API's Cluster.AddVoter call over its peer connections. (An
// alias, so the API's interface can spell the type without this package.)
type AddVoterFunc = func(ctx context.Context, addr string, req *coordv1.AddVoterRequest) error

// Advertise tells the node the gRPC address its API serves on, and how to
// reach other members' APIs. The node then keeps that address in the
// replicated member table (so every node can point clients at the leader)
// and, with Config.Join, asks that member for admission until it is in the
// configuration. api.Serve calls it once it listens.
func (n *Node) Advertise(grpcAddr string, addVoter AddVoterFunc) {
	if !n.advertised.CompareAndSwap(nil, &grpcAddr) {
		return
	}
	n.log.Info("API advertised", "grpc", grpcAddr)
	n.wg.Go(func() { n.registerSelf(addVoter) })
	if n.cfg.Join != "" {
		n.wg.Go(func() { n.joinLoop(addVoter) })
	}
}

func (n *Node) advertisedAddr() string {
	if p := n.advertised.Load(); p != nil {
		return *p
	}
	return ""
}

func (n *Node) selfRequest() *coordv1.AddVoterRequest {
	return &coordv1.AddVoterRequest{Id: n.cfg.ID, RaftAddress: n.RaftAddr(), GrpcAddress: n.advertisedAddr()}
}

// registerSelf keeps this node's gRPC address in the member table. The
// leader writes its own record; a follower that is a member asks the
// leader through AddVoter (idempotent).
func (n *Node) registerSelf(addVoter AddVoterFunc) {
	for n.sleep(n.ctx, 250*time.Millisecond, nil) {
		if n.memberAddr(n.cfg.ID) == n.advertisedAddr() || !n.IsMember(n.cfg.ID) {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		var err error
		if n.IsLeader() {
			_, err = n.Propose(ctx, &fsmv1.SetMember{Id: n.cfg.ID, GrpcAddress: n.advertisedAddr()})
		} else if _, addr := n.Leader(); addr != "" {
			err = addVoter(ctx, addr, n.selfRequest())
		}
		cancel()
		if err != nil {
			n.log.Debug("registering gRPC address failed; will retry", "err", err)
		}
	}
}

// joinBackoff spaces a joining node's attempts: 200 ms doubling to 5 s,
// up to a fifth less at random so nodes started together spread out.
var joinBackoff = backoff.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// joinLoop asks the member at Config.Join to add this node until it is in
// the configuration.
func (n *Node) joinLoop(addVoter AddVoterFunc) {
	retry := backoff.New(joinBackoff)
	for !n.IsMember(n.cfg.ID) {
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		err := addVoter(ctx, n.cfg.Join, n.selfRequest())
		cancel()
		if err == nil {
			n.log.Info("joined the cluster", "via", n.cfg.Join)
			return
		}
		d := retry.Next()
		n.log.Warn("join failed; retrying", "via", n.cfg.Join, "err", err, "in", d)
		if !n.sleep(n.ctx, d, nil) {
			return
		}
	}
}
