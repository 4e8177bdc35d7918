package fsm

import (
	"github.com/google/btree"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// The retired job registry (coord.v1.Jobs, before schedules): its
// commands are still applied and its records kept in snapshots, so that a
// log written before the queue replays as it did. New code uses the queue
// (queue*.go) and schedules (schedule*.go).

// RegistryJob is a job of the retired registry (not a queue job: that is
// QueueJob). The FSM stores the spec as given; schedules are parsed only
// outside it. Its log command (RegisterJob) and snapshot record (JobRecord)
// keep their names: they are the log format.
type RegistryJob struct {
	Name                string
	Schedule            string
	TimeZone            string
	CompleteWithinMs    int64
	TTLMs               int64
	WindowLayout        string
	WindowShiftDays     int32
	StartingDeadlineMs  int64
	CatchUpMs           int64
	Concurrency         int32
	RegisteredBy        string
	RegisteredAt        int64
	UpdatedAt           int64
	LastCompletedAt     int64
	LastCompletedWindow string
}

// sameSpec reports whether two registry jobs have the same definition.
func (j *RegistryJob) sameSpec(o *RegistryJob) bool {
	return j.Schedule == o.Schedule && j.TimeZone == o.TimeZone && j.CompleteWithinMs == o.CompleteWithinMs &&
		j.TTLMs == o.TTLMs && j.WindowLayout == o.WindowLayout && j.WindowShiftDays == o.WindowShiftDays &&
		j.StartingDeadlineMs == o.StartingDeadlineMs && j.CatchUpMs == o.CatchUpMs && j.Concurrency == o.Concurrency
}

// RegistryJobResult is the outcome of a RegisterJob.
type RegistryJobResult struct {
	RegistryJob RegistryJob
	Changed     bool
}

func lessRegistryJob(a, b *RegistryJob) bool { return a.Name < b.Name }

func (s *state) registryJob(name string) *RegistryJob {
	return find(s.registryJobs, &RegistryJob{Name: name})
}

func registryJobFromRecord(r *fsmv1.JobRecord) *RegistryJob {
	return &RegistryJob{
		Name: r.GetName(), Schedule: r.GetSchedule(), TimeZone: r.GetTimeZone(), CompleteWithinMs: r.GetCompleteWithinMs(),
		TTLMs: r.GetTtlMs(), WindowLayout: r.GetWindowLayout(), WindowShiftDays: r.GetWindowShiftDays(),
		StartingDeadlineMs: r.GetStartingDeadlineMs(), CatchUpMs: r.GetCatchUpMs(), Concurrency: r.GetConcurrency(),
		RegisteredBy: r.GetRegisteredBy(), RegisteredAt: r.GetRegisteredAtMs(), UpdatedAt: r.GetUpdatedAtMs(),
		LastCompletedAt: r.GetLastCompletedAtMs(), LastCompletedWindow: r.GetLastCompletedWindow(),
	}
}

func registryJobRecord(j *RegistryJob) *fsmv1.JobRecord {
	return &fsmv1.JobRecord{
		Name: j.Name, Schedule: j.Schedule, TimeZone: j.TimeZone, CompleteWithinMs: j.CompleteWithinMs, TtlMs: j.TTLMs,
		WindowLayout: j.WindowLayout, WindowShiftDays: j.WindowShiftDays, StartingDeadlineMs: j.StartingDeadlineMs,
		CatchUpMs: j.CatchUpMs, Concurrency: j.Concurrency, RegisteredBy: j.RegisteredBy, RegisteredAtMs: j.RegisteredAt,
		UpdatedAtMs: j.UpdatedAt, LastCompletedAtMs: j.LastCompletedAt, LastCompletedWindow: j.LastCompletedWindow,
	}
}

// registerJob upserts a registry job. The same spec again changes nothing (so every
// replica of a service can register at start). Its times are calendar
// time cal.
func (s *state) registerJob(cal int64, c *fsmv1.RegisterJob) any {
	in := registryJobFromRecord(c.GetJob())
	if in.Name == "" || in.Schedule == "" {
		return reject(coorderr.InvalidArgument, nil, "a job needs a name and a schedule")
	}
	cur := s.registryJob(in.Name)
	if cur != nil && cur.sameSpec(in) {
		return &RegistryJobResult{RegistryJob: *cur}
	}
	n := *in
	n.RegisteredAt, n.UpdatedAt = cal, cal
	if cur != nil {
		n.RegisteredAt, n.LastCompletedAt, n.LastCompletedWindow = cur.RegisteredAt, cur.LastCompletedAt, cur.LastCompletedWindow
	}
	s.registryJobs.ReplaceOrInsert(&n)
	return &RegistryJobResult{RegistryJob: n, Changed: true}
}

// noteCompletion records the last completion on a registry job.
func (s *state) noteCompletion(w *Window) {
	j := s.registryJob(w.Ledger)
	if j == nil {
		return
	}
	n := *j
	n.LastCompletedAt, n.LastCompletedWindow = w.CompletedAt, w.Window
	s.registryJobs.ReplaceOrInsert(&n)
}

// RegistryJob returns a job of the retired registry.
func (f *FSM) RegistryJob(name string) (RegistryJob, bool) {
	return get(f, func(s *state) *RegistryJob { return s.registryJob(name) })
}

// RegistryJobs returns every job of the retired registry, by name.
func (f *FSM) RegistryJobs() []RegistryJob {
	return all(f, func(s *state) *btree.BTreeG[*RegistryJob] { return s.registryJobs })
}

// RecentWindows returns up to limit windows of ledger with the greatest
// keys, newest first (keys of one ledger sort by time when their layout
// does).
func (f *FSM) RecentWindows(ledger string, limit int) []Window {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Window
	f.st.windows.DescendLessOrEqual(&Window{Ledger: ledger, Window: "\U0010FFFF"}, func(w *Window) bool {
		if w.Ledger != ledger || len(out) == limit {
			return false
		}
		out = append(out, *w)
		return true
	})
	return out
}

// EachLease calls fn for every lease (under the read lock; fn must be quick).
func (f *FSM) EachLease(fn func(Lease)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.st.leases.Ascend(func(l *Lease) bool {
		fn(*l)
		return true
	})
}
