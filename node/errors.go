package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Errors of the node that are not verdicts of the state machine (those are
// *fsm.Rejection). The API maps them to statuses by their methods, so it
// need not import this package (and Raft): NotLeader, LeadershipLost,
// ShuttingDown, FailedPrecondition, InvalidArgument, NotFound. A timeout
// wraps context.DeadlineExceeded.

// NotLeaderError: this node cannot serve the call as the leader. LeaderID
// and LeaderAddr (its gRPC address) name the leader when this node knows
// another one.
type NotLeaderError struct{ LeaderID, LeaderAddr string }

func (e *NotLeaderError) Error() string {
	if e.LeaderAddr == "" {
		return "no leader is known; retry later"
	}
	return fmt.Sprintf("not the leader; the leader is %s at %s", e.LeaderID, e.LeaderAddr)
}

// NotLeader returns the leader's id and gRPC address ("" when unknown).
func (e *NotLeaderError) NotLeader() (id, addr string) { return e.LeaderID, e.LeaderAddr }

// ErrShutdown: the node is shutting down; nothing was done.
var ErrShutdown error = shutdownError{}

type shutdownError struct{}

func (shutdownError) Error() string      { return "node is shutting down" }
func (shutdownError) ShuttingDown() bool { return true }

// leadershipLostError: leadership ended while a command was in flight; its
// outcome is unknown.
type leadershipLostError struct{ cause error }

func (e leadershipLostError) Error() string {
	return "leadership lost while applying; the outcome is unknown, retry with the same request id: " + e.cause.Error()
}
func (e leadershipLostError) Unwrap() error        { return e.cause }
func (e leadershipLostError) LeadershipLost() bool { return true }

// PreconditionError: the cluster is not in a state that allows the call.
type PreconditionError struct{ Msg string }

func (e *PreconditionError) Error() string            { return e.Msg }
func (e *PreconditionError) FailedPrecondition() bool { return true }

// InvalidArgumentError: a request field names something the node refuses.
type InvalidArgumentError struct{ Field, Msg string }

func (e *InvalidArgumentError) Error() string           { return e.Field + ": " + e.Msg }
func (e *InvalidArgumentError) InvalidArgument() string { return e.Field }

// NotFoundError: what was asked for does not exist.
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string  { return e.What + " not found" }
func (e *NotFoundError) NotFound() bool { return true }

// translate turns Raft's errors into the node's.
func (n *Node) translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return leadershipLostError{cause: err}
	case errors.Is(err, raft.ErrNotLeader):
		return n.notLeader()
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	default:
		return err
	}
}
