package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
)

// Domain errors the server produces, before they become statuses.
type (
	// invalidArgError is bad input; field names the request field.
	invalidArgError struct{ field, msg string }
	// notLeaderError: this node cannot serve the call; leaderAddr is the
	// leader's gRPC address when known.
	notLeaderError struct{ leaderID, leaderAddr string }
	// notFoundError: a read found nothing.
	notFoundError struct{ what string }
)

func (e *invalidArgError) Error() string { return e.field + ": " + e.msg }
func (e *notLeaderError) Error() string {
	if e.leaderAddr == "" {
		return "no leader is known; retry later"
	}
	return fmt.Sprintf("not the leader; the leader is %s at %s", e.leaderID, e.leaderAddr)
}
func (e *notFoundError) Error() string { return e.what + " not found" }

// errShutdown is raft's own, so that it maps like raft's.
var errShutdown = raft.ErrRaftShutdown

func invalidArg(field, format string, args ...any) error {
	return &invalidArgError{field: field, msg: fmt.Sprintf(format, args...)}
}

// rejectionCodes maps FSM rejections to gRPC codes. This table and toStatus
// are the only places that build status errors.
var rejectionCodes = map[fsm.Reason]codes.Code{
	fsm.ReasonInvalidArgument:       codes.InvalidArgument,
	fsm.ReasonLeaseNotFound:         codes.FailedPrecondition,
	fsm.ReasonLeaseLost:             codes.FailedPrecondition,
	fsm.ReasonLeaseExpired:          codes.FailedPrecondition,
	fsm.ReasonLeaseReleased:         codes.FailedPrecondition,
	fsm.ReasonStaleToken:            codes.FailedPrecondition,
	fsm.ReasonResourceLeaseMismatch: codes.FailedPrecondition,
	fsm.ReasonWindowCompleted:       codes.FailedPrecondition,
	fsm.ReasonWindowNotClaimed:      codes.FailedPrecondition,
	fsm.ReasonIdentityMismatch:      codes.PermissionDenied,
	fsm.ReasonLeaseLimit:            codes.ResourceExhausted,
	fsm.ReasonTooEarly:              codes.FailedPrecondition,
}

// toStatus turns any error of the server into a gRPC status error with an
// ErrorInfo. Errors that already are statuses (from a forwarded call) pass.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var (
		rej *fsm.Rejection
		ia  *invalidArgError
		nl  *notLeaderError
		nf  *notFoundError
	)
	switch {
	case errors.As(err, &rej):
		code, ok := rejectionCodes[rej.Reason]
		if !ok {
			code = codes.FailedPrecondition
		}
		return withInfo(code, rej.Message, rej.Reason, rej.Metadata)
	case errors.As(err, &ia):
		return withInfo(codes.InvalidArgument, ia.Error(), coorderr.InvalidArgument, map[string]string{"field": ia.field})
	case errors.As(err, &nl):
		reason, meta := coorderr.NoLeader, map[string]string{}
		if nl.leaderAddr != "" {
			reason = coorderr.NotLeader
			meta["leader_address"], meta["leader_id"] = nl.leaderAddr, nl.leaderID
		}
		return withInfo(codes.Unavailable, nl.Error(), reason, meta)
	case errors.As(err, &nf):
		return withInfo(codes.NotFound, nf.Error(), coorderr.NotFound, nil)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return withInfo(codes.Unavailable, "leadership lost while applying; the outcome is unknown, retry with the same request id",
			coorderr.LeadershipLost, nil)
	case errors.Is(err, raft.ErrNotLeader):
		return withInfo(codes.Unavailable, "not the leader", coorderr.NoLeader, nil)
	case errors.Is(err, raft.ErrRaftShutdown):
		return withInfo(codes.Unavailable, "node is shutting down", coorderr.ShuttingDown, nil)
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, context.DeadlineExceeded):
		return withInfo(codes.DeadlineExceeded, "timed out; the outcome is unknown, retry with the same request id", coorderr.Timeout, nil)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

func withInfo(code codes.Code, msg string, reason coorderr.Reason, meta map[string]string) error {
	return coorderr.New(code, reason, msg, meta)
}
