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
