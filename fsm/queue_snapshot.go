package fsm

import (
	"fmt"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

func queueJobRecord(j *QueueJob) *fsmv1.QueueJobRecord {
	r := &fsmv1.QueueJobRecord{
		Id: j.ID,
		Spec: &fsmv1.QueueJobSpec{
			Queue: j.Queue, Kind: j.Kind, Args: j.Args, RunAtMs: j.RunAt, Priority: j.Priority, MaxAttempts: j.MaxAttempts,
			BackoffInitialMs: j.BackoffMs, BackoffMaxMs: j.BackoffMaxMs, BackoffFactorPermille: j.BackoffPermille,
			VisibilityTimeoutMs: j.VisibilityMs, UniqueKey: j.UniqueKey, Target: j.Target,
			TraceParent: j.TraceParent, TraceState: j.TraceState, MaxRunMs: j.MaxRunMs,
		},
		State: fsmv1.JobState(j.State), Identity: j.Identity, CreatedAtMs: j.CreatedAt, UpdatedAtMs: j.UpdatedAt,
		FinishedAtMs: j.FinishedAt, Attempts: j.Attempts,
	}
	for _, l := range j.Labels {
		r.Spec.Labels = append(r.Spec.Labels, &fsmv1.JobLabel{Key: l.Key, Value: l.Value})
	}
	for _, a := range j.Log {
		r.AttemptLog = append(r.AttemptLog, &fsmv1.JobAttemptRecord{
			Number: a.Number, Outcome: fsmv1.AttemptOutcome(a.Outcome), WorkerId: a.WorkerID, Identity: a.Identity,
			StartedAtMs: a.StartedAt, DeadlineMs: a.Deadline, FinishedAtMs: a.FinishedAt, Heartbeats: a.Heartbeats,
			Error: a.Error, Result: a.Result, DeliveryStatus: a.DeliveryStatus, DeliveryLatencyMs: a.DeliveryLatencyMs, RunUntilMs: a.RunUntil,
		})
	}
	return r
}

// queueJobFromRecord rebuilds a job, refusing a record that would break
// the indexes' assumptions (a corrupt or foreign snapshot is an error,
// never a panic later).
func queueJobFromRecord(r *fsmv1.QueueJobRecord) (*QueueJob, error) {
	sp := r.GetSpec()
	j := &QueueJob{
		ID: r.GetId(), RunAt: sp.GetRunAtMs(), BackoffMs: sp.GetBackoffInitialMs(), BackoffMaxMs: sp.GetBackoffMaxMs(),
		VisibilityMs: sp.GetVisibilityTimeoutMs(), CreatedAt: r.GetCreatedAtMs(), UpdatedAt: r.GetUpdatedAtMs(),
		FinishedAt: r.GetFinishedAtMs(), Queue: sp.GetQueue(), Kind: sp.GetKind(), UniqueKey: sp.GetUniqueKey(),
		Identity: r.GetIdentity(), Args: sp.GetArgs(), Labels: sortedLabels(sp.GetLabels()), Priority: sp.GetPriority(),
		MaxAttempts: sp.GetMaxAttempts(), Attempts: r.GetAttempts(), BackoffPermille: sp.GetBackoffFactorPermille(),
		State: JobState(r.GetState()), Target: sp.GetTarget(), TraceParent: sp.GetTraceParent(), TraceState: sp.GetTraceState(),
		MaxRunMs: sp.GetMaxRunMs(),
	}
	if len(r.GetAttemptLog()) > 0 {
		j.Log = make([]Attempt, len(r.GetAttemptLog()))
	}
	for i, a := range r.GetAttemptLog() {
		j.Log[i] = Attempt{Number: a.GetNumber(), Outcome: AttemptOutcome(a.GetOutcome()), Heartbeats: a.GetHeartbeats(),
			StartedAt: a.GetStartedAtMs(), Deadline: a.GetDeadlineMs(), FinishedAt: a.GetFinishedAtMs(), WorkerID: a.GetWorkerId(),
			Identity: a.GetIdentity(), Error: a.GetError(), Result: a.GetResult(), DeliveryStatus: a.GetDeliveryStatus(),
			DeliveryLatencyMs: a.GetDeliveryLatencyMs(), RunUntil: a.GetRunUntilMs()}
	}
	switch {
	case j.ID == 0:
		return nil, fmt.Errorf("snapshot: queue job without an id")
	case j.State < JobScheduled || j.State > JobDead:
		return nil, fmt.Errorf("snapshot: queue job %d in unknown state %d", j.ID, j.State)
	case j.State == JobRunning && (len(j.Log) == 0 || j.Log[len(j.Log)-1].Outcome != AttemptRunning || j.Log[len(j.Log)-1].Number != j.Attempts):
		return nil, fmt.Errorf("snapshot: running queue job %d without its live attempt", j.ID)
	}
	return j, nil
}

// rebuildQueueIndex derives the queue's indexes and counts from the jobs
// after a restore.
func (s *state) rebuildQueueIndex() {
	s.qidx = newQueueIndex()
	if s.qops != nil {
		s.qidx.paused = s.pausedSet()
	}
	s.qjobs.Ascend(func(j *QueueJob) bool {
		s.qidx.addStatic(j)
		s.qidx.addDynamic(j)
		return true
	})
}
