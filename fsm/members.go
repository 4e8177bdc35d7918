package fsm

import (
	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Members are the gRPC addresses of Raft servers, so that any node can tell
// a client where the leader listens.
func (s *state) setMember(c *fsmv1.SetMember) any {
	if c.GetId() == "" {
		return reject(coorderr.InvalidArgument, nil, "member needs an id")
	}
	s.members.ReplaceOrInsert(&Member{ID: c.GetId(), GRPCAddress: c.GetGrpcAddress()})
	return nil
}

func (s *state) removeMember(c *fsmv1.RemoveMember) any {
	s.members.Delete(&Member{ID: c.GetId()})
	return nil
}
