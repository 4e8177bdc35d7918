package api

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// forwardedKey marks a call a follower forwarded to the leader, so that it
// is never forwarded twice (no loops while leadership moves).
const forwardedKey = "coordd-forwarded"

// identityKey is the metadata key a forwarding member puts the original
// caller's identity under; memberKey ("1") says that caller was itself a
// member (a node certificate of a server): without it, the leader treats
// the identity as an ordinary one whatever its name.
const (
	identityKey = "coordd-identity"
	memberKey   = "coordd-identity-member"
	// nodeKey ("1") says that caller presented a node certificate, member
	// or not (a joining node: ACL rules with node_certificates).
	nodeKey = "coordd-identity-node"
)

// forwardedCaller is the original caller a forwarded call names, if any.
func forwardedCaller(ctx context.Context) (tlsutil.Peer, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	fwd := md.Get(identityKey)
	if len(fwd) == 0 {
		return tlsutil.Peer{}, false
	}
	set := func(key string) bool { v := md.Get(key); return len(v) == 1 && v[0] == "1" }
	return tlsutil.Peer{Identity: fwd[0], Node: set(memberKey) || set(nodeKey)}, true
}

// LeaderAddressHeader is the response header a follower sets on a call it
// forwarded: the leader's gRPC address (the SDK sends its next calls there).
const LeaderAddressHeader = "coordd-leader-address"

// PingMinInterval is the shortest interval between keepalive pings a
// client may send without being told to go away (the SDK pings every 10 s).
const PingMinInterval = 5 * time.Second

func isForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// route decides where a call that must run on the leader goes: here (nil
// conn, nil error) when this node leads; to the leader's connection; or
// nowhere, with the notLeaderError to answer, when the leader is unknown
// or the call was already forwarded once.
func (s *Server) route(ctx context.Context) (grpc.ClientConnInterface, error) {
	if s.node.Leading() {
		return nil, nil
	}
	id, addr := s.node.Leader()
	if addr == "" || isForwarded(ctx) {
		return nil, &notLeaderError{id: id, addr: addr}
	}
	return s.dial(addr)
}

// leaderKnown: this node leads, or knows the leader's address.
func (s *Server) leaderKnown() bool {
	if s.node.Leading() {
		return true
	}
	_, addr := s.node.Leader()
	return addr != ""
}

// awaitLeader waits during an election until a leader is known, for at
// most LeaderWait (on the API's clock) or until ctx ends, whichever is
// first; then the call routes as usual (NO_LEADER if there is still none).
// Reads call it, so a read during an election waits briefly for the new
// leader instead of failing at once. A forwarded call does not wait: its
// sender already found a leader.
func (s *Server) awaitLeader(ctx context.Context) {
	if s.leaderKnown() || isForwarded(ctx) {
		return
	}
	t := s.cfg.Clock.NewTimer(s.cfg.LeaderWait)
	defer t.Stop()
	for {
		changed := s.node.LeaderChanged()
		if s.leaderKnown() {
			return
		}
		select {
		case <-changed:
		case <-t.C():
			return
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		}
	}
}

// stateRead answers a read from committed state: a stale one from this
// node's FSM, any other on the leader (forwarded from a follower), whose
// node reads after confirming its leadership. answer builds the response
// from the state and its lease time.
func stateRead[C any, Req interface{ GetStale() bool }, Resp any](s *Server, ctx context.Context,
	newClient func(grpc.ClientConnInterface) C, call func(C, context.Context, Req, ...grpc.CallOption) (Resp, error),
	req Req, answer func(st *fsm.FSM, now int64) (Resp, error)) (Resp, error) {
	local := func() (Resp, error) {
		st, now, err := s.node.Read(ctx, req.GetStale())
		if err != nil {
			var zero Resp
			return zero, err
		}
		return answer(st, now)
	}
	if req.GetStale() {
		resp, err := local()
		return resp, toStatus(err)
	}
	return onLeader(s, ctx, newClient, call, req, local)
}

// onLeader runs local on the leader; on a follower it forwards the call to
// the leader with call (a method expression of the generated client), or
// answers Unavailable with the leader's address.
func onLeader[C, Req, Resp any](s *Server, ctx context.Context, newClient func(grpc.ClientConnInterface) C,
	call func(C, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, local func() (Resp, error)) (Resp, error) {
	conn, err := s.route(ctx)
	switch {
	case err != nil:
		var zero Resp
		return zero, toStatus(err)
	case conn == nil:
		resp, err := local()
		return resp, toStatus(err)
	}
	// The forwarded call carries these keys and nothing else, whatever
	// metadata ctx holds.
	md := metadata.Pairs(forwardedKey, s.node.ID())
	if s.authEnabled() {
		// The leader believes this only because we are a member.
		c := auth.CallerOf(ctx)
		md.Set(identityKey, c.Identity)
		if c.Member {
			md.Set(memberKey, "1")
		}
		if c.Node {
			md.Set(nodeKey, "1")
		}
	}
	s.injectTrace(ctx, md)
	out := metadata.NewOutgoingContext(ctx, md)
	s.metrics.forwarded.Inc()
	// Tell the caller where the leader is, so its next call goes there
	// directly instead of through this node.
	if _, addr := s.node.Leader(); addr != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(LeaderAddressHeader, addr))
	}
	return call(newClient(conn), out, req)
}

// coordOnLeader is onLeader for the Coordinator service.
func coordOnLeader[Req, Resp any](s *Server, ctx context.Context,
	call func(coordv1.CoordinatorClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	local func() (Resp, error)) (Resp, error) {
	return onLeader(s, ctx, coordv1.NewCoordinatorClient, call, req, local)
}

// clusterOnLeader is onLeader for the Cluster service's membership
// changes, after their validation: invalid (the request's first problem)
// refuses the call on the node it reached.
func clusterOnLeader[Req, Resp any](s *Server, ctx context.Context, invalid error,
	call func(coordv1.ClusterClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	local func() (Resp, error)) (Resp, error) {
	if invalid != nil {
		var zero Resp
		return zero, toStatus(invalid)
	}
	return onLeader(s, ctx, coordv1.NewClusterClient, call, req, local)
}

// queueOnLeader is onLeader for the Queue service.
func queueOnLeader[Req, Resp any](s *Server, ctx context.Context,
	call func(coordv1.QueueClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	local func() (Resp, error)) (Resp, error) {
	return onLeader(s, ctx, coordv1.NewQueueClient, call, req, local)
}
