package fsm

import (
	"fmt"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

func scheduleRecord(sc *Schedule) *fsmv1.ScheduleRecord {
	r := &fsmv1.ScheduleRecord{
		Name: sc.Name, Spec: sc.Spec.Wire(), Revision: sc.Revision, MarkMs: sc.Mark, NextDueMs: sc.NextDue,
		Paused: sc.Paused, PausedAtMs: sc.PausedAt, PausedBy: sc.PausedBy, ResumedAtMs: sc.ResumedAt,
		Deleted: sc.Deleted, DeletedAtMs: sc.DeletedAt, DeletedBy: sc.DeletedBy, CreatedBy: sc.CreatedBy,
		CreatedAtMs: sc.CreatedAt, UpdatedBy: sc.UpdatedBy, UpdatedAtMs: sc.UpdatedAt, LastJobId: sc.LastJobID,
		JobsCreated: sc.JobsMade, OccurrencesSkipped: sc.SkipCount,
	}
	r.History = historyRecords(sc.History)
	r.Skips = historyRecords(sc.Skips)
	return r
}

func historyRecords(hs []HistoryEntry) []*fsmv1.ScheduleHistoryRecord {
	var out []*fsmv1.ScheduleHistoryRecord
	for _, e := range hs {
		out = append(out, &fsmv1.ScheduleHistoryRecord{
			AtMs: e.At, Window: e.Window, JobId: e.JobID, DstGap: e.DSTGap, Manual: e.Manual,
			Skipped: fsmv1.ScheduleSkipReason(e.Skipped), LastMs: e.Last, LastWindow: e.LastWindow, Count: e.Count,
			RecordedAtMs: e.RecordedAt, Duplicate: e.Duplicate,
		})
	}
	return out
}

func historyEntries(rs []*fsmv1.ScheduleHistoryRecord) []HistoryEntry {
	var out []HistoryEntry
	for _, e := range rs {
		out = append(out, HistoryEntry{
			At: e.GetAtMs(), Window: e.GetWindow(), JobID: e.GetJobId(), DSTGap: e.GetDstGap(), Manual: e.GetManual(),
			Duplicate: e.GetDuplicate(), Skipped: SkipReason(e.GetSkipped()), Last: e.GetLastMs(), LastWindow: e.GetLastWindow(),
			Count: e.GetCount(), RecordedAt: e.GetRecordedAtMs(),
		})
	}
	return out
}

// scheduleFromRecord rebuilds a schedule, refusing a record the indexes
// could not hold.
func scheduleFromRecord(r *fsmv1.ScheduleRecord) (*Schedule, error) {
	if r.GetName() == "" || r.GetSpec() == nil {
		return nil, fmt.Errorf("snapshot: schedule without a name or spec")
	}
	if len(r.GetHistory()) > MaxScheduleHistory || len(r.GetSkips()) > MaxScheduleSkips {
		return nil, fmt.Errorf("snapshot: schedule %q with %d history entries and %d skips", r.GetName(), len(r.GetHistory()), len(r.GetSkips()))
	}
	sc := &Schedule{
		Name: r.GetName(), Spec: specFromWire(r.GetSpec()), Revision: r.GetRevision(), Mark: r.GetMarkMs(),
		NextDue: r.GetNextDueMs(), Paused: r.GetPaused(), PausedAt: r.GetPausedAtMs(), PausedBy: r.GetPausedBy(),
		ResumedAt: r.GetResumedAtMs(), Deleted: r.GetDeleted(), DeletedAt: r.GetDeletedAtMs(), DeletedBy: r.GetDeletedBy(),
		CreatedBy: r.GetCreatedBy(), CreatedAt: r.GetCreatedAtMs(), UpdatedBy: r.GetUpdatedBy(), UpdatedAt: r.GetUpdatedAtMs(),
		LastJobID: r.GetLastJobId(), JobsMade: r.GetJobsCreated(), SkipCount: r.GetOccurrencesSkipped(),
	}
	sc.History, sc.Skips = historyEntries(r.GetHistory()), historyEntries(r.GetSkips())
	return sc, nil
}

// rebuildScheduleIndex derives the schedule indexes after a restore: next
// due times and tombstones from the schedules, open jobs from the queue's
// jobs (their labels).
func (s *state) rebuildScheduleIndex() {
	s.sidx = newScheduleIndex()
	s.schedules.Ascend(func(sc *Schedule) bool {
		s.sidx.add(sc)
		return true
	})
	s.qjobs.Ascend(func(j *QueueJob) bool {
		if !j.State.Final() {
			if at, ok := scheduledJobOccurrence(j); ok {
				s.sidx.open.ReplaceOrInsert(timeKey{at, j.ID})
			}
		}
		return true
	})
}

// pruneSchedules removes tombstones of schedules deleted before cutoff
// (calendar ms; 0: none), oldest first: a prune costs what it removes.
func (s *state) pruneSchedules(cutoff int64) int {
	n := 0
	for k, ok := s.sidx.tomb.Min(); ok && cutoff > 0 && k.at < cutoff; k, ok = s.sidx.tomb.Min() {
		sc := s.schedule(k.name)
		s.sidx.remove(sc)
		s.schedules.Delete(sc)
		s.emitSchedule(EventDelete, sc)
		n++
	}
	return n
}
