package client

import (
	"context"

	"google.golang.org/grpc"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Reads are linearizable (answered by the leader after it confirmed its
// leadership) unless Stale is given. They retry while no leader answers,
// until ctx ends.

// ReadOption changes one read.
type ReadOption func(*readOptions)

type readOptions struct{ stale bool }

// Stale lets the node the client talks to answer from its own state without
// a leadership round trip: cheaper, possibly behind by what it has not yet
// applied. Good for polling and dashboards, not for decisions.
func Stale() ReadOption { return func(o *readOptions) { o.stale = true } }

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// GetLease returns a lease record (ErrNotFound if none).
func (c *Client) GetLease(ctx context.Context, name string, opts ...ReadOption) (*coordv1.Lease, error) {
	resp, err := read(c, ctx, coordv1.CoordinatorClient.GetLease, &coordv1.GetLeaseRequest{Name: name, Stale: readOpts(opts).stale})
	return resp.GetLease(), err
}

// ListLeases returns one page of leases whose names start with prefix.
func (c *Client) ListLeases(ctx context.Context, prefix, pageToken string, pageSize int32, opts ...ReadOption) (*coordv1.ListLeasesResponse, error) {
	return read(c, ctx, coordv1.CoordinatorClient.ListLeases,
		&coordv1.ListLeasesRequest{Prefix: prefix, PageToken: pageToken, PageSize: pageSize, Stale: readOpts(opts).stale})
}

// GetWindow returns a window record (ErrNotFound if none).
func (c *Client) GetWindow(ctx context.Context, job, window string, opts ...ReadOption) (*coordv1.Window, error) {
	resp, err := read(c, ctx, coordv1.CoordinatorClient.GetWindow,
		&coordv1.GetWindowRequest{Job: job, Window: window, Stale: readOpts(opts).stale})
	return resp.GetWindow(), err
}

// ListWindows returns one page of a job's windows.
func (c *Client) ListWindows(ctx context.Context, job, pageToken string, pageSize int32, opts ...ReadOption) (*coordv1.ListWindowsResponse, error) {
	return read(c, ctx, coordv1.CoordinatorClient.ListWindows,
		&coordv1.ListWindowsRequest{Job: job, PageToken: pageToken, PageSize: pageSize, Stale: readOpts(opts).stale})
}

// GetResource returns a resource's fence state (ErrNotFound if none).
func (c *Client) GetResource(ctx context.Context, resource string, opts ...ReadOption) (*coordv1.Resource, error) {
	resp, err := read(c, ctx, coordv1.CoordinatorClient.GetResource,
		&coordv1.GetResourceRequest{Resource: resource, Stale: readOpts(opts).stale})
	return resp.GetResource(), err
}

// Status returns the status of the node at endpoint, or of the current
// leader when endpoint is empty (without the FSM digest: StatusDigest).
func (c *Client) Status(ctx context.Context, endpoint string) (*coordv1.StatusResponse, error) {
	return c.status(ctx, endpoint, false)
}

// StatusDigest is Status with the node's FSM digest, a pass over its whole
// state (about a second at a million jobs).
func (c *Client) StatusDigest(ctx context.Context, endpoint string) (*coordv1.StatusResponse, error) {
	return c.status(ctx, endpoint, true)
}

func (c *Client) status(ctx context.Context, endpoint string, digest bool) (*coordv1.StatusResponse, error) {
	if endpoint == "" {
		endpoint = c.leaderEndpoint()
	}
	cc, err := c.conn(endpoint)
	if err != nil {
		return nil, err
	}
	resp, err := coordv1.NewClusterClient(cc).Status(ctx, &coordv1.StatusRequest{Digest: digest})
	return resp, fromStatus(err)
}

// Config returns the effective configuration of the node at endpoint (of
// the current leader when endpoint is empty): every setting with its
// value, secrets redacted by the node, and its source. An admin call.
func (c *Client) Config(ctx context.Context, endpoint string) (*coordv1.ConfigResponse, error) {
	if endpoint == "" {
		endpoint = c.leaderEndpoint()
	}
	cc, err := c.conn(endpoint)
	if err != nil {
		return nil, err
	}
	resp, err := coordv1.NewClusterClient(cc).Config(ctx, &coordv1.ConfigRequest{})
	return resp, fromStatus(err)
}

// read is a read RPC of coord.v1.Coordinator through invoke.
func read[Req, Resp any](c *Client, ctx context.Context,
	method func(coordv1.CoordinatorClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	return call(c, ctx, true, method, req)
}

// call is one RPC of coord.v1.Coordinator through invoke; idempotent as
// for invoke.
func call[Req, Resp any](c *Client, ctx context.Context, idempotent bool,
	method func(coordv1.CoordinatorClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var resp Resp
	err := c.invoke(ctx, idempotent, func(ctx context.Context, cc coordv1.CoordinatorClient) error {
		var err error
		resp, err = method(cc, ctx, req)
		return err
	})
	return resp, err
}
