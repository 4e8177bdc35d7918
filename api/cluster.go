package api

import (
	"context"
	"net"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// cluster implements coord.v1.Cluster: it validates, forwards membership
// changes to the leader, and lets the node act on Raft.
type cluster struct {
	coordv1.UnimplementedClusterServer
	s *Server
}

// Status answers from this node, whatever its role.
func (c *cluster) Status(_ context.Context, req *coordv1.StatusRequest) (*coordv1.StatusResponse, error) {
	return c.s.withClocks(c.s.node.Status(req.GetDigest())), nil
}

// Members answers from this node's view of the configuration.
func (c *cluster) Members(context.Context, *coordv1.MembersRequest) (*coordv1.MembersResponse, error) {
	ms, err := c.s.node.Members()
	if err != nil {
		return nil, toStatus(err)
	}
	return &coordv1.MembersResponse{Members: ms}, nil
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
	invalid := firstErr(checkName("id", req.GetId(), true), checkAddr("raft_address", req.GetRaftAddress(), true),
		checkAddr("grpc_address", req.GetGrpcAddress(), false))
	return clusterOnLeader(c.s, ctx, invalid, coordv1.ClusterClient.AddVoter, req, func() (*coordv1.AddVoterResponse, error) {
		ms, err := c.s.node.AddVoter(ctx, req.GetId(), req.GetRaftAddress(), req.GetGrpcAddress())
		return &coordv1.AddVoterResponse{Members: ms}, err
	})
}

func (c *cluster) RemoveServer(ctx context.Context, req *coordv1.RemoveServerRequest) (*coordv1.RemoveServerResponse, error) {
	return clusterOnLeader(c.s, ctx, checkName("id", req.GetId(), true), coordv1.ClusterClient.RemoveServer, req,
		func() (*coordv1.RemoveServerResponse, error) {
			ms, err := c.s.node.RemoveServer(ctx, req.GetId())
			return &coordv1.RemoveServerResponse{Members: ms}, err
		})
}

// TransferLeadership hands leadership to a voter (any, without an id). On
// a single-node cluster it is FAILED_PRECONDITION: there is no one to hand
// it to.
func (c *cluster) TransferLeadership(ctx context.Context, req *coordv1.TransferLeadershipRequest) (*coordv1.TransferLeadershipResponse, error) {
	return clusterOnLeader(c.s, ctx, checkName("id", req.GetId(), false), coordv1.ClusterClient.TransferLeadership, req,
		func() (*coordv1.TransferLeadershipResponse, error) {
			id, err := c.s.node.TransferLeadership(ctx, req.GetId())
			return &coordv1.TransferLeadershipResponse{LeaderId: id}, err
		})
}

// Snapshot takes a snapshot on this node now (or reports the latest one
// when nothing was applied since).
func (c *cluster) Snapshot(ctx context.Context, _ *coordv1.SnapshotRequest) (*coordv1.SnapshotResponse, error) {
	resp, err := c.s.node.Snapshot(ctx)
	return resp, toStatus(err)
}

// Setting is one entry of the node's effective configuration.
type Setting struct {
	// Name is the flag's name; Value its value as text ("<redacted>" for
	// a secret); Source flag, env, file or default.
	Name, Value, Source string
}

// Config answers this node's effective configuration (Config.Settings).
func (c *cluster) Config(context.Context, *coordv1.ConfigRequest) (*coordv1.ConfigResponse, error) {
	resp := &coordv1.ConfigResponse{Id: c.s.node.ID(), File: c.s.cfg.ConfigFile}
	for _, st := range c.s.cfg.Settings {
		resp.Settings = append(resp.Settings, &coordv1.ConfigSetting{Name: st.Name, Value: st.Value, Source: st.Source})
	}
	return resp, nil
}
