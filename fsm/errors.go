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
