package fsm

import (
	"fmt"
	"strconv"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// SubmitResult is the outcome of a SubmitJobs: one entry per spec, in
// order.
type SubmitResult struct {
	Jobs []SubmittedJob
}

// SubmittedJob is what a submit did with one spec. Duplicate: its unique
// key named an existing job, which is the one returned (with its state).
type SubmittedJob struct {
	ID        uint64
	RunAt     int64
	State     JobState
	Duplicate bool
}

// JobOutcome is a job after a command on it. Duplicate: the command
// changed nothing because it had been done (a repeated Complete, Fail,
// Cancel or Retry returns the job as the first one left it).
// Job is the stored record itself: records are immutable once stored
// (QueueJob), so a result shares it instead of copying it (a copy per
// job and command on every node, where only the leader's is read).
type JobOutcome struct {
	Job       *QueueJob
	Duplicate bool
}

// FetchResult is the outcome of a FetchJobs: the jobs handed out, each
// running with its new attempt (Job.Current()); the stored records, as
// in JobOutcome.
type FetchResult struct {
	Jobs []*QueueJob
}

// JobResults holds one result per item of a Heartbeat, Complete, Fail,
// Cancel or Retry, in order: a *JobOutcome or a *Rejection. Items are
// independent: one refused item does not stop the others.
type JobResults []any

// submitJobs adds a batch of jobs, all or none: every spec is checked
// before anything changes, and a bad one refuses the batch (metadata
// "index" and "field"). A spec whose unique key names a job in the same
// queue (still retained, whatever its state; or earlier in this batch)
// returns that job with Duplicate set.
func (s *state) submitJobs(cal int64, c *fsmv1.SubmitJobs) any {
	specs := c.GetJobs()
	if len(specs) == 0 || len(specs) > MaxSubmitBatch {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "jobs"},
			"a submit carries 1 to %d jobs, not %d", MaxSubmitBatch, len(specs))
	}
	for i, sp := range specs {
		field, problem := checkJobSpec(sp, c.GetSpecRules())
		if field == "" {
			field, problem = CheckRunAhead(sp.GetRunAtMs(), cal)
		}
		if field != "" {
			return reject(coorderr.InvalidArgument, map[string]string{"index": strconv.Itoa(i), "field": field},
				"job %d: %s %s; nothing was submitted", i, field, problem)
		}
	}
	if rej := s.jobQuota(c); rej != nil {
		return rej
	}
	res := &SubmitResult{Jobs: make([]SubmittedJob, len(specs))}
	for i, sp := range specs {
		if sp.GetUniqueKey() != "" {
			if id, ok := s.qidx.unique[uniqueRef{sp.GetQueue(), sp.GetUniqueKey()}]; ok {
				d := s.qjob(id)
				res.Jobs[i] = SubmittedJob{ID: d.ID, RunAt: d.RunAt, State: d.State, Duplicate: true}
				continue
			}
		}
		s.lastJobID++
		j := &QueueJob{
			ID: s.lastJobID, RunAt: sp.GetRunAtMs(), BackoffMs: sp.GetBackoffInitialMs(), BackoffMaxMs: sp.GetBackoffMaxMs(),
			VisibilityMs: sp.GetVisibilityTimeoutMs(), CreatedAt: cal, UpdatedAt: cal, Queue: sp.GetQueue(), Kind: sp.GetKind(),
			UniqueKey: sp.GetUniqueKey(), Identity: c.GetIdentity(), Args: sp.GetArgs(), Labels: sortedLabels(sp.GetLabels()),
			Priority: sp.GetPriority(), MaxAttempts: sp.GetMaxAttempts(), BackoffPermille: sp.GetBackoffFactorPermille(),
			State: JobScheduled, Target: s.jobTarget(sp.GetQueue(), sp.GetTarget()),
			TraceParent: sp.GetTraceParent(), TraceState: sp.GetTraceState(), MaxRunMs: sp.GetMaxRunMs(),
		}
		if j.RunAt == 0 {
			j.RunAt = cal
		}
		if j.RunAt <= cal {
			j.State = JobAvailable
		}
		s.insertJob(j)
		s.qidx.counts(j.Queue).Submitted++
		res.Jobs[i] = SubmittedJob{ID: j.ID, RunAt: j.RunAt, State: j.State}
	}
	return res
}

// jobQuota refuses a batch that would take its identity's live jobs over
// max_live_jobs (JOB_QUOTA). Only the jobs it would add count: a spec
// whose unique key names a retained job (or one earlier in the batch)
// adds none.
func (s *state) jobQuota(c *fsmv1.SubmitJobs) *Rejection {
	limit, id := c.GetMaxLiveJobs(), c.GetIdentity()
	if limit == 0 || id == "" {
		return nil
	}
	live := s.qidx.live[id]
	adds := 0
	var keys map[uniqueRef]bool
	for _, sp := range c.GetJobs() {
		if k := sp.GetUniqueKey(); k != "" {
			ref := uniqueRef{sp.GetQueue(), k}
			if _, ok := s.qidx.unique[ref]; ok || keys[ref] {
				continue
			}
			if keys == nil {
				keys = map[uniqueRef]bool{}
			}
			keys[ref] = true
		}
		adds++
	}
	if live+adds <= int(limit) {
		return nil
	}
	return reject(coorderr.JobQuota, map[string]string{"identity": id, "limit": strconv.FormatUint(uint64(limit), 10), "live": strconv.Itoa(live)},
		"identity %q has %d jobs that are not final; %d more would be over its limit of %d; nothing was submitted", id, live, adds, limit)
}

func checkWorker(worker string) *Rejection {
	if worker == "" || len(worker) > MaxWorkerIDBytes {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "worker_id"}, "worker_id must be 1 to %d bytes", MaxWorkerIDBytes)
	}
	return nil
}

func checkItems(field string, n int) *Rejection {
	if n == 0 || n > MaxJobBatch {
		return reject(coorderr.InvalidArgument, map[string]string{"field": field}, "%s: 1 to %d items, not %d", field, MaxJobBatch, n)
	}
	return nil
}

// fetchJobs hands out up to max available jobs of the requested queues to
// one worker in this one command. Queues take turns (round robin, one job
// per queue per turn, skipping empty ones); the first queue of the first
// turn rotates with every fetch, so a queue listed last is not starved by
// small fetches. Within a queue: higher priority first, then earlier
// run_at, then lower id. Each job becomes running with a new attempt whose
// visibility deadline is now + the job's visibility timeout.
func (s *state) fetchJobs(cal int64, c *fsmv1.FetchJobs) any {
	if rej := checkWorker(c.GetWorkerId()); rej != nil {
		return rej
	}
	if c.GetMax() == 0 || c.GetMax() > MaxFetchBatch {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "max"}, "max must be 1 to %d, not %d", MaxFetchBatch, c.GetMax())
	}
	if c.GetTargeted() {
		if len(c.GetQueues()) > 0 {
			return reject(coorderr.InvalidArgument, map[string]string{"field": "queues"}, "a targeted fetch names no queues")
		}
		return s.fetchTargeted(cal, c)
	}
	if n := len(c.GetQueues()); n == 0 || n > MaxFetchQueues {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "queues"}, "fetch from 1 to %d queues, not %d", MaxFetchQueues, n)
	}
	var queues []string
	for _, q := range c.GetQueues() {
		if q == "" || len(q) > MaxQueueNameBytes {
			return reject(coorderr.InvalidArgument, map[string]string{"field": "queues"}, "queue names are 1 to %d bytes", MaxQueueNameBytes)
		}
		dup := false
		for _, seen := range queues {
			dup = dup || seen == q
		}
		if !dup {
			queues = append(queues, q)
		}
	}
	start := int(s.fetchSeq % uint64(len(queues)))
	s.fetchSeq++
	// Room for what will be handed out (the available counts), so that
	// the result is not regrown (and its jobs copied) on the way.
	avail := 0
	for _, q := range queues {
		if c := s.qidx.stats[q]; c != nil {
			avail += int(c.states[JobAvailable])
		}
	}
	res := &FetchResult{Jobs: make([]*QueueJob, 0, min(avail, int(c.GetMax())))}
	empty := make([]bool, len(queues))
	gates := s.gates(queues, cal) // the queues' limits (queue_limits.go)
	left := len(queues)
	for len(res.Jobs) < int(c.GetMax()) && left > 0 {
		for k := 0; k < len(queues) && len(res.Jobs) < int(c.GetMax()); k++ {
			i := (start + k) % len(queues)
			if empty[i] {
				continue
			}
			var head availKey
			var job *QueueJob // looked up already by a gate with kind limits
			found := false
			switch {
			case !s.qidx.fetchable(queues[i]): // paused (queue_pause.go)
			case gates[i] != nil:
				head, found = gates[i].next(s)
				job = gates[i].job
			default:
				head, found = s.qidx.fetchHead(queues[i])
			}
			if !found {
				empty[i] = true
				left--
				continue
			}
			if job == nil {
				job = s.qjob(head.id)
			}
			res.Jobs = append(res.Jobs, s.claim(job, cal, c.GetWorkerId(), c.GetIdentity()))
			if gates[i] != nil {
				gates[i].took(res.Jobs[len(res.Jobs)-1])
			}
		}
	}
	for _, g := range gates {
		s.settleGate(g, cal)
	}
	return res
}

// claim starts the next attempt of an available job.
func (s *state) claim(j *QueueJob, cal int64, worker, identity string) *QueueJob {
	cp := *j
	n := &cp
	keep := j.Log
	if len(keep) == MaxAttemptRecords {
		keep = keep[1:]
	}
	n.Log = make([]Attempt, len(keep), len(keep)+1) // a private copy with room for the new attempt
	copy(n.Log, keep)
	n.Attempts++
	n.Log = append(n.Log, Attempt{Number: n.Attempts, Outcome: AttemptRunning, StartedAt: cal, Deadline: cal + n.VisibilityMs,
		WorkerID: worker, Identity: identity})
	s.boundRun(n, &n.Log[len(n.Log)-1], cal) // max_run (queue_maxrun.go)
	n.State, n.UpdatedAt = JobRunning, cal
	s.replaceJob(j, n)
	s.qidx.counts(n.Queue).Attempts++
	return n
}

// checkAttempt is the fence of a worker's call (like G3 for leases): the
// attempt must be the job's current, running one, handed to this worker
// and identity. A lapsed claim has been ended by advanceQueue before the
// command, so "running" means "unexpired at this command's calendar time".
func checkAttempt(j *QueueJob, id uint64, n uint32, worker, identity string) *Rejection {
	if j == nil {
		return jobNotFound(id)
	}
	// The refusal's metadata is built only for a refusal: an accepted
	// call (nearly every one) allocates nothing here.
	if n == 0 || n > j.Attempts {
		return reject(coorderr.AttemptLost, attemptMeta(j, n), "job %d has no attempt %d (its last is %d)", j.ID, n, j.Attempts)
	}
	a := j.attempt(n)
	if a != nil && a.Identity != "" && a.Identity != identity {
		return reject(coorderr.IdentityMismatch, nil, "attempt %d of job %d is bound to the identity that fetched it, not %q", n, j.ID, identity)
	}
	if a != nil && a.WorkerID != worker {
		return reject(coorderr.AttemptLost, attemptMeta(j, n), "attempt %d of job %d was handed to worker %q, not %q", n, j.ID, a.WorkerID, worker)
	}
	if cur, ok := j.Current(); ok && cur.Number == n {
		return nil
	}
	return attemptOver(j, n, a, attemptMeta(j, n))
}

// attemptOver explains why attempt n (record a, nil when no longer kept)
// is not live.
func attemptOver(j *QueueJob, n uint32, a *Attempt, meta map[string]string) *Rejection {
	switch {
	case a != nil && a.Outcome == AttemptLapsed && ranOut(a):
		return reject(coorderr.AttemptExpired, meta, "attempt %d of job %d ended at %d: max_run exceeded (%d ms after its start); the job was handed on",
			n, j.ID, a.Deadline, a.RunUntil-a.StartedAt)
	case a != nil && a.Outcome == AttemptLapsed:
		return reject(coorderr.AttemptExpired, meta, "attempt %d of job %d expired at %d: no heartbeat within the visibility timeout (%d ms); the job was handed on",
			n, j.ID, a.Deadline, j.VisibilityMs)
	case a != nil && a.Outcome == AttemptCancelled:
		return reject(coorderr.JobCancelled, meta, "job %d was cancelled during attempt %d", j.ID, n)
	case a != nil:
		return reject(coorderr.AttemptLost, meta, "attempt %d of job %d already ended (%s); the job is %s at attempt %d", n, j.ID, a.Outcome, j.State, j.Attempts)
	default:
		return reject(coorderr.AttemptLost, meta, "attempt %d of job %d is over; the job is %s at attempt %d", n, j.ID, j.State, j.Attempts)
	}
}

func attemptMeta(j *QueueJob, n uint32) map[string]string {
	m := map[string]string{
		"job_id":          strconv.FormatUint(j.ID, 10),
		"attempt":         strconv.FormatUint(uint64(n), 10),
		"current_attempt": strconv.FormatUint(uint64(j.Attempts), 10),
		"state":           j.State.String(),
	}
	if a := j.attempt(n); a != nil {
		m["outcome"] = a.Outcome.String()
	}
	return m
}

// heartbeatJobs extends each live attempt's visibility deadline to now +
// the job's visibility timeout.
func (s *state) heartbeatJobs(cal int64, c *fsmv1.HeartbeatJobs) any {
	return attemptItems(s, c.GetWorkerId(), "attempts", c.GetAttempts(), func(_ int, r *fsmv1.JobAttemptRef) (*QueueJob, any) {
		j := s.qjob(r.GetJobId())
		if rej := checkAttempt(j, r.GetJobId(), r.GetAttempt(), c.GetWorkerId(), c.GetIdentity()); rej != nil {
			return nil, rej
		}
		return j, nil
	}, func(_ *fsmv1.JobAttemptRef, n *QueueJob, a *Attempt) {
		a.Deadline = runBound(a, max(a.Deadline, cal+n.VisibilityMs)) // never past max_run
		a.Heartbeats++
		n.UpdatedAt = cal
	})
}

// attemptItems applies a worker's batch of items on job attempts
// (Heartbeat, Complete, Fail) once the batch passes its checks. Items are
// independent: check returns an item's job, or else its answer; change
// edits n, a copy of that job whose last attempt is a, which then
// replaces the job.
func attemptItems[R any](s *state, worker, field string, items []R, check func(int, R) (*QueueJob, any),
	change func(R, *QueueJob, *Attempt)) any {
	if rej := firstRejection(checkWorker(worker), checkItems(field, len(items))); rej != nil {
		return rej
	}
	out := make(JobResults, len(items))
	for i, r := range items {
		j, answer := check(i, r)
		if answer != nil {
			out[i] = answer
			continue
		}
		n := j.withLog()
		change(r, n, &n.Log[len(n.Log)-1])
		s.replaceJob(j, n)
		out[i] = &JobOutcome{Job: n}
	}
	return out
}

// settling checks an item of a Complete or Fail: the repeat of an
// attempt's own outcome (same worker and identity) answers the job as it
// is (Duplicate); a call by anything but the job's live attempt is refused.
// Otherwise it returns the job, for the caller to settle.
func (s *state) settling(id uint64, n uint32, worker, identity string, outcome AttemptOutcome) (*QueueJob, any) {
	j := s.qjob(id)
	if j != nil {
		if a := j.attempt(n); a != nil && a.Outcome == outcome && a.WorkerID == worker && a.Identity == identity {
			return nil, &JobOutcome{Job: j, Duplicate: true}
		}
	}
	if rej := checkAttempt(j, id, n, worker, identity); rej != nil {
		return nil, rej
	}
	return j, nil
}

// completeJobs records each attempt's success: the job is succeeded, final.
// A repeat by the attempt that succeeded returns the job (Duplicate).
func (s *state) completeJobs(cal int64, c *fsmv1.CompleteJobs) any {
	return attemptItems(s, c.GetWorkerId(), "completions", c.GetCompletions(), func(i int, r *fsmv1.JobCompletion) (*QueueJob, any) {
		if len(r.GetResult()) > MaxJobResultBytes {
			return nil, reject(coorderr.InvalidArgument, map[string]string{"field": "result", "index": strconv.Itoa(i)},
				"result is %d bytes; the limit is %d", len(r.GetResult()), MaxJobResultBytes)
		}
		return s.settling(r.GetJobId(), r.GetAttempt(), c.GetWorkerId(), c.GetIdentity(), AttemptSucceeded)
	}, func(r *fsmv1.JobCompletion, n *QueueJob, a *Attempt) {
		a.Outcome, a.FinishedAt, a.Result = AttemptSucceeded, cal, r.GetResult()
		a.DeliveryStatus, a.DeliveryLatencyMs = r.GetDeliveryStatus(), r.GetDeliveryLatencyMs()
		n.State, n.UpdatedAt, n.FinishedAt = JobSucceeded, cal, cal
		s.qidx.counts(n.Queue).Succeeded++
	})
}

// failJobs records each attempt's failure. Retryable with attempts left:
// retryable, due again at now + backoff (or + retry_after_ms if longer).
// Otherwise: dead. A repeat by the
// attempt that failed returns the job (Duplicate).
func (s *state) failJobs(cal int64, c *fsmv1.FailJobs) any {
	return attemptItems(s, c.GetWorkerId(), "failures", c.GetFailures(), func(_ int, r *fsmv1.JobFailure) (*QueueJob, any) {
		return s.settling(r.GetJobId(), r.GetAttempt(), c.GetWorkerId(), c.GetIdentity(), AttemptFailed)
	}, func(r *fsmv1.JobFailure, n *QueueJob, a *Attempt) {
		a.Outcome, a.FinishedAt, a.Error = AttemptFailed, cal, coorderr.Truncate(r.GetError(), MaxJobErrorBytes)
		a.DeliveryStatus, a.DeliveryLatencyMs = r.GetDeliveryStatus(), r.GetDeliveryLatencyMs()
		n.UpdatedAt = cal
		cnt := s.qidx.counts(n.Queue)
		cnt.Failures++
		if !r.GetRetryable() || int32(n.Attempts) >= n.MaxAttempts {
			n.State, n.FinishedAt = JobDead, cal
			cnt.Dead++
		} else {
			n.State = JobRetryable
			// An HTTP target's Retry-After (retry_after_ms, at most the
			// backoff limit) can only make the wait longer.
			wait := Backoff(n.BackoffMs, n.BackoffMaxMs, n.BackoffPermille, n.Attempts, r.GetJitterPpm())
			n.RunAt = cal + max(wait, min(r.GetRetryAfterMs(), MaxBackoffMs))
		}
	})
}

// Backoff is the delay before the retry that follows failed attempt
// number attempt: initial * (permille/1000)^(attempt-1), at most maxMs,
// then up to 25 % longer by the leader's jitter (jitterPPM in [0, 1e6)).
// Integer arithmetic only, so every replica computes the same.
func Backoff(initial, maxMs int64, permille, attempt, jitterPPM uint32) int64 {
	base := min(initial, maxMs)
	for i := uint32(1); i < attempt && base < maxMs; i++ {
		base = min(base*int64(permille)/1000, maxMs)
	}
	jitter := int64(min(jitterPPM, maxJitterPPM-1))
	return base + base*jitter/(4*maxJitterPPM)
}

// cancelJobs cancels jobs that are not final. A running job's attempt ends
// CANCELLED, so its token is stale at once: the worker's next heartbeat,
// completion, failure or fenced commit is refused with JOB_CANCELLED.
// Cancelling a cancelled job returns it (Duplicate); a succeeded or dead
// job is JOB_FINISHED.
func (s *state) cancelJobs(cal int64, c *fsmv1.CancelJobs) any {
	return s.jobItems(c.GetJobIds(), func(j *QueueJob) any {
		switch {
		case j.State == JobCancelled:
			return &JobOutcome{Job: j, Duplicate: true}
		case j.State.Final():
			return reject(coorderr.JobFinished, map[string]string{"job_id": strconv.FormatUint(j.ID, 10), "state": j.State.String()},
				"job %d is already %s", j.ID, j.State)
		}
		why := "cancelled"
		if c.GetIdentity() != "" {
			why = fmt.Sprintf("cancelled by %q", c.GetIdentity())
		}
		return &JobOutcome{Job: s.cancelJob(j, cal, why)}
	})
}

// JobNotFound is the refusal of a call on a job id that names no job;
// the API's Get of one says the same (NOT_FOUND), so that a missing job
// reads alike whichever call found it missing.
func JobNotFound(id uint64) *Rejection {
	return reject(coorderr.JobNotFound, map[string]string{"job_id": strconv.FormatUint(id, 10)},
		"job %d does not exist (never submitted, or pruned)", id)
}

// jobItems applies a batch of job ids (Cancel, Retry): an id of no job is
// JOB_NOT_FOUND, do answers the others. Items are independent.
func (s *state) jobItems(ids []uint64, do func(*QueueJob) any) any {
	if rej := checkItems("job_ids", len(ids)); rej != nil {
		return rej
	}
	out := make(JobResults, len(ids))
	for i, id := range ids {
		if j := s.qjob(id); j != nil {
			out[i] = do(j)
		} else {
			out[i] = jobNotFound(id)
		}
	}
	return out
}

func jobNotFound(id uint64) *Rejection {
	return JobNotFound(id)
}

// cancelJob cancels a job that is not final; a running attempt ends
// CANCELLED with error why.
func (s *state) cancelJob(j *QueueJob, cal int64, why string) *QueueJob {
	n := j.withLog()
	if a, ok := n.Current(); ok {
		a.Outcome, a.FinishedAt, a.Error = AttemptCancelled, cal, why
	}
	n.State, n.UpdatedAt, n.FinishedAt = JobCancelled, cal, cal
	s.replaceJob(j, n)
	s.qidx.counts(n.Queue).Cancelled++
	return n
}

// retryJobs makes jobs available now: dead, cancelled, retryable (skips
// the backoff) and scheduled (runs early) ones. A job whose attempts are
// used up gets one more (max_attempts = attempts + 1). Attempt numbers go
// on growing, so older tokens stay stale. Available: Duplicate; running:
// JOB_RUNNING; succeeded: JOB_FINISHED (submit a new job instead).
func (s *state) retryJobs(cal int64, c *fsmv1.RetryJobs) any {
	return s.jobItems(c.GetJobIds(), func(j *QueueJob) any {
		meta := map[string]string{"job_id": strconv.FormatUint(j.ID, 10), "state": j.State.String()}
		switch j.State {
		case JobAvailable:
			return &JobOutcome{Job: j, Duplicate: true}
		case JobRunning:
			return reject(coorderr.JobRunning, meta, "job %d is running (attempt %d); cancel it first or wait", j.ID, j.Attempts)
		case JobSucceeded:
			return reject(coorderr.JobFinished, meta, "job %d succeeded; submit a new job to run it again", j.ID)
		}
		n := *j
		if int32(n.Attempts) >= n.MaxAttempts {
			n.MaxAttempts = int32(n.Attempts) + 1
		}
		n.State, n.RunAt, n.UpdatedAt, n.FinishedAt = JobAvailable, cal, cal, 0
		s.replaceJob(j, &n)
		return &JobOutcome{Job: &n}
	})
}

func firstRejection(rs ...*Rejection) *Rejection {
	for _, r := range rs {
		if r != nil {
			return r
		}
	}
	return nil
}
