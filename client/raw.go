package client

import (
	"context"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Raw returns a connection for the generated coord.v1 clients, for callers
// that need an RPC's whole response or act for a holder they are not
// (operator tools such as coordctl):
//
//	resp, err := coordv1.NewClusterClient(c.Raw()).Members(ctx, &coordv1.MembersRequest{})
//
// Unary calls take this client's one routing and retry policy: they go to
// the node believed to lead, follow NOT_LEADER redirects, are retried with
// backoff while no leader answers or a node refuses connections, and after
// an uncertain outcome only when the call cannot have a second effect (see
// idempotentCall). Errors are this package's (*Error, wrapping the
// sentinels). Streams go to the node believed to lead, without retries:
// keep leases alive with Acquire or Resume instead.
func (c *Client) Raw() grpc.ClientConnInterface { return rawConn{c} }

type rawConn struct{ c *Client }

func (r rawConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if a, ok := args.(*coordv1.AcquireRequest); ok && a.GetWait() {
		ctx = withoutAttemptTimeout(ctx) // a wait lasts as long as ctx allows
	}
	if f, ok := args.(*coordv1.QueueFetchRequest); ok && f.GetWaitMs() > 0 {
		ctx = withAttemptTimeout(ctx, pbtime.Duration(f.GetWait())+r.c.opts.attemptTimeout) // a long poll
	}
	return r.c.invokeConn(ctx, idempotentCall(args), func(ctx context.Context, cc *grpc.ClientConn) error {
		return cc.Invoke(ctx, method, args, reply, opts...)
	})
}

func (r rawConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cc, err := r.c.conn(r.c.leader(ctx))
	if err != nil {
		return nil, err
	}
	return cc.NewStream(ctx, desc, method, opts...)
}

// idempotentCall reports whether repeating a request cannot have a second
// effect, so that it may be retried after an uncertain outcome: reads,
// upserts, requests the server deduplicates (an Acquire with a request id,
// a fenced commit with an idempotency key, a job submit whose every job has
// a unique key), dry runs and operations on a holder that a repeat leaves
// as they are (renew, release, claim, complete; a job attempt's heartbeat,
// completion or failure, a job's cancel; a schedule's put, pause, resume
// or delete). A schedule's trigger (a repeat is a second occurrence), a
// leader transfer, a server removal, a snapshot, a job Retry (a repeat
// after the job ran and failed again would revive it twice) and a Fetch (a
// repeat hands out more jobs) are not retried once sent.
func idempotentCall(req any) bool {
	switch r := req.(type) {
	case *coordv1.AcquireRequest:
		return r.GetRequestId() != ""
	case *coordv1.FencedCommitRequest:
		return r.GetIdempotencyKey() != "" || r.GetDryRun()
	case *coordv1.QueueSubmitRequest:
		for _, j := range r.GetJobs() {
			if j.GetUniqueKey() == "" {
				return false
			}
		}
		return len(r.GetJobs()) > 0
	case *coordv1.RenewRequest, *coordv1.ReleaseRequest, *coordv1.ClaimWindowRequest, *coordv1.CompleteWindowRequest,
		*coordv1.GetLeaseRequest, *coordv1.ListLeasesRequest, *coordv1.GetWindowRequest, *coordv1.ListWindowsRequest,
		*coordv1.GetResourceRequest,
		*coordv1.PutScheduleRequest, *coordv1.GetScheduleRequest, *coordv1.ListSchedulesRequest, *coordv1.PauseScheduleRequest,
		*coordv1.ResumeScheduleRequest, *coordv1.DeleteScheduleRequest, *coordv1.ListOverdueRequest,
		*coordv1.StatusRequest, *coordv1.MembersRequest, *coordv1.AddVoterRequest,
		*coordv1.QueueGetRequest, *coordv1.QueueListRequest, *coordv1.QueueStatsRequest,
		*coordv1.QueueHeartbeatRequest, *coordv1.QueueCompleteRequest, *coordv1.QueueFailRequest, *coordv1.QueueCancelRequest:
		return true
	default:
		return false
	}
}
