package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
)

// Errors of the API itself, before they become statuses.
type (
	// invalidArgError is bad input; field names the request field, index
	// the item of a batch (-1: none).
	invalidArgError struct {
		field, msg string
		index      int
	}
	// notLeaderError: this node cannot serve or forward the call; addr is
	// the leader's gRPC address when known.
	notLeaderError struct{ id, addr string }
	// notFoundError: a read found nothing; reason, when set, is the
	// specific one (JOB_NOT_FOUND) with its metadata.
	notFoundError struct {
		what   string
		reason coorderr.Reason
		meta   map[string]string
		msg    string // the whole message, when set (else what + " not found")
	}
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
func (e *notFoundError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return e.what + " not found"
}
func (e *notFoundError) NotFound() bool { return true }

func invalidArg(field, format string, args ...any) error {
	return &invalidArgError{field: field, msg: fmt.Sprintf(format, args...), index: -1}
}

// invalidItem is bad input in item index of a batch: metadata "index" and
// "field".
func invalidItem(index int, field, format string, args ...any) error {
	return &invalidArgError{field: field, index: index, msg: fmt.Sprintf("item %d: ", index) + fmt.Sprintf(format, args...)}
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
	coorderr.InvalidArgument:       codes.InvalidArgument,
	coorderr.LeaseNotFound:         codes.FailedPrecondition,
	coorderr.LeaseLost:             codes.FailedPrecondition,
	coorderr.LeaseExpired:          codes.FailedPrecondition,
	coorderr.LeaseReleased:         codes.FailedPrecondition,
	coorderr.StaleToken:            codes.FailedPrecondition,
	coorderr.ResourceLeaseMismatch: codes.FailedPrecondition,
	coorderr.WindowCompleted:       codes.FailedPrecondition,
	coorderr.WindowNotClaimed:      codes.FailedPrecondition,
	coorderr.IdentityMismatch:      codes.PermissionDenied,
	coorderr.PermissionDenied:      codes.PermissionDenied, // a schedule's guard (fsmv1.ScheduleGuard)
	coorderr.LeaseLimit:            codes.ResourceExhausted,
	coorderr.TooEarly:              codes.FailedPrecondition,
	coorderr.ScheduleNotFound:      codes.FailedPrecondition,
	coorderr.ScheduleOverlap:       codes.FailedPrecondition,
}

// authCodes maps refusals of the auth package to codes and reasons.
var authCodes = map[auth.Kind]struct {
	code   codes.Code
	reason coorderr.Reason
}{
	auth.Unauthenticated:  {codes.Unauthenticated, coorderr.Unauthenticated},
	auth.PermissionDenied: {codes.PermissionDenied, coorderr.PermissionDenied},
	auth.RateLimited:      {codes.ResourceExhausted, coorderr.RateLimited},
	auth.StreamLimit:      {codes.ResourceExhausted, coorderr.StreamLimit},
	auth.WaitLimit:        {codes.ResourceExhausted, coorderr.WaitLimit},
}

// toStatus turns any error of the API, the node, the FSM or auth into a
// gRPC status error with an ErrorInfo (built by coorderr, shared with the
// SDK). It and the tables above are the only place that builds statuses.
// Errors that already are statuses (from a forwarded call) pass.
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
	if st, ok := watchStatus(err); ok {
		return st
	}
	switch {
	case errors.As(err, &rej):
		code, ok := rejectionCodes[rej.Reason]
		if !ok {
			code = codes.FailedPrecondition
		}
		return withInfo(code, rej.Message, rej.Reason, rej.Metadata)
	case errors.As(err, &ae):
		c, ok := authCodes[ae.Kind]
		if !ok {
			return status.Error(codes.PermissionDenied, ae.Error())
		}
		return withInfo(c.code, ae.Msg, c.reason, ae.Meta)
	case errors.As(err, &ia):
		meta := map[string]string{"field": ia.InvalidArgument()}
		if e, ok := ia.(*invalidArgError); ok && e.index >= 0 {
			meta["index"] = strconv.Itoa(e.index)
		}
		return withInfo(codes.InvalidArgument, err.Error(), coorderr.InvalidArgument, meta)
	case errors.As(err, &nl):
		id, addr := nl.NotLeader()
		reason, meta := coorderr.NoLeader, map[string]string{}
		if addr != "" {
			reason = coorderr.NotLeader
			meta["leader_address"], meta["leader_id"] = addr, id
		}
		return withInfo(codes.Unavailable, err.Error(), reason, meta)
	case errors.As(err, &nf):
		if e, ok := nf.(*notFoundError); ok && e.reason != coorderr.Unspecified {
			return withInfo(codes.NotFound, err.Error(), e.reason, e.meta)
		}
		return withInfo(codes.NotFound, err.Error(), coorderr.NotFound, nil)
	case errors.As(err, &ll):
		return withInfo(codes.Unavailable, "leadership lost while applying; "+unknownOutcome, coorderr.LeadershipLost, nil)
	case errors.As(err, &sd):
		return withInfo(codes.Unavailable, "node is shutting down", coorderr.ShuttingDown, nil)
	case errors.As(err, &fp):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return withInfo(codes.DeadlineExceeded, "timed out; "+unknownOutcome, coorderr.Timeout, nil)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// unknownOutcome is the advice of LEADERSHIP_LOST and TIMEOUT: what to
// repeat the call with, whichever handle the call has.
const unknownOutcome = "the outcome is unknown (it may have been applied): repeat the call with the same request id, " +
	"unique key or idempotency key to learn it without a second effect"

func withInfo(code codes.Code, msg string, reason coorderr.Reason, meta map[string]string) error {
	return coorderr.New(code, reason, msg, meta)
}
