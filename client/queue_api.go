package client

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The job queue (coord.v1.Queue). The client/queue package builds the
// submit helpers and the Worker on Queue(); what is here is what they need
// from the client: its routing and retry policy, its clock and its safety
// margin. The queue's sentinel errors are with the others (errors.go).

// Queue returns the generated coord.v1.Queue client over Raw: every call
// takes this client's one routing and retry policy. After an uncertain
// outcome (the leader changed or the connection broke after the request
// was sent) a call is retried only when a repeat has no second effect:
// Get, List and Stats (reads), Heartbeat, Complete, Fail and Cancel (a
// repeat is answered as a duplicate or leaves the job as it is) and a
// Submit whose every job has a unique key (client/queue's Submit gives a
// job without one a generated key). A Submit without unique keys, a Retry
// and a Fetch are not retried once sent: the error then matches
// ErrUnknownOutcome. A Fetch with wait_ms gets that long on top of the
// per-attempt timeout.
func (c *Client) Queue() coordv1.QueueClient { return coordv1.NewQueueClient(c.Raw()) }

// Clock is the clock the client runs on (WithClock): the job queue's
// worker takes its heartbeats and local deadlines from it.
func (c *Client) Clock() clock.Clock { return c.clock }

// SafetyMargin is how long before the server could end a claim of the
// given duration (a lease's TTL, a job's visibility timeout) the client
// already considers it lost: WithSafetyMargin, else d/10 within
// [50 ms, 2 s].
func (c *Client) SafetyMargin(d time.Duration) time.Duration { return c.marginFor(d) }

// IsStale reports whether opts ask for a stale read (Stale), for packages
// built on the client such as client/queue.
func IsStale(opts ...ReadOption) bool { return readOpts(opts).stale }

// ItemError turns the per-item error of a batch call (Heartbeat, Complete,
// Fail) into an *Error wrapping its sentinel, as if the item had been
// refused on its own; nil for nil.
func ItemError(e *coordv1.JobItemError) error {
	if e == nil {
		return nil
	}
	r, _ := coorderr.ParseReason(e.GetReason())
	code := codes.FailedPrecondition
	switch r {
	case coorderr.IdentityMismatch, coorderr.PermissionDenied:
		code = codes.PermissionDenied
	case coorderr.InvalidArgument:
		code = codes.InvalidArgument
	}
	return &Error{Code: code, Reason: e.GetReason(), Message: e.GetMessage(), Metadata: e.GetMetadata(), sentinel: reasonSentinels[r]}
}

// longAttempt carries a per-attempt timeout longer than the default (a
// Fetch that waits).
type longAttempt struct{}

func withAttemptTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, longAttempt{}, d)
}

// attemptTimeout is the timeout of one attempt of a call made with ctx.
func (c *Client) attemptTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(longAttempt{}).(time.Duration); ok && d > c.opts.attemptTimeout {
		return d
	}
	return c.opts.attemptTimeout
}
