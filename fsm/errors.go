package fsm

import (
	"fmt"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Reason is a machine-readable cause of a business rejection: a
// coord.v1.ErrorReason (proto/coord/v1/errors.proto documents each). It
// travels to clients as the reason of a google.rpc.ErrorInfo; the server
// renders it with coorderr.
type Reason = coordv1.ErrorReason

// Reasons for rejections. A rejection is a typed result of Apply, never an
// error of the state machine itself.
const (
	ReasonInvalidArgument       = coordv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT
	ReasonLeaseNotFound         = coordv1.ErrorReason_ERROR_REASON_LEASE_NOT_FOUND
	ReasonLeaseLost             = coordv1.ErrorReason_ERROR_REASON_LEASE_LOST
	ReasonLeaseExpired          = coordv1.ErrorReason_ERROR_REASON_LEASE_EXPIRED
	ReasonLeaseReleased         = coordv1.ErrorReason_ERROR_REASON_LEASE_RELEASED
	ReasonStaleToken            = coordv1.ErrorReason_ERROR_REASON_STALE_TOKEN
	ReasonResourceLeaseMismatch = coordv1.ErrorReason_ERROR_REASON_RESOURCE_LEASE_MISMATCH
	ReasonWindowCompleted       = coordv1.ErrorReason_ERROR_REASON_WINDOW_COMPLETED
	ReasonWindowNotClaimed      = coordv1.ErrorReason_ERROR_REASON_WINDOW_NOT_CLAIMED
	// ReasonIdentityMismatch: the lease is bound to another identity.
	ReasonIdentityMismatch = coordv1.ErrorReason_ERROR_REASON_IDENTITY_MISMATCH
	// ReasonLeaseLimit: the identity holds its limit of live leases.
	ReasonLeaseLimit = coordv1.ErrorReason_ERROR_REASON_LEASE_LIMIT
	// ReasonTooEarly: a claim before its not-before time (cluster clock).
	ReasonTooEarly = coordv1.ErrorReason_ERROR_REASON_TOO_EARLY

	// Job queue (fsm/queue*.go); errors.proto documents each. Job attempts
	// mirror leases: LOST is "not the live attempt", EXPIRED is "its
	// deadline passed".
	ReasonJobNotFound    = coordv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND
	ReasonAttemptLost    = coordv1.ErrorReason_ERROR_REASON_ATTEMPT_LOST
	ReasonAttemptExpired = coordv1.ErrorReason_ERROR_REASON_ATTEMPT_EXPIRED
	ReasonJobCancelled   = coordv1.ErrorReason_ERROR_REASON_JOB_CANCELLED
	ReasonJobFinished    = coordv1.ErrorReason_ERROR_REASON_JOB_FINISHED
	ReasonJobRunning     = coordv1.ErrorReason_ERROR_REASON_JOB_RUNNING

	// Schedules (fsm/schedule*.go).
	ReasonScheduleNotFound = coordv1.ErrorReason_ERROR_REASON_SCHEDULE_NOT_FOUND
	ReasonScheduleOverlap  = coordv1.ErrorReason_ERROR_REASON_SCHEDULE_OVERLAP
)

// Rejection is a business rejection of a command: the command was applied
// (it is in the log) but changed nothing.
type Rejection struct {
	Reason  Reason
	Message string
	// Metadata carries facts a caller can act on (current owner, generation,
	// max generation). Keys are stable.
	Metadata map[string]string
}

func (r *Rejection) Error() string { return fmt.Sprintf("%s: %s", r.Reason, r.Message) }

func reject(reason Reason, meta map[string]string, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Message: fmt.Sprintf(format, args...), Metadata: meta}
}
