package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// forwardedKey marks a call a follower forwarded to the leader, so that it
// is never forwarded twice (no loops while leadership moves).
const forwardedKey = "coordd-forwarded"

func isForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// leaderConn returns a connection to the leader, or the notLeaderError to
// answer with when this node cannot forward.
func (s *Server) leaderConn(ctx context.Context) (*grpc.ClientConn, error) {
	nl := s.notLeader().(*notLeaderError)
	if nl.leaderAddr == "" || isForwarded(ctx) {
		return nil, nl
	}
	return s.peerConn(nl.leaderAddr)
}

// onLeader runs local on the leader; on a follower it forwards the call to
// the leader with call (a method expression of the generated client), or
// answers Unavailable with the leader's address.
func onLeader[C, Req, Resp any](s *Server, ctx context.Context, newClient func(grpc.ClientConnInterface) C,
	call func(C, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, local func() (Resp, error)) (Resp, error) {
	if s.leader.Load() != nil {
		resp, err := local()
		return resp, toStatus(err)
	}
	conn, err := s.leaderConn(ctx)
	if err != nil {
		var zero Resp
		return zero, toStatus(err)
	}
	out := metadata.AppendToOutgoingContext(ctx, forwardedKey, s.cfg.ID)
	if s.authEnabled() {
		// The leader believes this only because we are a member.
		out = metadata.AppendToOutgoingContext(out, identityKey, identityOf(ctx))
	}
	s.metrics.forwarded.Inc()
	return call(newClient(conn), out, req)
}

// coordOnLeader is onLeader for the Coordinator service.
func coordOnLeader[Req, Resp any](s *Server, ctx context.Context,
	call func(coordv1.CoordinatorClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	local func() (Resp, error)) (Resp, error) {
	return onLeader(s, ctx, coordv1.NewCoordinatorClient, call, req, local)
}

// clusterOnLeader is onLeader for the Cluster service.
func clusterOnLeader[Req, Resp any](s *Server, ctx context.Context,
	call func(coordv1.ClusterClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	local func() (Resp, error)) (Resp, error) {
	return onLeader(s, ctx, coordv1.NewClusterClient, call, req, local)
}
