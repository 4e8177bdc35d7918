package fsm

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Bulk operations on jobs (StartBulkJobs, StepBulkJobs) and job delete
// (DeleteJobs). A bulk operation is a record: its action (retry, cancel,
// delete), its selector, who started it and a cursor. It covers the jobs
// with ids up to the last id when it started (upto), in id order; each
// StepBulkJobs, proposed by the leader's bulk service, acts on the next
// matching jobs above the cursor — at most max (≤ MaxJobBatch) acted on and
// at most MaxBulkScan visited — and moves the cursor past what it visited,
// so one entry is bounded whatever the selector. A step names the cursor
// it was computed from; a step whose cursor is not the operation's (a
// repeat, a deposed leader's late entry) changes nothing, so every job is
// visited once: a leader change resumes at the replicated cursor, never
// twice, never skipping. The operation's id is the caller's request id: a
// repeated start returns the recorded one.

// Limits of bulk operations (they only grow).
const (
	MaxBulkScan      = 10_000 // jobs visited per step
	MaxBulkIDs       = 10_000 // ids a selector may list
	MaxBulkOpIDBytes = 128
	MaxBulkRunning   = 16  // operations in progress at once
	MaxBulkFinished  = 100 // finished operations kept (the oldest go)
)

// BulkAction is what a bulk operation does; values are fsmv1.BulkAction's.
type BulkAction uint8

const (
	BulkRetry  = BulkAction(fsmv1.BulkAction_BULK_ACTION_RETRY)
	BulkCancel = BulkAction(fsmv1.BulkAction_BULK_ACTION_CANCEL)
	BulkDelete = BulkAction(fsmv1.BulkAction_BULK_ACTION_DELETE)
)

func (a BulkAction) String() string {
	return fsmv1.BulkAction(a).String()[len("BULK_ACTION_"):]
}

// BulkOp is a bulk operation. Records are immutable once stored; Sel is
// shared, never written.
type BulkOp struct {
	ID                               string
	Action                           BulkAction
	Sel                              *fsmv1.JobSelector
	Identity                         string
	CreatedAt, UpdatedAt, FinishedAt int64 // calendar ms; FinishedAt 0 while running
	Upto, Cursor                     uint64
	Total, Done, Skipped, Steps      uint64
}

// Finished reports whether every covered job has been visited.
func (o *BulkOp) Finished() bool { return o.Cursor >= o.Upto }

func lessBulkOp(a, b *BulkOp) bool { return a.ID < b.ID }

// BulkResult is the outcome of a StartBulkJobs or a StepBulkJobs: the
// operation after it. Duplicate: a repeated start (the recorded
// operation); Stale: a step computed from another cursor (nothing done).
type BulkResult struct {
	Op        BulkOp
	Duplicate bool
	Stale     bool
}

// CheckJobSelector checks a selector (the API calls it before proposing;
// the FSM again). It returns the field (the API's name) and the problem,
// or "".
func CheckJobSelector(sel *fsmv1.JobSelector) (field, problem string) {
	switch {
	case len(sel.GetQueue()) > MaxQueueNameBytes:
		return "queue", "is too long"
	case len(sel.GetKind()) > MaxJobKindBytes:
		return "kind", "is too long"
	case sel.GetState() < 0 || sel.GetState() > fsmv1.JobState(JobDead):
		return "state", "unknown state"
	case sel.GetLabelKey() == "" && sel.GetLabelValue() != "":
		return "label", "a label value without its key"
	case len(sel.GetIds()) > MaxBulkIDs:
		return "ids", "at most " + strconv.Itoa(MaxBulkIDs) + " ids"
	}
	for i, id := range sel.GetIds() {
		if id == 0 || (i > 0 && id <= sel.GetIds()[i-1]) {
			return "ids", "ids are job ids (at least 1), sorted and unique"
		}
	}
	return "", ""
}

// selects reports whether j matches the selector's fields (not the ids:
// the walk handles them).
func selects(sel *fsmv1.JobSelector, j *QueueJob) bool {
	switch {
	case sel.GetQueue() != "" && j.Queue != sel.GetQueue(),
		sel.GetState() != 0 && j.State != JobState(sel.GetState()),
		sel.GetKind() != "" && j.Kind != sel.GetKind(),
		sel.GetCreatedAfterMs() != 0 && j.CreatedAt < sel.GetCreatedAfterMs(),
		sel.GetCreatedBeforeMs() != 0 && j.CreatedAt >= sel.GetCreatedBeforeMs(),
		(sel.GetFinishedAfterMs() != 0 || sel.GetFinishedBeforeMs() != 0) && j.FinishedAt == 0,
		sel.GetFinishedAfterMs() != 0 && j.FinishedAt < sel.GetFinishedAfterMs(),
		sel.GetFinishedBeforeMs() != 0 && j.FinishedAt >= sel.GetFinishedBeforeMs():
		return false
	}
	if k := sel.GetLabelKey(); k != "" {
		v, ok := j.label(k)
		return ok && v == sel.GetLabelValue()
	}
	return true
}

// walkSelected visits, in id order, the jobs with ids in (after, upto]
// that the most selective index of sel has (ids, label, kind, queue and
// state, queue, state, else every job); visit checks the rest and returns
// false to stop. It reports whether the walk reached its end.
func (s *state) walkSelected(sel *fsmv1.JobSelector, after, upto uint64, visit func(j *QueueJob) bool) (exhausted bool) {
	exhausted = true
	step := func(id uint64) bool {
		if id > upto {
			return false
		}
		if !visit(s.qjob(id)) {
			exhausted = false
			return false
		}
		return true
	}
	q := s.qidx
	from := after + 1
	if after == math.MaxUint64 {
		return true
	}
	switch {
	case len(sel.GetIds()) > 0:
		ids := sel.GetIds()
		i, _ := slices.BinarySearch(ids, from)
		for ; i < len(ids); i++ {
			if s.qjob(ids[i]) == nil {
				continue
			}
			if !step(ids[i]) {
				break
			}
		}
	case sel.GetLabelKey() != "":
		k, v := sel.GetLabelKey(), sel.GetLabelValue()
		q.byLabel.AscendGreaterOrEqual(labelKey{k, v, from}, func(x labelKey) bool { return x.key == k && x.value == v && step(x.id) })
	case sel.GetKind() != "":
		q.byKind.AscendGreaterOrEqual(queueKey{sel.GetKind(), from}, func(x queueKey) bool { return x.queue == sel.GetKind() && step(x.id) })
	case sel.GetState() != 0: // of one queue, or of all ("")
		q.states.ascend(sel.GetQueue(), JobState(sel.GetState()), from, step)
	case sel.GetQueue() != "":
		q.byQueue.AscendGreaterOrEqual(queueKey{sel.GetQueue(), from}, func(x queueKey) bool { return x.queue == sel.GetQueue() && step(x.id) })
	default:
		s.qjobs.AscendGreaterOrEqual(&QueueJob{ID: from}, func(j *QueueJob) bool { return step(j.ID) })
	}
	return exhausted
}

// startBulkJobs records a bulk operation (or returns the one its id names).
func (s *state) startBulkJobs(cal int64, c *fsmv1.StartBulkJobs) any {
	id := c.GetOpId()
	if id == "" || len(id) > MaxBulkOpIDBytes || TextProblem(id) != "" {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "request_id"}, "a bulk operation's id is 1 to %d bytes of UTF-8 without control characters", MaxBulkOpIDBytes)
	}
	if old, ok := s.qops.bulks.Get(&BulkOp{ID: id}); ok {
		return &BulkResult{Op: *old, Duplicate: true}
	}
	switch a := BulkAction(c.GetAction()); a {
	case BulkRetry, BulkCancel, BulkDelete:
	default:
		return reject(coorderr.InvalidArgument, map[string]string{"field": "action"}, "a bulk action is RETRY, CANCEL or DELETE, not %d", c.GetAction())
	}
	sel := c.GetSelector()
	if sel == nil {
		sel = &fsmv1.JobSelector{}
	}
	if field, problem := CheckJobSelector(sel); field != "" {
		return reject(coorderr.InvalidArgument, map[string]string{"field": field}, "%s: %s", field, problem)
	}
	running := 0
	s.qops.bulks.Ascend(func(o *BulkOp) bool {
		if !o.Finished() {
			running++
		}
		return true
	})
	if running >= MaxBulkRunning {
		return reject(coorderr.JobQuota, map[string]string{"limit": strconv.Itoa(MaxBulkRunning)},
			"%d bulk operations are in progress; the limit is %d: wait for one to finish", running, MaxBulkRunning)
	}
	upto := s.lastJobID
	if ids := sel.GetIds(); len(ids) > 0 {
		upto = min(upto, ids[len(ids)-1])
	}
	op := &BulkOp{ID: id, Action: BulkAction(c.GetAction()), Sel: sel, Identity: c.GetIdentity(), CreatedAt: cal, UpdatedAt: cal,
		Upto: upto, Total: c.GetTotal()}
	if op.Finished() {
		op.FinishedAt = cal
	}
	s.qops.bulks.ReplaceOrInsert(op)
	s.pruneBulkOps()
	return &BulkResult{Op: *op}
}

// stepBulkJobs applies the next batch of a running operation.
func (s *state) stepBulkJobs(cal int64, c *fsmv1.StepBulkJobs) any {
	old, ok := s.qops.bulks.Get(&BulkOp{ID: c.GetOpId()})
	if !ok {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "op_id"}, "no bulk operation %q", c.GetOpId())
	}
	if old.Finished() || c.GetCursor() != old.Cursor {
		return &BulkResult{Op: *old, Stale: true}
	}
	if c.GetMax() == 0 || c.GetMax() > MaxJobBatch {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "max"}, "max must be 1 to %d, not %d", MaxJobBatch, c.GetMax())
	}
	var picked []uint64
	visited, last := 0, old.Cursor
	exhausted := s.walkSelected(old.Sel, old.Cursor, old.Upto, func(j *QueueJob) bool {
		if visited == MaxBulkScan || len(picked) == int(c.GetMax()) {
			return false
		}
		visited++
		last = j.ID
		if selects(old.Sel, j) {
			picked = append(picked, j.ID)
		}
		return true
	})
	op := *old
	op.Cursor, op.UpdatedAt = last, cal
	if exhausted {
		op.Cursor = op.Upto
	}
	op.Steps++
	for _, id := range picked {
		if s.bulkOne(cal, op.Action, id, op.Identity) {
			op.Done++
		} else {
			op.Skipped++
		}
	}
	if op.Finished() {
		op.FinishedAt = cal
	}
	s.qops.bulks.ReplaceOrInsert(&op)
	if op.Finished() {
		s.pruneBulkOps()
	}
	return &BulkResult{Op: op}
}

// bulkOne applies action to job id, by the same rules as the one-job
// commands (retryJobs, cancelJobs, deleteJobs); false: the action does not
// apply to the job as it is (skipped).
func (s *state) bulkOne(cal int64, action BulkAction, id uint64, identity string) bool {
	var out any
	switch action {
	case BulkRetry:
		out = s.retryJobs(cal, &fsmv1.RetryJobs{JobIds: []uint64{id}, Identity: identity})
	case BulkCancel:
		out = s.cancelJobs(cal, &fsmv1.CancelJobs{JobIds: []uint64{id}, Identity: identity})
	default:
		out = s.deleteJobs(&fsmv1.DeleteJobs{JobIds: []uint64{id}, Identity: identity})
	}
	r, ok := out.(JobResults)
	if !ok || len(r) != 1 {
		return false
	}
	o, ok := r[0].(*JobOutcome)
	return ok && !o.Duplicate
}

// pruneBulkOps drops the oldest finished operations beyond MaxBulkFinished.
func (s *state) pruneBulkOps() {
	var done []*BulkOp
	s.qops.bulks.Ascend(func(o *BulkOp) bool {
		if o.Finished() {
			done = append(done, o)
		}
		return true
	})
	if len(done) <= MaxBulkFinished {
		return
	}
	slices.SortFunc(done, func(a, b *BulkOp) int {
		return cmp.Or(cmp.Compare(a.FinishedAt, b.FinishedAt), cmp.Compare(a.ID, b.ID))
	})
	for _, o := range done[:len(done)-MaxBulkFinished] {
		s.qops.bulks.Delete(o)
	}
}

// deleteJobs deletes final jobs. A job that is not final is refused
// (JOB_NOT_FINAL); an id at or below the last assigned whose job is gone
// (deleted or pruned) answers Duplicate; a higher one JOB_NOT_FOUND.
func (s *state) deleteJobs(c *fsmv1.DeleteJobs) any {
	if rej := checkItems("job_ids", len(c.GetJobIds())); rej != nil {
		return rej
	}
	out := make(JobResults, len(c.GetJobIds()))
	for i, id := range c.GetJobIds() {
		j := s.qjob(id)
		switch {
		case j == nil && id != 0 && id <= s.lastJobID:
			out[i] = &JobOutcome{Job: &QueueJob{ID: id}, Duplicate: true}
		case j == nil:
			out[i] = jobNotFound(id)
		case !j.State.Final():
			out[i] = reject(coorderr.JobNotFinal, map[string]string{"job_id": strconv.FormatUint(id, 10), "state": j.State.String()},
				"job %d is %s, not final: cancel it first, then delete it", id, j.State)
		default:
			s.deleteJob(j)
			out[i] = &JobOutcome{Job: j}
		}
	}
	return out
}

// BulkOp returns the operation id names.
func (f *FSM) BulkOp(id string) (BulkOp, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	o, ok := f.st.qops.bulks.Get(&BulkOp{ID: id})
	if !ok {
		return BulkOp{}, false
	}
	return *o, true
}

// BulkOps lists the operations kept (running, and the last finished),
// newest first; running only: those in progress.
func (f *FSM) BulkOps(runningOnly bool) []BulkOp {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []BulkOp
	f.st.qops.bulks.Ascend(func(o *BulkOp) bool {
		if !runningOnly || !o.Finished() {
			out = append(out, *o)
		}
		return true
	})
	slices.SortFunc(out, func(a, b BulkOp) int { return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	return out
}

// CountSelected counts the jobs sel selects now (of any state the action
// may skip), walking the most selective index: the cost is the jobs that
// index holds for the selector, not all jobs.
func (f *FSM) CountSelected(sel *fsmv1.JobSelector) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := uint64(0)
	f.st.walkSelected(sel, 0, f.st.lastJobID, func(j *QueueJob) bool {
		if selects(sel, j) {
			n++
		}
		return true
	})
	return n
}

func bulkOpRecord(o *BulkOp) *fsmv1.BulkOpRecord {
	return &fsmv1.BulkOpRecord{OpId: o.ID, Action: fsmv1.BulkAction(o.Action), Selector: o.Sel, Identity: o.Identity,
		CreatedAtMs: o.CreatedAt, UpdatedAtMs: o.UpdatedAt, FinishedAtMs: o.FinishedAt, Upto: o.Upto, Cursor: o.Cursor,
		Total: o.Total, Done: o.Done, Skipped: o.Skipped, Steps: o.Steps}
}

func bulkOpFromRecord(r *fsmv1.BulkOpRecord) *BulkOp {
	sel := r.GetSelector()
	if sel == nil {
		sel = &fsmv1.JobSelector{}
	}
	return &BulkOp{ID: r.GetOpId(), Action: BulkAction(r.GetAction()), Sel: sel, Identity: r.GetIdentity(), CreatedAt: r.GetCreatedAtMs(),
		UpdatedAt: r.GetUpdatedAtMs(), FinishedAt: r.GetFinishedAtMs(), Upto: r.GetUpto(), Cursor: r.GetCursor(), Total: r.GetTotal(),
		Done: r.GetDone(), Skipped: r.GetSkipped(), Steps: r.GetSteps()}
}

// MaxSearchScan is the most jobs one page of a search (ScanQueueJobs)
// looks at.
const MaxSearchScan = 10_000

// JobSearch is what a search adds to a JobFilter: a created range (after
// inclusive, before exclusive; 0 unbounded) and a substring of the args.
type JobSearch struct {
	CreatedAfter, CreatedBefore int64
	ArgsContains                []byte
}

func (q JobSearch) match(j *QueueJob) bool {
	return (q.CreatedAfter == 0 || j.CreatedAt >= q.CreatedAfter) && (q.CreatedBefore == 0 || j.CreatedAt < q.CreatedBefore) &&
		(len(q.ArgsContains) == 0 || bytesContains(j.Args, q.ArgsContains))
}

// ScanQueueJobs is ListQueueJobs with a search: it looks at at most
// maxScan jobs the filter's index holds below before (newest first) and
// returns up to limit that match; next is where the scan goes on (0: it
// reached the end), scanned how many it looked at. Its cost is bounded by
// maxScan whatever the search.
func (f *FSM) ScanQueueJobs(fl JobFilter, q JobSearch, before uint64, limit, maxScan int) (out []QueueJob, next uint64, scanned int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if before == 0 {
		before = math.MaxUint64
	}
	sel := &fsmv1.JobSelector{Queue: fl.Queue, State: fsmv1.JobState(fl.State), Kind: fl.Kind}
	if fl.Label != nil {
		sel.LabelKey, sel.LabelValue = fl.Label.Key, fl.Label.Value
	}
	// The walk of walkSelected, newest first: collect ids from the index.
	done := true
	visit := func(id uint64) bool {
		if scanned == maxScan || len(out) == limit {
			done = false
			return false
		}
		scanned++
		next = id
		if j := f.st.qjob(id); fl.match(j) && q.match(j) {
			out = append(out, *j)
		}
		return true
	}
	top := before - 1
	idx := f.st.qidx
	switch {
	case sel.GetLabelKey() != "":
		idx.byLabel.DescendLessOrEqual(labelKey{sel.GetLabelKey(), sel.GetLabelValue(), top}, func(k labelKey) bool {
			return k.key == sel.GetLabelKey() && k.value == sel.GetLabelValue() && visit(k.id)
		})
	case fl.Kind != "":
		idx.byKind.DescendLessOrEqual(queueKey{fl.Kind, top}, func(k queueKey) bool { return k.queue == fl.Kind && visit(k.id) })
	case fl.State != 0: // of one queue, or of all ("")
		idx.states.descend(fl.Queue, fl.State, top, visit)
	case fl.Queue != "":
		idx.byQueue.DescendLessOrEqual(queueKey{fl.Queue, top}, func(k queueKey) bool { return k.queue == fl.Queue && visit(k.id) })
	default:
		f.st.qjobs.DescendLessOrEqual(&QueueJob{ID: top}, func(j *QueueJob) bool { return visit(j.ID) })
	}
	if done {
		next = 0
	}
	return out, next, scanned
}

func bytesContains(b, sub []byte) bool { return bytes.Contains(b, sub) }

// MaxWorkerAttempts bounds the running attempts RunningAttempts reads.
const MaxWorkerAttempts = 1000

// RunningAttempt is a running job's live attempt, for the workers view.
type RunningAttempt struct {
	JobID       uint64
	Queue, Kind string
	Attempt     Attempt
}

// RunningAttempts returns up to limit live attempts (of queue's jobs, or
// every queue's for ""), by job id, and whether more are running. It walks
// the running jobs only.
func (f *FSM) RunningAttempts(queue string, limit int) (out []RunningAttempt, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	collect := func(id uint64) bool {
		j := f.st.qjob(id)
		a, ok := j.Current()
		if !ok || (queue != "" && j.Queue != queue) {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, RunningAttempt{JobID: j.ID, Queue: j.Queue, Kind: j.Kind, Attempt: *a})
		return true
	}
	f.st.qidx.states.ascend(queue, JobRunning, 0, collect)
	return out, more
}
