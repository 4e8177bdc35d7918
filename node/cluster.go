package node

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/clock"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Cluster administration: the node's answers to the Cluster service, in its
// wire types (as rqlite's store takes and returns its command protos): the
// API validates, authorizes and forwards, the node acts on Raft.

// Status describes this node, whatever its role; with digest, also its
// FSM digest (a pass over the whole state).
func (n *Node) Status(digest bool) *coordv1.StatusResponse {
	r := n.raft
	_, leaderID := r.LeaderWithID()
	out := &coordv1.StatusResponse{
		Id:            n.cfg.ID,
		State:         r.State().String(),
		LeaderId:      string(leaderID),
		LeaderAddress: n.memberAddr(string(leaderID)),
		Term:          r.CurrentTerm(),
		CommitIndex:   r.CommitIndex(),
		AppliedIndex:  r.AppliedIndex(),
		LeaseTime:     pbtime.Dur(n.fsm.LeaseTime()),
		GrpcAddress:   n.advertisedAddr(),
		RaftAddress:   n.RaftAddr(),
	}
	if digest {
		out.FsmDigest = n.fsm.Digest()
	}
	switch lc := r.LastContact(); {
	case r.State() == raft.Leader:
		out.LastContact = pbtime.Dur(0)
	case lc.IsZero(): // never: unset
	default:
		out.LastContact = durationpb.New(time.Since(lc)) // Raft's time, not the node's clock
	}
	if snaps, err := n.snaps.List(); err == nil && len(snaps) > 0 {
		out.LastSnapshotIndex = snaps[0].Index
	}
	out.LiveLeases = uint64(n.fsm.LiveLeases(n.fsm.LeaseTime()))
	out.WallTime = timestamppb.New(clock.Wall(n.clock))
	lease, cal := n.times()
	out.CalendarTime = pbtime.At(cal)
	if cal > 0 { // 0: no command carried a calendar time yet
		out.LeaseClockLag = pbtime.Dur(cal - lease)
	}
	return out
}

// Members is this node's view of the configuration, with gRPC addresses
// from the replicated member table.
func (n *Node) Members() ([]*coordv1.Member, error) {
	servers, err := n.servers()
	if err != nil {
		return nil, err
	}
	_, leaderID := n.raft.LeaderWithID()
	out := make([]*coordv1.Member, 0, len(servers))
	for _, srv := range servers {
		out = append(out, &coordv1.Member{
			Id: string(srv.ID), RaftAddress: string(srv.Address), GrpcAddress: n.memberAddr(string(srv.ID)),
			Suffrage: srv.Suffrage.String(), Leader: srv.ID == leaderID,
		})
	}
	return out, nil
}

func (n *Node) servers() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.translate(err)
	}
	return f.Configuration().Servers, nil
}

// IsMember reports whether identity is a server id of the Raft
// configuration (an atomic load in Raft).
func (n *Node) IsMember(identity string) bool {
	if identity == "" {
		return false
	}
	servers, _ := n.servers()
	for _, srv := range servers {
		if string(srv.ID) == identity {
			return true
		}
	}
	return false
}

// AddVoter adds a voter, or updates a member's addresses, on the leader.
// It is idempotent, so a node may ask for it at every start.
func (n *Node) AddVoter(ctx context.Context, id, raftAddr, grpcAddr string) ([]*coordv1.Member, error) {
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return nil, err
	}
	servers, err := n.servers()
	if err != nil {
		return nil, err
	}
	present := false
	for _, srv := range servers {
		if srv.ID == raft.ServerID(id) && srv.Address == raft.ServerAddress(raftAddr) && srv.Suffrage == raft.Voter {
			present = true
		}
	}
	if !present {
		n.log.Info("adding voter", "id", id, "raft", raftAddr, "grpc", grpcAddr)
		if err := n.await(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout)); err != nil {
			return nil, err
		}
	}
	if grpcAddr != "" && n.memberAddr(id) != grpcAddr {
		if _, err := n.proposeAs(ctx, ls, &fsmv1.SetMember{Id: id, GrpcAddress: grpcAddr}); err != nil {
			return nil, err
		}
	}
	return n.Members()
}

// RemoveServer removes a member on the leader.
func (n *Node) RemoveServer(ctx context.Context, id string) ([]*coordv1.Member, error) {
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return nil, err
	}
	n.log.Info("removing server", "id", id)
	if err := n.await(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
		return nil, err
	}
	// Removing the leader itself ends its leadership; the member record
	// is then cleaned by whoever leads next (it is only an address).
	if id != n.cfg.ID {
		if _, err := n.proposeAs(ctx, ls, &fsmv1.RemoveMember{Id: id}); err != nil {
			return nil, err
		}
	}
	return n.Members()
}

// TransferLeadership hands leadership to the voter id (any voter when id
// is empty) and returns the new leader's id.
func (n *Node) TransferLeadership(ctx context.Context, id string) (string, error) {
	if _, err := n.readyLeader(ctx); err != nil {
		return "", err
	}
	servers, err := n.servers()
	if err != nil {
		return "", err
	}
	self := raft.ServerID(n.cfg.ID)
	var addr raft.ServerAddress
	others := 0
	for _, srv := range servers {
		if srv.ID != self && srv.Suffrage == raft.Voter {
			others++
		}
		if srv.ID == raft.ServerID(id) {
			addr = srv.Address
		}
	}
	switch {
	case others == 0:
		return "", &PreconditionError{Msg: "single-node cluster: no other voter to transfer leadership to"}
	case id == n.cfg.ID:
		return "", &PreconditionError{Msg: "node " + id + " already leads"}
	case id != "" && addr == "":
		return "", &InvalidArgumentError{Field: "id", Msg: "\"" + id + "\" is not a member"}
	}
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	// Learn the new leader from Raft's observations, not by polling.
	obsCh := make(chan raft.Observation, 4)
	obs := raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		lo, ok := o.Data.(raft.LeaderObservation)
		return ok && lo.LeaderID != "" && lo.LeaderID != self
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	if err := n.await(ctx, f); err != nil {
		return "", err
	}
	if _, lid := n.raft.LeaderWithID(); lid != "" && lid != self {
		return string(lid), nil
	}
	wctx, cancel := context.WithTimeout(ctx, 2*n.cfg.ElectionTimeout) // Raft's time
	defer cancel()
	select {
	case o := <-obsCh:
		return string(o.Data.(raft.LeaderObservation).LeaderID), nil
	case <-wctx.Done():
		_, lid := n.raft.LeaderWithID()
		return string(lid), nil
	}
}

// Snapshot takes a snapshot on this node now (or reports the latest one
// when nothing was applied since).
func (n *Node) Snapshot(ctx context.Context) (*coordv1.SnapshotResponse, error) {
	err := n.await(ctx, n.raft.Snapshot())
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, err
	}
	snaps, lerr := n.snaps.List()
	if lerr != nil || len(snaps) == 0 {
		return nil, &NotFoundError{What: "snapshot (nothing applied yet)"}
	}
	n.log.Info("snapshot taken on request", "id", snaps[0].ID, "index", snaps[0].Index)
	return &coordv1.SnapshotResponse{Id: snaps[0].ID, Index: snaps[0].Index, Term: snaps[0].Term}, nil
}

// Health is nil when this node runs and knows a leader (/healthz).
func (n *Node) Health() error {
	if n.raft.State() == raft.Shutdown {
		return ErrShutdown
	}
	if _, id := n.raft.LeaderWithID(); id == "" {
		return &NotLeaderError{}
	}
	return nil
}
