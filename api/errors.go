package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
)

// ErrorDomain is the domain of every google.rpc.ErrorInfo coordd sends.
const ErrorDomain = "coordd.io"

// Reasons that are not FSM rejections.
const (
	ReasonNotLeader        = "NOT_LEADER"
	ReasonNoLeader         = "NO_LEADER"
	ReasonLeadershipLost   = "LEADERSHIP_LOST" // outcome unknown: retry with the same request id
	ReasonTimeout          = "TIMEOUT"         // outcome unknown
	ReasonNotFound         = "NOT_FOUND"
	ReasonInvalidArgument  = string(fsm.ReasonInvalidArgument)
	ReasonShuttingDown     = "SHUTTING_DOWN"
	ReasonUnauthenticated  = "UNAUTHENTICATED"
	ReasonPermissionDenied = "PERMISSION_DENIED"
	ReasonRateLimited      = "RATE_LIMITED"
	ReasonStreamLimit      = "STREAM_LIMIT"
	ReasonWaitLimit        = "WAIT_LIMIT"
)

// Errors of the API itself, before they become statuses.
type (
	// invalidArgError is bad input; field names the request field.
	invalidArgError struct{ field, msg string }
	// notLeaderError: this node cannot serve or forward the call; addr is
	// the leader's gRPC address when known.
	notLeaderError struct{ id, addr string }
	// notFoundError: a read found nothing.
	notFoundError struct{ what string }
)

func (e *invalidArgError) Error() string           { return e.field + ": " + e.msg }
func (e *invalidArgError) InvalidArgument() string { return e.field }
func (e *notLeaderError) Error() string {
	if e.addr == "" {
		return "no leader is known; retry later"
	}
	return fmt.Sprintf("not the leader; the leader is %s at %s", e.id, e.addr)
}
func (e *notLeaderError) NotLeader() (id, addr string) { return e.id, e.addr }
func (e *notFoundError) Error() string                 { return e.what + " not found" }
func (e *notFoundError) NotFound() bool                { return true }

func invalidArg(field, format string, args ...any) error {
	return &invalidArgError{field: field, msg: fmt.Sprintf(format, args...)}
}

// Errors are recognised by behaviour, so the node's (which this package
// does not import) and the API's own map alike.
type (
	notLeaderErr      interface{ NotLeader() (id, addr string) }
	leadershipLostErr interface{ LeadershipLost() bool }
	shuttingDownErr   interface{ ShuttingDown() bool }
	preconditionErr   interface{ FailedPrecondition() bool }
	invalidArgErr     interface{ InvalidArgument() string }
	notFoundErr       interface{ NotFound() bool }
)

// rejectionCodes maps FSM rejections to gRPC codes.
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

// authCodes maps refusals of the auth package to codes and reasons.
var authCodes = map[auth.Kind]struct {
	code   codes.Code
	reason string
}{
	auth.Unauthenticated:  {codes.Unauthenticated, ReasonUnauthenticated},
	auth.PermissionDenied: {codes.PermissionDenied, ReasonPermissionDenied},
	auth.RateLimited:      {codes.ResourceExhausted, ReasonRateLimited},
	auth.StreamLimit:      {codes.ResourceExhausted, ReasonStreamLimit},
	auth.WaitLimit:        {codes.ResourceExhausted, ReasonWaitLimit},
}

// toStatus turns any error of the API, the node, the FSM or auth into a
// gRPC status error with an ErrorInfo. It and the tables above are the only
// place that builds statuses. Errors that already are statuses (from a
// forwarded call) pass.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var (
		rej *fsm.Rejection
		ae  *auth.Error
		ia  invalidArgErr
		nl  notLeaderErr
		nf  notFoundErr
		ll  leadershipLostErr
		sd  shuttingDownErr
		fp  preconditionErr
	)
	switch {
	case errors.As(err, &rej):
		code, ok := rejectionCodes[rej.Reason]
		if !ok {
			code = codes.FailedPrecondition
		}
		return withInfo(code, rej.Message, string(rej.Reason), rej.Metadata)
	case errors.As(err, &ae):
		c, ok := authCodes[ae.Kind]
		if !ok {
			return status.Error(codes.PermissionDenied, ae.Error())
		}
		return withInfo(c.code, ae.Msg, c.reason, ae.Meta)
	case errors.As(err, &ia):
		return withInfo(codes.InvalidArgument, err.Error(), ReasonInvalidArgument, map[string]string{"field": ia.InvalidArgument()})
	case errors.As(err, &nl):
		id, addr := nl.NotLeader()
		reason, meta := ReasonNoLeader, map[string]string{}
		if addr != "" {
			reason = ReasonNotLeader
			meta["leader_address"], meta["leader_id"] = addr, id
		}
		return withInfo(codes.Unavailable, err.Error(), reason, meta)
	case errors.As(err, &nf):
		return withInfo(codes.NotFound, err.Error(), ReasonNotFound, nil)
	case errors.As(err, &ll):
		return withInfo(codes.Unavailable, "leadership lost while applying; the outcome is unknown, retry with the same request id",
			ReasonLeadershipLost, nil)
	case errors.As(err, &sd):
		return withInfo(codes.Unavailable, "node is shutting down", ReasonShuttingDown, nil)
	case errors.As(err, &fp):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return withInfo(codes.DeadlineExceeded, "timed out; the outcome is unknown, retry with the same request id", ReasonTimeout, nil)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

func withInfo(code codes.Code, msg, reason string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}); err == nil {
		st = d
	}
	return st.Err()
}

// ReasonOf returns the ErrorInfo reason of a status error, or "".
func ReasonOf(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
