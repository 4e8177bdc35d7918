package client

import (
	"context"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Cluster administration that targets nodes rather than the leader. The
// calls the leader serves (Members, AddVoter, RemoveServer,
// TransferLeadership) go through Raw with coordv1.NewClusterClient.

// Endpoints are the nodes' gRPC addresses the client was created with, in
// their order.
func (c *Client) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// Snapshot makes the node at endpoint take a Raft snapshot now (each node
// snapshots its own state). With endpoint empty it asks the configured
// endpoints in order and the first that answers takes it.
func (c *Client) Snapshot(ctx context.Context, endpoint string) (*coordv1.SnapshotResponse, error) {
	eps := []string{endpoint}
	if endpoint == "" {
		eps = c.endpoints
	}
	var err error
	for _, ep := range eps {
		cc, cerr := c.conn(ep)
		if cerr != nil {
			return nil, cerr
		}
		var resp *coordv1.SnapshotResponse
		resp, err = coordv1.NewClusterClient(cc).Snapshot(ctx, &coordv1.SnapshotRequest{})
		if err == nil {
			return resp, nil
		}
		if kind, _ := classify(err); kind == final || ctx.Err() != nil {
			break
		}
	}
	return nil, c.wrapFinal(err)
}
