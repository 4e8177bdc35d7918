package fsm

import (
	"sort"
	"strconv"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// ScheduleResult is the outcome of PutSchedule, DeleteSchedule and
// PauseSchedule: the schedule after the command. Changed is false when the
// command found it as asked (the same spec, already paused, already
// deleted); Created when a put made a new schedule (also over a tombstone).
type ScheduleResult struct {
	Schedule Schedule
	Changed  bool
	Created  bool
}

// TriggerResult is the outcome of a TriggerSchedule: the schedule and its
// new history entry (the job, or the existing one when Duplicate).
type TriggerResult struct {
	Schedule Schedule
	Entry    HistoryEntry
}

// MaterialiseResult has one outcome per item of a MaterialiseSchedules.
type MaterialiseResult struct {
	Items []MaterialiseOutcome
}

// MaterialiseOutcome is what one item did. Stale: the schedule changed
// since the leader computed the item (deleted, paused, updated, or already
// materialised past from_ms): nothing was applied.
type MaterialiseOutcome struct {
	Name       string
	Stale      bool
	Created    int   // jobs created
	Duplicates int   // occurrences whose unique key named an existing job
	Skipped    int64 // occurrences skipped, every reason
	Cancelled  int   // jobs cancelled by REPLACE
}

func scheduleNotFound(name string) *Rejection {
	return reject(coorderr.ScheduleNotFound, map[string]string{"schedule": name}, "schedule %q does not exist", name)
}

// guardRefusal refuses a command whose guard no longer holds: the live
// schedule's queue is not the one the leader authorised the change against
// (fsmv1.ScheduleGuard; "" = no live schedule). No guard: no check. The
// refusal names neither queue.
func guardRefusal(name string, cur *Schedule, g *fsmv1.ScheduleGuard) *Rejection {
	if g == nil {
		return nil
	}
	var q string
	if cur != nil && !cur.Deleted {
		q = cur.Spec.Job.Queue
	}
	if q == g.GetQueue() {
		return nil
	}
	return reject(coorderr.PermissionDenied, map[string]string{"schedule": name},
		"schedule %q moved to another queue while this change was being authorised", name)
}

// putSchedule creates or updates a schedule. The same spec again changes
// nothing. A new schedule (also one over a tombstone) owes the occurrences
// after cal, and is due at once so that the leader computes its first
// occurrence; an update keeps the mark, the history, and the paused state,
// and is due at once too (the next occurrence may have moved).
func (s *state) putSchedule(cal int64, c *fsmv1.PutSchedule) any {
	if field, problem := checkScheduleSpec(c.GetName(), c.GetSpec(), c.GetSpecRules()); field != "" {
		return reject(coorderr.InvalidArgument, map[string]string{"field": field}, "%s %s", field, problem)
	}
	spec := specFromWire(c.GetSpec())
	cur := s.schedule(c.GetName())
	if rej := guardRefusal(c.GetName(), cur, c.GetGuard()); rej != nil {
		return rej
	}
	if cur != nil && !cur.Deleted && cur.Spec.equal(&spec) {
		return &ScheduleResult{Schedule: *cur}
	}
	if rej := putPrecondition(c, cur); rej != nil {
		return rej
	}
	var n Schedule
	created := cur == nil || cur.Deleted
	if limit, id := c.GetMaxSchedules(), c.GetIdentity(); created && limit > 0 && id != "" && len(s.sidx.byCreator[id]) >= int(limit) {
		return reject(coorderr.ScheduleQuota, map[string]string{"identity": id, "quota": "schedules", "limit": strconv.FormatUint(uint64(limit), 10)},
			"identity %q already created %d schedules that are not deleted, its limit; delete one first", id, limit)
	}
	if created {
		n = Schedule{Name: c.GetName(), Mark: cal, CreatedBy: c.GetIdentity(), CreatedAt: cal}
		if m := c.GetMarkMs(); m > 0 && m < cal {
			n.Mark = m // a one-shot put just after its time still owes it
		}
		if cur != nil {
			n.Revision = cur.Revision // a tombstone's revision goes on growing
		}
	} else {
		n = *cur
	}
	n.Spec = spec
	n.Revision++
	n.NextDue = max(cal, 1)
	n.UpdatedBy, n.UpdatedAt = c.GetIdentity(), cal
	s.putScheduleRecord(cur, &n)
	return &ScheduleResult{Schedule: n, Changed: true, Created: created}
}

// putPrecondition checks a put's create_only and expected_revision against
// the schedule it would replace (cur: nil or a tombstone when there is
// none). A put of the spec the schedule has already passes before this
// check, so a retried create or update is not refused.
func putPrecondition(c *fsmv1.PutSchedule, cur *Schedule) *Rejection {
	live := cur != nil && !cur.Deleted
	switch {
	case c.GetCreateOnly() && live:
		return reject(coorderr.ScheduleExists, map[string]string{"schedule": cur.Name, "revision": strconv.FormatUint(cur.Revision, 10)},
			"schedule %q exists (revision %d) with another definition; change it with a put of expected_revision %d",
			cur.Name, cur.Revision, cur.Revision)
	case c.GetExpectedRevision() != 0 && !live:
		return scheduleNotFound(c.GetName())
	case c.GetExpectedRevision() != 0 && cur.Revision != c.GetExpectedRevision():
		return reject(coorderr.ScheduleRevisionMismatch, map[string]string{"schedule": cur.Name, "revision": strconv.FormatUint(cur.Revision, 10)},
			"schedule %q is at revision %d, not %d: it changed since it was read", cur.Name, cur.Revision, c.GetExpectedRevision())
	}
	return nil
}

// deleteSchedule makes a schedule a tombstone: no more occurrences (jobs
// already made are left alone), its history kept until the tombstone is
// pruned.
func (s *state) deleteSchedule(cal int64, c *fsmv1.DeleteSchedule) any {
	cur := s.schedule(c.GetName())
	if rej := guardRefusal(c.GetName(), cur, c.GetGuard()); rej != nil {
		return rej
	}
	switch {
	case cur == nil:
		return scheduleNotFound(c.GetName())
	case cur.Deleted:
		return &ScheduleResult{Schedule: *cur}
	}
	n := *cur
	n.Deleted, n.DeletedAt, n.DeletedBy = true, cal, c.GetIdentity()
	n.Revision++
	s.putScheduleRecord(cur, &n)
	return &ScheduleResult{Schedule: n, Changed: true}
}

// pauseSchedule pauses or resumes. A resume records nothing by itself: it
// notes when it happened, and the leader's next materialisation records
// the occurrences in (mark, resumed_at] as one PAUSED range and owes only
// those after it (no burst of what was missed).
func (s *state) pauseSchedule(cal int64, c *fsmv1.PauseSchedule) any {
	cur := s.schedule(c.GetName())
	if rej := guardRefusal(c.GetName(), cur, c.GetGuard()); rej != nil {
		return rej
	}
	switch {
	case cur == nil || cur.Deleted:
		return scheduleNotFound(c.GetName())
	case cur.Paused == c.GetPaused():
		return &ScheduleResult{Schedule: *cur}
	}
	n := *cur
	n.Revision++
	if c.GetPaused() {
		n.Paused, n.PausedAt, n.PausedBy = true, cal, c.GetIdentity()
	} else {
		n.Paused, n.ResumedAt = false, cal
		if n.NextDue > 0 {
			n.NextDue = max(cal, 1)
		}
	}
	s.putScheduleRecord(cur, &n)
	return &ScheduleResult{Schedule: n, Changed: true}
}

// triggerSchedule makes an extra occurrence: a job with the trigger's own
// window, whatever the schedule's next occurrence (also while paused). The
// overlap policy applies: FORBID refuses while the previous job is not
// final (SCHEDULE_OVERLAP), REPLACE cancels it.
func (s *state) triggerSchedule(cal int64, c *fsmv1.TriggerSchedule) any {
	cur := s.schedule(c.GetName())
	if rej := guardRefusal(c.GetName(), cur, c.GetGuard()); rej != nil {
		return rej
	}
	if cur == nil || cur.Deleted {
		return scheduleNotFound(c.GetName())
	}
	if c.GetWindow() == "" || len(c.GetWindow()) > MaxWindowBytes {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "window"}, "window must be 1 to %d bytes", MaxWindowBytes)
	}
	if last := s.qjob(cur.LastJobID); last != nil && !last.State.Final() && cur.Spec.Overlap == OverlapForbid {
		return reject(coorderr.ScheduleOverlap, map[string]string{"schedule": cur.Name, "job_id": strconv.FormatUint(last.ID, 10),
			"state": last.State.String()}, "schedule %q forbids overlap and the job of its previous occurrence (%d) is %s",
			cur.Name, last.ID, last.State)
	}
	n := *cur
	var out MaterialiseOutcome
	hist := s.occur(&n, cal, &fsmv1.ScheduleOccurrence{AtMs: c.GetAtMs(), Window: c.GetWindow()}, true, &out, nil)
	n.record(hist)
	s.putScheduleRecord(cur, &n)
	return &TriggerResult{Schedule: n, Entry: hist[len(hist)-1]}
}

// materialise applies one round of the leader's materialiser. Each item
// applies only to the schedule state it was computed from (revision and
// mark): a retried or late item is stale and changes nothing, so an
// occurrence becomes at most one job.
func (s *state) materialise(cal int64, c *fsmv1.MaterialiseSchedules) any {
	items := c.GetItems()
	if len(items) > MaxMaterialiseItems {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "items"}, "%d items; the limit is %d", len(items), MaxMaterialiseItems)
	}
	total := 0
	for _, it := range items {
		total += len(it.GetCreate())
	}
	if total > MaxMaterialiseOccurrences {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "create"}, "%d occurrences; the limit is %d", total, MaxMaterialiseOccurrences)
	}
	res := &MaterialiseResult{Items: make([]MaterialiseOutcome, len(items))}
	for i, it := range items {
		out := &res.Items[i]
		out.Name = it.GetName()
		cur := s.schedule(it.GetName())
		if cur == nil || cur.Deleted || cur.Paused || cur.Revision != it.GetRevision() || cur.Mark != it.GetFromMs() ||
			it.GetThroughMs() < it.GetFromMs() {
			out.Stale = true
			continue
		}
		n := *cur
		var hist []HistoryEntry
		// Skipped ranges and created occurrences, in time order (both lists
		// are oldest first).
		skips, creates := it.GetSkipped(), it.GetCreate()
		for len(skips) > 0 || len(creates) > 0 {
			if len(skips) > 0 && (len(creates) == 0 || skips[0].GetFirstMs() <= creates[0].GetAtMs()) {
				k := skips[0]
				skips = skips[1:]
				if k.GetCount() <= 0 {
					continue
				}
				hist = append(hist, HistoryEntry{At: k.GetFirstMs(), Window: k.GetFirstWindow(), Skipped: SkipReason(k.GetReason()),
					Last: k.GetLastMs(), LastWindow: k.GetLastWindow(), Count: k.GetCount(), RecordedAt: cal})
				n.SkipCount += uint64(k.GetCount())
				out.Skipped += k.GetCount()
				continue
			}
			hist = s.occur(&n, cal, creates[0], false, out, hist)
			creates = creates[1:]
		}
		// The item was computed from this revision, so it recorded the
		// PAUSED range of a resume, if any.
		n.Mark, n.NextDue, n.ResumedAt = it.GetThroughMs(), it.GetNextDueMs(), 0
		n.record(hist)
		s.putScheduleRecord(cur, &n)
	}
	return res
}

// occur makes the job of one occurrence of schedule n (a copy being
// changed), applying the overlap policy, and returns hist with its entry.
// FORBID with the previous job not final records an OVERLAP skip (merged
// into the previous entry when that is an OVERLAP skip too); REPLACE
// cancels that job first. An occurrence whose unique key names an existing
// job (it was made before) records that job as a duplicate.
func (s *state) occur(n *Schedule, cal int64, o *fsmv1.ScheduleOccurrence, manual bool, out *MaterialiseOutcome,
	hist []HistoryEntry) []HistoryEntry {
	if last := s.qjob(n.LastJobID); last != nil && !last.State.Final() {
		switch n.Spec.Overlap {
		case OverlapForbid:
			n.SkipCount++
			out.Skipped++
			if k := len(hist) - 1; k >= 0 && hist[k].Skipped == SkipOverlap {
				hist[k].Last, hist[k].LastWindow = o.GetAtMs(), o.GetWindow()
				hist[k].Count++
				return hist
			}
			if k := len(n.History) - 1; len(hist) == 0 && k >= 0 && n.History[k].Skipped == SkipOverlap {
				// Continue the stored OVERLAP run: replace it by a copy.
				e := n.History[k]
				e.Last, e.LastWindow = o.GetAtMs(), o.GetWindow()
				e.Count++
				n.History = n.History[:k:k]
				return append(hist, e)
			}
			return append(hist, HistoryEntry{At: o.GetAtMs(), Window: o.GetWindow(), Skipped: SkipOverlap, Last: o.GetAtMs(),
				LastWindow: o.GetWindow(), Count: 1, RecordedAt: cal})
		case OverlapReplace:
			s.cancelJob(last, cal, "replaced by the next occurrence of schedule "+strconv.Quote(n.Name))
			out.Cancelled++
		}
	}
	e := HistoryEntry{At: o.GetAtMs(), Window: o.GetWindow(), DSTGap: o.GetDstGap(), Manual: manual, RecordedAt: cal}
	t := &n.Spec.Job
	key := ScheduleUniqueKey(n.Name, o.GetWindow())
	if id, ok := s.qidx.unique[uniqueRef{t.Queue, key}]; ok {
		e.JobID, e.Duplicate = id, true
		out.Duplicates++
	} else {
		labels := make([]Label, 0, len(t.Labels)+3)
		labels = append(labels, t.Labels...)
		labels = append(labels, Label{LabelOccurrence, strconv.FormatInt(o.GetAtMs(), 10)}, Label{LabelSchedule, n.Name},
			Label{LabelWindow, o.GetWindow()})
		sortLabels(labels)
		s.lastJobID++
		j := &QueueJob{
			ID: s.lastJobID, RunAt: o.GetAtMs(), BackoffMs: t.BackoffMs, BackoffMaxMs: t.BackoffMaxMs, VisibilityMs: t.VisibilityMs,
			CreatedAt: cal, UpdatedAt: cal, Queue: t.Queue, Kind: t.Kind, UniqueKey: key, Args: t.Args, Labels: labels,
			Priority: t.Priority, MaxAttempts: t.MaxAttempts, BackoffPermille: t.BackoffPermille, State: JobScheduled,
			Target: s.jobTarget(t.Queue, t.Target), TraceParent: o.GetTraceParent(), TraceState: o.GetTraceState(),
			MaxRunMs: t.MaxRunMs,
		}
		if j.RunAt <= cal {
			j.State = JobAvailable
		}
		s.insertJob(j)
		s.qidx.counts(j.Queue).Submitted++
		s.sidx.open.ReplaceOrInsert(timeKey{o.GetAtMs(), j.ID})
		e.JobID = j.ID
		n.JobsMade++
		out.Created++
	}
	n.LastJobID = e.JobID
	return append(hist, e)
}

// record adds new history entries to n (a copy being changed), and the
// skipped ranges among them to its skips. An OVERLAP run continued from
// the stored history (same first occurrence) replaces its old copy there.
func (n *Schedule) record(hist []HistoryEntry) {
	n.History = appendHistory(n.History, hist, MaxScheduleHistory)
	var skips []HistoryEntry
	for _, e := range hist {
		if e.Skipped == SkipNone {
			continue
		}
		if k := len(n.Skips) - 1; len(skips) == 0 && k >= 0 && n.Skips[k].Skipped == e.Skipped && n.Skips[k].At == e.At {
			n.Skips = n.Skips[:k:k]
		}
		skips = append(skips, e)
	}
	n.Skips = appendHistory(n.Skips, skips, MaxScheduleSkips)
}

func sortLabels(ls []Label) {
	sort.Slice(ls, func(a, b int) bool { return ls[a].Key < ls[b].Key })
}

// appendHistory returns old followed by add, keeping the last limit
// entries, in a new slice (stored records are never written).
func appendHistory(old, add []HistoryEntry, limit int) []HistoryEntry {
	if len(add) == 0 {
		return old
	}
	all := len(old) + len(add)
	drop := max(0, all-limit)
	out := make([]HistoryEntry, 0, min(all, limit))
	if drop < len(old) {
		out = append(out, old[drop:]...)
	}
	return append(out, add[max(0, drop-len(old)):]...)
}
