package fsm

import (
	"fmt"
)

// max_run (DESIGN.md "Jobs queue", docs/jobs.md "max_run"): an attempt
// ends at its start + max_run even if its worker heartbeats. The bound is
// fixed when the attempt starts (Attempt.RunUntil: the job's max_run, or
// else its queue's default, QueueLimits.MaxRunMs, at that fetch) and the
// visibility deadline never passes it, so the attempt ends through the
// one path every deadline takes: advanceQueue's lapse. Such a lapse is
// the job's doing, not a dead worker's: the attempt is LAPSED with error
// "max_run exceeded ...", and the job is retried after its backoff (no
// jitter: none was drawn) while attempts remain, else dead. Its worker's
// later calls and fenced writes are refused with ATTEMPT_EXPIRED.

// boundRun sets a new attempt's RunUntil and caps its deadline.
func (s *state) boundRun(j *QueueJob, a *Attempt, cal int64) {
	ms := j.MaxRunMs
	if ms == 0 && s.qlimits.Len() > 0 {
		s.qidx.limKey.Queue = j.Queue // the apply holds the lock: no allocation per claim
		if l, ok := s.qlimits.Get(&s.qidx.limKey); ok {
			ms = l.MaxRunMs
		}
	}
	if ms > 0 {
		a.RunUntil = cal + ms
		a.Deadline = min(a.Deadline, a.RunUntil)
	}
}

// runBound caps a deadline at the attempt's max_run.
func runBound(a *Attempt, deadline int64) int64 {
	if a.RunUntil > 0 {
		return min(deadline, a.RunUntil)
	}
	return deadline
}

// ranOut reports whether an attempt's deadline is its max_run bound.
func ranOut(a *Attempt) bool { return a.RunUntil > 0 && a.Deadline >= a.RunUntil }

// runOut ends a running attempt (a, the last of n, a copy of j) that
// reached its max_run.
func (s *state) runOut(j, n *QueueJob, a *Attempt, cal int64) {
	a.Outcome, a.FinishedAt = AttemptLapsed, a.Deadline
	a.Error = fmt.Sprintf("max_run exceeded: the attempt ran for %s (max_run) and was ended, heartbeats or not", Dur(a.RunUntil-a.StartedAt))
	n.UpdatedAt = cal
	c := s.qidx.counts(n.Queue)
	c.Failures++
	if int32(n.Attempts) >= n.MaxAttempts {
		n.State, n.FinishedAt = JobDead, cal
		c.Dead++
	} else {
		n.State = JobRetryable
		n.RunAt = cal + Backoff(n.BackoffMs, n.BackoffMaxMs, n.BackoffPermille, n.Attempts, 0)
	}
	s.replaceJob(j, n)
}
