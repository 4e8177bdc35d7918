package fsm

import "fmt"

// Reason is a machine-readable cause of a business rejection. It travels to
// clients as the reason of a google.rpc.ErrorInfo.
type Reason string

// Reasons for rejections. A rejection is a typed result of Apply, never an
// error of the state machine itself.
const (
	ReasonInvalidArgument       Reason = "INVALID_ARGUMENT"
	ReasonLeaseNotFound         Reason = "LEASE_NOT_FOUND"
	ReasonLeaseLost             Reason = "LEASE_LOST"
	ReasonLeaseExpired          Reason = "LEASE_EXPIRED"
	ReasonLeaseReleased         Reason = "LEASE_RELEASED"
	ReasonStaleToken            Reason = "STALE_TOKEN"
	ReasonResourceLeaseMismatch Reason = "RESOURCE_LEASE_MISMATCH"
	ReasonWindowCompleted       Reason = "WINDOW_COMPLETED"
	ReasonWindowNotClaimed      Reason = "WINDOW_NOT_CLAIMED"
	// ReasonIdentityMismatch: the lease is bound to another identity.
	ReasonIdentityMismatch Reason = "IDENTITY_MISMATCH"
	// ReasonLeaseLimit: the identity holds its limit of live leases.
	ReasonLeaseLimit Reason = "LEASE_LIMIT"
	// ReasonTooEarly: a claim before its not-before time (cluster clock).
	ReasonTooEarly Reason = "TOO_EARLY"

	// Job queue (fsm/queue*.go). Job attempts mirror leases: LOST is "not
	// the current holder", EXPIRED is "its deadline passed".

	// ReasonJobNotFound: no job with that id (never, or pruned).
	ReasonJobNotFound Reason = "JOB_NOT_FOUND"
	// ReasonAttemptLost: the attempt is not the job's live attempt: a later
	// one was handed out, it already ended (completed or failed), it was
	// handed to another worker, or it never existed. Metadata "job_id",
	// "attempt", "current_attempt", "state", "outcome" (of that attempt).
	ReasonAttemptLost Reason = "ATTEMPT_LOST"
	// ReasonAttemptExpired: the attempt's visibility timeout passed without
	// a heartbeat; the job was made available again (or dead). Same
	// metadata.
	ReasonAttemptExpired Reason = "ATTEMPT_EXPIRED"
	// ReasonJobCancelled: the job was cancelled while this attempt ran.
	ReasonJobCancelled Reason = "JOB_CANCELLED"
	// ReasonJobFinished: Cancel of a succeeded or dead job, Retry of a
	// succeeded one. Metadata "job_id", "state".
	ReasonJobFinished Reason = "JOB_FINISHED"
	// ReasonJobRunning: Retry of a running job. Metadata "job_id", "state".
	ReasonJobRunning Reason = "JOB_RUNNING"
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
