package api

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/node"
)

func metaOf(err error) map[string]string { return coorderr.Metadata(err) }

type lostLeadership struct{}

func (lostLeadership) Error() string        { return "lost" }
func (lostLeadership) LeadershipLost() bool { return true }

// The one error table: every error of the API, the node (recognised by
// behaviour; the test uses the node's own types), the FSM and auth becomes
// a status with its code and reason.
func TestToStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   codes.Code
		reason string
		meta   map[string]string
	}{
		{&fsm.Rejection{Reason: coorderr.LeaseLost, Message: "m", Metadata: map[string]string{"current_owner": "x"}},
			codes.FailedPrecondition, "LEASE_LOST", map[string]string{"current_owner": "x"}},
		{&fsm.Rejection{Reason: coorderr.IdentityMismatch}, codes.PermissionDenied, "IDENTITY_MISMATCH", nil},
		{&fsm.Rejection{Reason: coorderr.LeaseLimit}, codes.ResourceExhausted, "LEASE_LIMIT", nil},
		{fmt.Errorf("wrapped: %w", &fsm.Rejection{Reason: coorderr.TooEarly}), codes.FailedPrecondition, "TOO_EARLY", nil},
		{&auth.Error{Kind: auth.Unauthenticated}, codes.Unauthenticated, "UNAUTHENTICATED", nil},
		{&auth.Error{Kind: auth.PermissionDenied, Meta: map[string]string{"rule": "r"}}, codes.PermissionDenied, "PERMISSION_DENIED", map[string]string{"rule": "r"}},
		{&auth.Error{Kind: auth.RateLimited}, codes.ResourceExhausted, "RATE_LIMITED", nil},
		{&auth.Error{Kind: auth.StreamLimit}, codes.ResourceExhausted, "STREAM_LIMIT", nil},
		{&auth.Error{Kind: auth.WaitLimit}, codes.ResourceExhausted, "WAIT_LIMIT", nil},
		{&auth.Error{Kind: auth.JobBytesLimited, Meta: map[string]string{"limit": "job_bytes"}}, codes.ResourceExhausted, "RATE_LIMITED", map[string]string{"limit": "job_bytes"}},
		{&auth.Error{Kind: auth.ScheduleQuota}, codes.ResourceExhausted, "SCHEDULE_QUOTA", nil},
		{&fsm.Rejection{Reason: coorderr.JobQuota}, codes.ResourceExhausted, "JOB_QUOTA", nil},
		{&fsm.Rejection{Reason: coorderr.ScheduleQuota}, codes.ResourceExhausted, "SCHEDULE_QUOTA", nil},
		{invalidArg("name", "bad"), codes.InvalidArgument, "INVALID_ARGUMENT", map[string]string{"field": "name"}},
		{&node.InvalidArgumentError{Field: "id", Msg: "x"}, codes.InvalidArgument, "INVALID_ARGUMENT", map[string]string{"field": "id"}},
		{&notLeaderError{id: "n2", addr: "a:1"}, codes.Unavailable, "NOT_LEADER", map[string]string{"leader_id": "n2", "leader_address": "a:1"}},
		{&node.NotLeaderError{LeaderID: "n2", LeaderAddr: "a:1"}, codes.Unavailable, "NOT_LEADER", map[string]string{"leader_id": "n2", "leader_address": "a:1"}},
		{&node.NotLeaderError{}, codes.Unavailable, "NO_LEADER", nil},
		{&notFoundError{what: "lease x"}, codes.NotFound, "NOT_FOUND", nil},
		{&node.NotFoundError{What: "snapshot"}, codes.NotFound, "NOT_FOUND", nil},
		{lostLeadership{}, codes.Unavailable, "LEADERSHIP_LOST", nil},
		{node.ErrShutdown, codes.Unavailable, "SHUTTING_DOWN", nil},
		{&node.PreconditionError{Msg: "single-node cluster: no other voter to transfer leadership to"}, codes.FailedPrecondition, "", nil},
		{fmt.Errorf("raft: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "TIMEOUT", nil},
		{context.Canceled, codes.Canceled, "", nil},
		{status.Error(codes.Aborted, "from the leader"), codes.Aborted, "", nil},
		{errors.New("surprise"), codes.Internal, "", nil},
	} {
		err := toStatus(tc.err)
		if status.Code(err) != tc.code || coorderr.WireReason(err) != tc.reason {
			t.Errorf("%T %v: got %v %q, want %v %q", tc.err, tc.err, status.Code(err), coorderr.WireReason(err), tc.code, tc.reason)
		}
		for k, v := range tc.meta {
			if metaOf(err)[k] != v {
				t.Errorf("%v: metadata %v, want %s=%s", tc.err, metaOf(err), k, v)
			}
		}
	}
	if toStatus(nil) != nil {
		t.Fatal("nil became an error")
	}
}
