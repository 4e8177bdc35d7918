package fsm

import (
	"slices"
	"sort"
	"strings"
)

// Reads of schedules. They return copies of records (whose history and
// template slices are shared and must not be written), as of the last
// applied command.

// Schedule returns a schedule, also a tombstone (Deleted).
func (f *FSM) Schedule(name string) (Schedule, bool) {
	return get(f, func(s *state) *Schedule { return s.schedule(name) })
}

// ListSchedules returns up to limit schedules whose name has prefix and
// comes after after, by name; tombstones only withDeleted. more reports
// whether another follows.
func (f *FSM) ListSchedules(prefix, after string, limit int, withDeleted bool) (out []Schedule, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return pageFrom(f.st.schedules, &Schedule{Name: max(prefix, after)}, limit,
		func(sc *Schedule) bool { return strings.HasPrefix(sc.Name, prefix) },
		func(sc *Schedule) bool { return sc.Name == after || (sc.Deleted && !withDeleted) })
}

// DueSchedules returns up to limit schedules that are due at calendar
// time cal (not paused or deleted, next due at or before cal), earliest
// first: what the leader's materialiser works on. It walks the next-due
// index from its earliest entry, never all schedules.
func (f *FSM) DueSchedules(cal int64, limit int) []Schedule {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Schedule
	f.st.sidx.due.Ascend(func(k nameTime) bool {
		if k.at > cal || len(out) == limit {
			return false
		}
		out = append(out, *f.st.schedule(k.name))
		return true
	})
	return out
}

// NextScheduleDue is the earliest next due time of an active schedule:
// the leader's materialiser sleeps until then.
func (f *FSM) NextScheduleDue() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	k, ok := f.st.sidx.due.Min()
	return k.at, ok
}

// ScheduleCounts counts schedules: active (materialised), paused,
// deleted (tombstones). O(n): for metrics.
func (f *FSM) ScheduleCounts() (active, paused, deleted int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.st.schedules.Ascend(func(sc *Schedule) bool {
		switch {
		case sc.Deleted:
			deleted++
		case sc.Paused:
			paused++
		default:
			active++
		}
		return true
	})
	return active, paused, deleted
}

// OverdueJob is an occurrence whose job is not final by its due time
// (occurrence + the schedule's complete-within). JobID 0: the occurrence
// was due and not even materialised yet (the leader is behind).
type OverdueJob struct {
	Schedule string
	Window   string
	At       int64 // occurrence
	Due      int64
	JobID    uint64
	Queue    string
	State    JobState
	Attempts uint32
}

// OverdueCursor is where a page of OverdueJobs ends.
type OverdueCursor struct {
	At int64
	ID uint64
}

// OverdueJobs returns up to limit overdue occurrences at calendar time cal
// after cursor, oldest occurrence first, of schedule (all when ""): jobs
// made by schedules that are not final by their due time (jobs of deleted
// schedules are not reported). It walks the open jobs of schedules (not
// every job). When more is true, next is the cursor of the next page.
func (f *FSM) OverdueJobs(cal int64, schedule string, after OverdueCursor, limit int) (out []OverdueJob, next OverdueCursor, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := page[OverdueJob]{limit: limit}
	f.st.sidx.open.AscendGreaterOrEqual(timeKey{after.At, after.ID + 1}, func(k timeKey) bool {
		if k.at >= cal {
			return false // not due yet, whatever the complete-within
		}
		o, ok := f.st.overdue(k, cal)
		if !ok || (schedule != "" && o.Schedule != schedule) {
			return true
		}
		if !p.add(o) {
			return false
		}
		next = OverdueCursor{k.at, k.id}
		return true
	})
	return p.out, next, p.more
}

// overdue reports whether open job k is overdue at cal.
func (s *state) overdue(k timeKey, cal int64) (OverdueJob, bool) {
	j := s.qjob(k.id)
	if j == nil || j.State.Final() {
		return OverdueJob{}, false
	}
	name, _ := j.label(LabelSchedule)
	window, _ := j.label(LabelWindow)
	sc := s.schedule(name)
	if sc == nil || sc.Deleted {
		return OverdueJob{}, false
	}
	due := k.at + sc.Spec.CompleteWithinMs
	if due >= cal {
		return OverdueJob{}, false
	}
	return OverdueJob{Schedule: name, Window: window, At: k.at, Due: due, JobID: j.ID, Queue: j.Queue, State: j.State,
		Attempts: j.Attempts}, true
}

// LateSchedules returns the active schedules whose next occurrence is
// overdue without a job: due at next_due + complete-within before cal, so
// the leader has not materialised it (it is down or behind). At most
// limit, earliest first; it walks the next-due index from its start.
func (f *FSM) LateSchedules(cal int64, limit int) []OverdueJob {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []OverdueJob
	f.st.sidx.due.Ascend(func(k nameTime) bool {
		if k.at >= cal || len(out) == limit {
			return false
		}
		sc := f.st.schedule(k.name)
		if due := k.at + sc.Spec.CompleteWithinMs; due < cal && k.at > sc.Mark {
			out = append(out, OverdueJob{Schedule: sc.Name, At: k.at, Due: due, Queue: sc.Spec.Job.Queue})
		}
		return true
	})
	return out
}

// OverdueSummary counts overdue occurrences at cal per queue and per
// schedule (bounded metrics, top offenders). It walks the open jobs of
// schedules.
type OverdueSummary struct {
	PerQueue    map[string]int
	PerSchedule map[string]int
	Oldest      map[string]int64 // per schedule: its oldest overdue occurrence
	Total       int
}

// Top returns the n schedules with the most overdue occurrences (ties by
// name).
func (o OverdueSummary) Top(n int) []string {
	names := make([]string, 0, len(o.PerSchedule))
	for name := range o.PerSchedule {
		names = append(names, name)
	}
	sort.Slice(names, func(a, b int) bool {
		if x, y := o.PerSchedule[names[a]], o.PerSchedule[names[b]]; x != y {
			return x > y
		}
		return names[a] < names[b]
	})
	return names[:min(n, len(names))]
}

// Overdue summarises the overdue occurrences at calendar time cal.
func (f *FSM) Overdue(cal int64) OverdueSummary {
	f.mu.RLock()
	defer f.mu.RUnlock()
	sum := OverdueSummary{PerQueue: map[string]int{}, PerSchedule: map[string]int{}, Oldest: map[string]int64{}}
	f.st.sidx.open.Ascend(func(k timeKey) bool {
		if k.at >= cal {
			return false
		}
		if o, ok := f.st.overdue(k, cal); ok {
			sum.PerQueue[o.Queue]++
			sum.PerSchedule[o.Schedule]++
			if _, seen := sum.Oldest[o.Schedule]; !seen {
				sum.Oldest[o.Schedule] = o.At
			}
			sum.Total++
		}
		return true
	})
	return sum
}

// SchedulesCreatedBy returns the schedules identity created that are not
// deleted, by name ("": none).
func (f *FSM) SchedulesCreatedBy(identity string) []Schedule {
	f.mu.RLock()
	defer f.mu.RUnlock()
	set := f.st.sidx.byCreator[identity]
	out := make([]Schedule, 0, len(set))
	for name := range set {
		out = append(out, *f.st.schedule(name))
	}
	slices.SortFunc(out, func(a, b Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out
}
