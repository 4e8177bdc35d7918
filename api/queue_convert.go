package api

import (
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// queueJobToProto converts a queued job (Watch events; the Queue service's
// reads use the same shape).
func queueJobToProto(j *fsm.QueueJob) *coordv1.QueueJob {
	out := &coordv1.QueueJob{
		Id: j.ID, Queue: j.Queue, Kind: j.Kind, Args: j.Args, State: coordv1.JobState(j.State), RunAtMs: j.RunAt,
		Priority: j.Priority, MaxAttempts: j.MaxAttempts, Attempts: j.Attempts, BackoffInitialMs: j.BackoffMs,
		BackoffMaxMs: j.BackoffMaxMs, BackoffFactor: float64(j.BackoffPermille) / 1000, VisibilityTimeoutMs: j.VisibilityMs,
		UniqueKey: j.UniqueKey, SubmittedBy: j.Identity, CreatedAtMs: j.CreatedAt, UpdatedAtMs: j.UpdatedAt,
		FinishedAtMs: j.FinishedAt,
	}
	if len(j.Labels) > 0 {
		out.Labels = make(map[string]string, len(j.Labels))
		for _, l := range j.Labels {
			out.Labels[l.Key] = l.Value
		}
	}
	for _, a := range j.Log {
		out.AttemptLog = append(out.AttemptLog, &coordv1.JobAttempt{
			Number: a.Number, Outcome: coordv1.AttemptOutcome(a.Outcome), WorkerId: a.WorkerID, Identity: a.Identity,
			StartedAtMs: a.StartedAt, DeadlineMs: a.Deadline, FinishedAtMs: a.FinishedAt, Heartbeats: a.Heartbeats,
			Error: a.Error, Result: a.Result, Token: coorderr.FormatToken(fsm.JobTokenName(j.ID), uint64(a.Number)),
		})
	}
	return out
}
