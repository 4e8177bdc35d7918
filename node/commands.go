package node

import (
	"context"
	"fmt"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The typed commands api.Node calls: each commits its fsm command through
// Propose (which routes the ones with node-side work: handoffs, waking
// waiters, the fail jitter, the long polls a submit feeds, the
// materialiser) and types the FSM's result here, next to the FSM's result
// types, so no `any` crosses from the API to the node.

func (n *Node) Renew(ctx context.Context, cmd *fsmv1.Renew) (*fsm.LeaseResult, error) {
	return committed[*fsm.LeaseResult](ctx, n, cmd)
}

func (n *Node) Release(ctx context.Context, cmd *fsmv1.Release) (*fsm.ReleaseResult, error) {
	return committed[*fsm.ReleaseResult](ctx, n, cmd)
}

func (n *Node) ClaimWindow(ctx context.Context, cmd *fsmv1.ClaimWindow) (*fsm.ClaimResult, error) {
	return committed[*fsm.ClaimResult](ctx, n, cmd)
}

func (n *Node) CompleteWindow(ctx context.Context, cmd *fsmv1.CompleteWindow) (*fsm.WindowResult, error) {
	return committed[*fsm.WindowResult](ctx, n, cmd)
}

func (n *Node) FencedCommit(ctx context.Context, cmd *fsmv1.FencedCommit) (*fsm.CommitResult, error) {
	return committed[*fsm.CommitResult](ctx, n, cmd)
}

func (n *Node) SubmitJobs(ctx context.Context, cmd *fsmv1.SubmitJobs) (*fsm.SubmitResult, error) {
	return committed[*fsm.SubmitResult](ctx, n, cmd)
}

func (n *Node) CancelJobs(ctx context.Context, cmd *fsmv1.CancelJobs) (fsm.JobResults, error) {
	return committed[fsm.JobResults](ctx, n, cmd)
}

func (n *Node) RetryJobs(ctx context.Context, cmd *fsmv1.RetryJobs) (fsm.JobResults, error) {
	return committed[fsm.JobResults](ctx, n, cmd)
}

func (n *Node) HeartbeatJobs(ctx context.Context, cmd *fsmv1.HeartbeatJobs) (fsm.JobResults, error) {
	return committed[fsm.JobResults](ctx, n, cmd)
}

func (n *Node) CompleteJobs(ctx context.Context, cmd *fsmv1.CompleteJobs) (fsm.JobResults, error) {
	return committed[fsm.JobResults](ctx, n, cmd)
}

func (n *Node) FailJobs(ctx context.Context, cmd *fsmv1.FailJobs) (fsm.JobResults, error) {
	return committed[fsm.JobResults](ctx, n, cmd)
}

func (n *Node) PutSchedule(ctx context.Context, cmd *fsmv1.PutSchedule) (*fsm.ScheduleResult, error) {
	return committed[*fsm.ScheduleResult](ctx, n, cmd)
}

func (n *Node) PauseSchedule(ctx context.Context, cmd *fsmv1.PauseSchedule) (*fsm.ScheduleResult, error) {
	return committed[*fsm.ScheduleResult](ctx, n, cmd)
}

func (n *Node) TriggerSchedule(ctx context.Context, cmd *fsmv1.TriggerSchedule) (*fsm.TriggerResult, error) {
	return committed[*fsm.TriggerResult](ctx, n, cmd)
}

func (n *Node) DeleteSchedule(ctx context.Context, cmd *fsmv1.DeleteSchedule) (*fsm.ScheduleResult, error) {
	return committed[*fsm.ScheduleResult](ctx, n, cmd)
}

// committed proposes cmd and types its result as R, the FSM's result type
// for that command (fsm/results.go).
// SetQueueTarget answers the queue's target after it (nil: cleared).
func (n *Node) SetQueueTarget(ctx context.Context, cmd *fsmv1.SetQueueTarget) (*fsm.QueueTarget, error) {
	return committed[*fsm.QueueTarget](ctx, n, cmd)
}

// SetQueueLimits answers the queue's limits after it (nil: cleared).
func (n *Node) SetQueueLimits(ctx context.Context, cmd *fsmv1.SetQueueLimits) (*fsm.QueueLimits, error) {
	return committed[*fsm.QueueLimits](ctx, n, cmd)
}

// PauseQueue pauses or resumes a queue (fsm/queue_pause.go).
func (n *Node) PauseQueue(ctx context.Context, cmd *fsmv1.PauseQueue) (*fsm.PauseResult, error) {
	return committed[*fsm.PauseResult](ctx, n, cmd)
}

// StartBulkJobs records a bulk operation and wakes the leader's bulk
// service, which applies it in batches (node/leader/bulk.go).
func (n *Node) StartBulkJobs(ctx context.Context, cmd *fsmv1.StartBulkJobs) (*fsm.BulkResult, error) {
	r, err := committed[*fsm.BulkResult](ctx, n, cmd)
	if err == nil {
		n.bulk.Poke()
	}
	return r, err
}

// DeleteJobs deletes final jobs (one result per id).
func (n *Node) DeleteJobs(ctx context.Context, cmd *fsmv1.DeleteJobs) (fsm.JobResults, error) {
	return committed[fsm.JobResults](ctx, n, cmd)
}

func committed[R any](ctx context.Context, n *Node, cmd any) (R, error) {
	var zero R
	res, err := n.Propose(ctx, cmd)
	if err != nil {
		return zero, err
	}
	r, ok := res.(R)
	if !ok {
		return zero, fmt.Errorf("%T answered with %T", cmd, res)
	}
	return r, nil
}
