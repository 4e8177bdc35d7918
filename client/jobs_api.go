package client

import (
	"context"

	"google.golang.org/grpc"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The job registry (see the jobs package for the runner that uses it).

// RegisterJob creates or updates a job in coordd's registry (idempotent).
func (c *Client) RegisterJob(ctx context.Context, spec *coordv1.JobSpec) (*coordv1.RegisterJobResponse, error) {
	return jobsCall(c, ctx, coordv1.JobsClient.RegisterJob, &coordv1.RegisterJobRequest{Spec: spec, RegisteredBy: c.opts.owner})
}

// ListJobs returns the registered jobs.
func (c *Client) ListJobs(ctx context.Context) (*coordv1.ListJobsResponse, error) {
	return jobsCall(c, ctx, coordv1.JobsClient.ListJobs, &coordv1.ListJobsRequest{})
}

// JobStatus returns a job with its recent windows, next occurrences and
// overdue windows.
func (c *Client) JobStatus(ctx context.Context, name string, limit int32) (*coordv1.JobStatusResponse, error) {
	return jobsCall(c, ctx, coordv1.JobsClient.JobStatus, &coordv1.JobStatusRequest{Name: name, Limit: limit})
}

// ListOverdue returns overdue windows, stuck leases and slow runs.
func (c *Client) ListOverdue(ctx context.Context) (*coordv1.ListOverdueResponse, error) {
	return jobsCall(c, ctx, coordv1.JobsClient.ListOverdue, &coordv1.ListOverdueRequest{})
}

func jobsCall[Req, Resp any](c *Client, ctx context.Context,
	call func(coordv1.JobsClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var resp Resp
	err := c.invokeConn(ctx, true, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		resp, err = call(coordv1.NewJobsClient(cc), ctx, req)
		return err
	})
	return resp, err
}
