package fsm

import (
	"fmt"
	"io"

	"github.com/coordd/coordd/internal/snapfile"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// SnapshotSummary counts what a snapshot holds (internal/snapfile, which
// coordctl's offline count uses too).
type SnapshotSummary = snapfile.Counts

func (st *state) summary() *SnapshotSummary {
	out := snapfile.NewCounts()
	out.LeaseTimeMs, out.CalendarMs, out.LastJobID = st.leaseTime, st.calendarTime, st.lastJobID
	out.Windows, out.Resources, out.Idempotency = st.windows.Len(), st.resources.Len(), st.idem.Len()
	out.Schedules, out.QueueTargets, out.Members = st.schedules.Len(), st.qtargets.Len(), st.members.Len()
	out.PausedQueues, out.BulkOps, out.QueueLimits = st.qops.pauses.Len(), st.qops.bulks.Len(), st.qlimits.Len()
	st.leases.Ascend(func(l *Lease) bool {
		out.AddLease(l.Generation, l.Live(st.leaseTime))
		return true
	})
	st.windows.Ascend(func(w *Window) bool {
		if w.Completed {
			out.CompletedWindows++
		}
		return true
	})
	st.qjobs.Ascend(func(j *QueueJob) bool {
		out.AddJob(fsmv1.JobState(j.State))
		return true
	})
	return out
}

// InspectSnapshot reads a whole snapshot (every record is decoded and
// checked as a node's restore would) and counts what it holds.
func InspectSnapshot(r io.Reader) (*SnapshotSummary, error) {
	st, err := readSnapshot(r)
	if err != nil {
		return nil, err
	}
	return st.summary(), nil
}

// RestoreOptions are the changes PrepareRestore makes to a snapshot that
// seeds a new cluster (docs/backup-and-upgrade.md, "What a restore
// changes").
type RestoreOptions struct {
	// GenerationBump is added to every lease's generation, so that the
	// first grant of each lease after the restore is above any generation
	// the lost cluster may have granted after the snapshot was saved (G1).
	GenerationBump uint64
	// KeepMember reports whether a member record (a node's gRPC address)
	// belongs to the new cluster; the others are dropped. Nil keeps all.
	KeepMember func(id string) bool
}

// PrepareRestore reads the snapshot r and writes to w the snapshot a new
// cluster starts from: every lease that was held is released at the
// snapshot's lease time (its holder's token no longer commits, renews or
// releases: it must acquire again), every lease's generation grows by
// GenerationBump, and member records not kept are dropped. Everything else
// (fenced resources and their highest tokens, windows, jobs, schedules,
// idempotency records, both clocks) is copied as it is. It returns the
// summary of the snapshot as written.
func PrepareRestore(r io.Reader, w io.Writer, o RestoreOptions) (*SnapshotSummary, error) {
	st, err := readSnapshot(r)
	if err != nil {
		return nil, err
	}
	if o.GenerationBump > 0 {
		var over string
		st.leases.Ascend(func(l *Lease) bool {
			if l.Generation > ^uint64(0)-o.GenerationBump {
				over = l.Name
				return false
			}
			return true
		})
		if over != "" {
			return nil, fmt.Errorf("restore: --bump-generations %d overflows the generation of lease %q", o.GenerationBump, over)
		}
	}
	st.leases.Ascend(func(l *Lease) bool {
		// Lease records are keyed by name only: changing other fields in
		// place keeps the tree ordered. The identity and expiry indexes
		// are rebuilt when a node reads the snapshot written below.
		l.Generation += o.GenerationBump
		if !l.Released {
			l.Released = true
			l.ExpiresAt = min(l.ExpiresAt, st.leaseTime)
		}
		return true
	})
	if o.KeepMember != nil {
		var drop []*Member
		st.members.Ascend(func(m *Member) bool {
			if !o.KeepMember(m.ID) {
				drop = append(drop, m)
			}
			return true
		})
		for _, m := range drop {
			st.members.Delete(m)
		}
	}
	if err := st.writeTo(w); err != nil {
		return nil, err
	}
	return st.summary(), nil
}
