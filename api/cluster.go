package server

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// cluster implements coord.v1.Cluster.
type cluster struct {
	coordv1.UnimplementedClusterServer
	s *Server
}

// Status answers from this node, whatever its role.
func (c *cluster) Status(ctx context.Context, _ *coordv1.StatusRequest) (*coordv1.StatusResponse, error) {
	s := c.s
	r := s.raft
	_, leaderID := r.LeaderWithID()
	out := &coordv1.StatusResponse{
		Id:            s.cfg.ID,
		State:         r.State().String(),
		LeaderId:      string(leaderID),
		LeaderAddress: s.memberAddr(string(leaderID)),
		Term:          r.CurrentTerm(),
		CommitIndex:   r.CommitIndex(),
		AppliedIndex:  r.AppliedIndex(),
		ClusterTime:   s.fsm.Clock(),
		FsmDigest:     s.fsm.Digest(),
		GrpcAddress:   s.GRPCAddr(),
		RaftAddress:   s.RaftAddr(),
	}
	switch lc := r.LastContact(); {
	case r.State() == raft.Leader:
		out.LastContact = 0
	case lc.IsZero():
		out.LastContact = -1
	default:
		out.LastContact = time.Since(lc).Milliseconds()
	}
	if snaps, err := s.snaps.List(); err == nil && len(snaps) > 0 {
		out.LastSnapshotIndex = snaps[0].Index
	}
	out.LiveLeases = uint64(s.fsm.LiveLeases(out.ClusterTime))
	return out, nil
}

// Members answers from this node's view of the configuration.
func (c *cluster) Members(ctx context.Context, _ *coordv1.MembersRequest) (*coordv1.MembersResponse, error) {
	ms, err := c.s.members()
	return &coordv1.MembersResponse{Members: ms}, toStatus(err)
}

func (s *Server) members() ([]*coordv1.Member, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leaderID := s.raft.LeaderWithID()
	out := make([]*coordv1.Member, 0, len(f.Configuration().Servers))
	for _, srv := range f.Configuration().Servers {
		out = append(out, &coordv1.Member{
			Id: string(srv.ID), RaftAddress: string(srv.Address), GrpcAddress: s.memberAddr(string(srv.ID)),
			Suffrage: srv.Suffrage.String(), Leader: srv.ID == leaderID,
		})
	}
	return out, nil
}

func checkAddr(field, addr string, required bool) error {
	if addr == "" && !required {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return invalidArg(field, "%q is not host:port", addr)
	}
	return nil
}

// AddVoter adds a voter, or updates a member's addresses. It is idempotent,
// so a node may call it at every start.
func (c *cluster) AddVoter(ctx context.Context, req *coordv1.AddVoterRequest) (*coordv1.AddVoterResponse, error) {
	if err := firstErr(checkName("id", req.GetId(), true), checkAddr("raft_address", req.GetRaftAddress(), true),
		checkAddr("grpc_address", req.GetGrpcAddress(), false)); err != nil {
		return nil, toStatus(err)
	}
	s := c.s
	return clusterOnLeader(s, ctx, coordv1.ClusterClient.AddVoter, req, func() (*coordv1.AddVoterResponse, error) {
		if _, err := s.readyLeader(ctx); err != nil {
			return nil, err
		}
		f := s.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return nil, err
		}
		present := false
		for _, srv := range f.Configuration().Servers {
			if srv.ID == raft.ServerID(req.GetId()) && srv.Address == raft.ServerAddress(req.GetRaftAddress()) && srv.Suffrage == raft.Voter {
				present = true
			}
		}
		if !present {
			s.log.Info("adding voter", "id", req.GetId(), "raft", req.GetRaftAddress(), "grpc", req.GetGrpcAddress())
			if err := s.await(ctx, s.raft.AddVoter(raft.ServerID(req.GetId()), raft.ServerAddress(req.GetRaftAddress()), 0, s.cfg.ApplyTimeout)); err != nil {
				return nil, err
			}
		}
		if req.GetGrpcAddress() != "" && s.memberAddr(req.GetId()) != req.GetGrpcAddress() {
			if _, err := s.propose(ctx, &fsmv1.SetMember{Id: req.GetId(), GrpcAddress: req.GetGrpcAddress()}); err != nil {
				return nil, err
			}
		}
		ms, err := s.members()
		return &coordv1.AddVoterResponse{Members: ms}, err
	})
}

func (c *cluster) RemoveServer(ctx context.Context, req *coordv1.RemoveServerRequest) (*coordv1.RemoveServerResponse, error) {
	if err := checkName("id", req.GetId(), true); err != nil {
		return nil, toStatus(err)
	}
	s := c.s
	return clusterOnLeader(s, ctx, coordv1.ClusterClient.RemoveServer, req, func() (*coordv1.RemoveServerResponse, error) {
		if _, err := s.readyLeader(ctx); err != nil {
			return nil, err
		}
		s.log.Info("removing server", "id", req.GetId())
		if err := s.await(ctx, s.raft.RemoveServer(raft.ServerID(req.GetId()), 0, s.cfg.ApplyTimeout)); err != nil {
			return nil, err
		}
		// Removing the leader itself ends its leadership; the member record
		// is then cleaned by whoever leads next (it is only an address).
		if req.GetId() != s.cfg.ID {
			if _, err := s.propose(ctx, &fsmv1.RemoveMember{Id: req.GetId()}); err != nil {
				return nil, err
			}
		}
		ms, err := s.members()
		return &coordv1.RemoveServerResponse{Members: ms}, err
	})
}

func (c *cluster) TransferLeadership(ctx context.Context, req *coordv1.TransferLeadershipRequest) (*coordv1.TransferLeadershipResponse, error) {
	s := c.s
	return clusterOnLeader(s, ctx, coordv1.ClusterClient.TransferLeadership, req, func() (*coordv1.TransferLeadershipResponse, error) {
		if _, err := s.readyLeader(ctx); err != nil {
			return nil, err
		}
		var f raft.Future
		if req.GetId() == "" {
			f = s.raft.LeadershipTransfer()
		} else {
			var addr raft.ServerAddress
			cf := s.raft.GetConfiguration()
			if err := cf.Error(); err != nil {
				return nil, err
			}
			for _, srv := range cf.Configuration().Servers {
				if srv.ID == raft.ServerID(req.GetId()) {
					addr = srv.Address
				}
			}
			if addr == "" {
				return nil, invalidArg("id", "%q is not a member", req.GetId())
			}
			f = s.raft.LeadershipTransferToServer(raft.ServerID(req.GetId()), addr)
		}
		// Learn the new leader from Raft's observations, not by polling.
		obsCh := make(chan raft.Observation, 4)
		obs := raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
			lo, ok := o.Data.(raft.LeaderObservation)
			return ok && lo.LeaderID != "" && lo.LeaderID != raft.ServerID(s.cfg.ID)
		})
		s.raft.RegisterObserver(obs)
		defer s.raft.DeregisterObserver(obs)
		if err := s.await(ctx, f); err != nil {
			return nil, err
		}
		if _, id := s.raft.LeaderWithID(); id != "" && id != raft.ServerID(s.cfg.ID) {
			return &coordv1.TransferLeadershipResponse{LeaderId: string(id)}, nil
		}
		wctx, cancel := context.WithTimeout(ctx, 2*s.cfg.ElectionTimeout)
		defer cancel()
		select {
		case o := <-obsCh:
			return &coordv1.TransferLeadershipResponse{LeaderId: string(o.Data.(raft.LeaderObservation).LeaderID)}, nil
		case <-wctx.Done():
			_, id := s.raft.LeaderWithID()
			return &coordv1.TransferLeadershipResponse{LeaderId: string(id)}, nil
		}
	})
}

// Snapshot takes a snapshot on this node now (or reports the latest one
// when nothing was applied since).
func (c *cluster) Snapshot(ctx context.Context, _ *coordv1.SnapshotRequest) (*coordv1.SnapshotResponse, error) {
	s := c.s
	err := s.await(ctx, s.raft.Snapshot())
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, toStatus(err)
	}
	snaps, lerr := s.snaps.List()
	if lerr != nil || len(snaps) == 0 {
		return nil, toStatus(&notFoundError{what: "snapshot (nothing applied yet)"})
	}
	s.log.Info("snapshot taken on request", "id", snaps[0].ID, "index", snaps[0].Index)
	return &coordv1.SnapshotResponse{Id: snaps[0].ID, Index: snaps[0].Index, Term: snaps[0].Term}, nil
}

// registerSelf keeps this node's gRPC address in the replicated member
// table, so that every node can point clients at the leader. The leader
// writes its own record; a follower that is a member asks the leader
// through AddVoter (idempotent).
func (s *Server) registerSelf() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.memberAddr(s.cfg.ID) == s.GRPCAddr() || !s.inConfiguration() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if s.IsLeader() {
			_, err = s.propose(ctx, &fsmv1.SetMember{Id: s.cfg.ID, GrpcAddress: s.GRPCAddr()})
		} else if conn, cerr := s.leaderConn(ctx); cerr == nil {
			_, err = coordv1.NewClusterClient(conn).AddVoter(ctx, &coordv1.AddVoterRequest{
				Id: s.cfg.ID, RaftAddress: s.RaftAddr(), GrpcAddress: s.GRPCAddr()})
		}
		cancel()
		if err != nil {
			s.log.Debug("registering gRPC address failed; will retry", "err", err)
		}
	}
}

func (s *Server) inConfiguration() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(s.cfg.ID) {
			return true
		}
	}
	return false
}

// joinLoop asks the member at Config.Join to add this node until it is in
// the configuration.
func (s *Server) joinLoop() {
	backoff := 200 * time.Millisecond
	for !s.inConfiguration() {
		conn, err := s.peerConn(s.cfg.Join)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = coordv1.NewClusterClient(conn).AddVoter(ctx, &coordv1.AddVoterRequest{
				Id: s.cfg.ID, RaftAddress: s.RaftAddr(), GrpcAddress: s.GRPCAddr()})
			cancel()
		}
		if err == nil {
			s.log.Info("joined the cluster", "via", s.cfg.Join)
			return
		}
		s.log.Warn("join failed; retrying", "via", s.cfg.Join, "err", err, "in", backoff)
		select {
		case <-s.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
