package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/backoff"
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

// registerSelf keeps this node's entry current: its advertised Raft
// address in the Raft configuration and its gRPC address in the member
// table. The leader updates its own; a follower that is a member asks the
// leader through AddVoter (idempotent; with a new Raft address, Raft
// replaces the entry of the same id). A node whose Raft address changed
// (restarted with a new --raft-advertise-addr) hears from no leader, which
// dials the old address, so with no leader known it asks the other members
// it knows (and Config.Join), who forward the call to the leader.
func (n *Node) registerSelf(addVoter AddVoterFunc) {
	logged := ""
	for n.sleep(n.ctx, 250*time.Millisecond, nil) {
		inConfig, member := n.selfEntry()
		if !member || (inConfig == n.RaftAddr() && n.memberAddr(n.cfg.ID) == n.advertisedAddr()) {
			continue
		}
		if inConfig != n.RaftAddr() && logged != inConfig {
			logged = inConfig
			n.log.Info("the Raft configuration has this node at another address; asking to update it",
				"configured", inConfig, "advertised", n.RaftAddr())
		}
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		err := n.register(ctx, addVoter)
		cancel()
		if err != nil {
			n.log.Debug("registering this node's addresses failed; will retry", "err", err)
		}
	}
}

// selfEntry is this node's Raft address in the configuration, if it is a
// server of it.
func (n *Node) selfEntry() (string, bool) {
	servers, _ := n.servers()
	for _, srv := range servers {
		if string(srv.ID) == n.cfg.ID {
			return string(srv.Address), true
		}
	}
	return "", false
}

// register makes one round of registerSelf: on the leader, its own
// AddVoter; else through the leader, or with none known through each
// member (and Config.Join) until one answers.
func (n *Node) register(ctx context.Context, addVoter AddVoterFunc) error {
	req := n.selfRequest()
	if n.IsLeader() {
		_, err := n.AddVoter(ctx, req.GetId(), req.GetRaftAddress(), req.GetGrpcAddress())
		return err
	}
	if _, addr := n.Leader(); addr != "" {
		return addVoter(ctx, addr, req)
	}
	var errs []error
	for _, addr := range n.registrars() {
		err := addVoter(ctx, addr, req)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("via %s: %w", addr, err))
	}
	if len(errs) == 0 {
		return errors.New("no leader known and no other member's gRPC address")
	}
	return errors.Join(errs...)
}

// registrars are the gRPC addresses of the other members this node knows
// (the member table), after Config.Join.
func (n *Node) registrars() []string {
	var out []string
	if n.cfg.Join != "" {
		out = append(out, n.cfg.Join)
	}
	servers, _ := n.servers()
	for _, srv := range servers {
		if addr := n.memberAddr(string(srv.ID)); string(srv.ID) != n.cfg.ID && addr != "" && !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	return out
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

// observeMoves lets the leader follow a member that came back at a new
// Raft address. Such a node hears from no leader (the leader dials the
// old address) and, restarted without a snapshot, has not applied the
// member table either, so it cannot reach another member's API to ask;
// but it campaigns, and its pre-vote and vote requests carry its id and
// the address it advertises now. When the leader gets one from a server
// of the configuration at another address, it updates that server's entry
// (AddVoter with the same id: Raft's way), then dials it there. This is no
// more than the node could ask for itself through AddVoter: with TLS the
// request came over a connection with a member's node certificate.
func (n *Node) observeMoves(r raftAPI) {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RequestPreVoteRequest, raft.RequestVoteRequest:
			return true
		}
		return false
	})
	r.RegisterObserver(obs)
	n.wg.Go(func() {
		defer r.DeregisterObserver(obs)
		for {
			select {
			case o := <-ch:
				var h raft.RPCHeader
				switch req := o.Data.(type) {
				case raft.RequestPreVoteRequest:
					h = req.RPCHeader
				case raft.RequestVoteRequest:
					h = req.RPCHeader
				}
				n.followMove(string(h.ID), string(h.Addr))
			case <-n.ctx.Done():
				return
			}
		}
	})
}

// followMove updates server id's entry to addr on the leader if the
// configuration has it elsewhere (and no other server at addr).
func (n *Node) followMove(id, addr string) {
	if id == "" || addr == "" || id == n.cfg.ID || !n.IsLeader() {
		return
	}
	servers, err := n.servers()
	if err != nil {
		return
	}
	known := false
	for _, srv := range servers {
		switch {
		case string(srv.ID) == id:
			known = srv.Address != raft.ServerAddress(addr) && srv.Suffrage == raft.Voter
			if !known {
				return
			}
		case srv.Address == raft.ServerAddress(addr):
			return // another server's address: not this one's to take
		}
	}
	if !known {
		return
	}
	n.log.Info("a voter campaigns from a new Raft address; updating its entry", "id", id, "raft", addr)
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if err := n.await(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)); err != nil {
		n.log.Warn("updating a voter's Raft address failed", "id", id, "raft", addr, "err", err)
	}
}
