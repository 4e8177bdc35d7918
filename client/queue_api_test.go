package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// slowQueue answers Fetch after delay.
type slowQueue struct {
	coordv1.UnimplementedQueueServer
	delay time.Duration
}

func (s *slowQueue) Fetch(ctx context.Context, _ *coordv1.QueueFetchRequest) (*coordv1.QueueFetchResponse, error) {
	select {
	case <-time.After(s.delay):
		return &coordv1.QueueFetchResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A Fetch that waits (a long poll) gets its wait on top of the per-attempt
// timeout; one that does not wait is cut by it (and, not being idempotent,
// not retried once sent).
func TestFetchLongPollAttemptTimeout(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coordv1.RegisterQueueServer(srv, &slowQueue{delay: 300 * time.Millisecond})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	c, err := New(context.Background(), []string{lis.Addr().String()}, WithAttemptTimeout(100*time.Millisecond),
		WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Queue().Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"q"}, Max: 1, Wait: pbtime.Dur(400)}); err != nil {
		t.Fatalf("long poll: %v", err)
	}
	if _, err := c.Queue().Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"q"}, Max: 1}); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("without a wait: %v", err)
	}
}

// The items of batch calls become *Error with the queue's sentinels.
func TestItemError(t *testing.T) {
	for _, tc := range []struct {
		reason   string
		sentinel error
		code     codes.Code
	}{
		{"ATTEMPT_EXPIRED", ErrAttemptLost, codes.FailedPrecondition},
		{"ATTEMPT_LOST", ErrAttemptLost, codes.FailedPrecondition},
		{"JOB_CANCELLED", ErrJobCancelled, codes.FailedPrecondition},
		{"JOB_NOT_FOUND", ErrNotFound, codes.FailedPrecondition},
		{"IDENTITY_MISMATCH", ErrPermissionDenied, codes.PermissionDenied},
		{"INVALID_ARGUMENT", ErrInvalidArgument, codes.InvalidArgument},
	} {
		err := ItemError(&coordv1.JobItemError{Reason: tc.reason, Message: "m", Metadata: map[string]string{"job_id": "7"}})
		var e *Error
		if !errors.Is(err, tc.sentinel) || !errors.As(err, &e) || e.Code != tc.code || e.Metadata["job_id"] != "7" {
			t.Errorf("%s: %v", tc.reason, err)
		}
	}
	if ItemError(nil) != nil {
		t.Fatal("nil item error")
	}
	if err := ItemError(&coordv1.JobItemError{Reason: "SOMETHING_NEW"}); err == nil || errors.Is(err, ErrAttemptLost) {
		t.Fatalf("unknown reason: %v", err)
	}
}
