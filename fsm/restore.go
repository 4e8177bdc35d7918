package fsm

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// snapshotFormatError explains a snapshot header this build cannot read:
// a newer format (upgrade coordd) or not a snapshot at all.
func snapshotFormatError(hdr []byte) error {
	const prefix = "coordd-snapshot-v"
	s := string(hdr)
	if v, ok := strings.CutPrefix(strings.TrimRight(s, "\n"), prefix); ok {
		if n, err := strconv.Atoi(v); err == nil && n > SnapshotFormat {
			return fmt.Errorf("snapshot: format v%d is newer than this coordd reads (v%d): "+
				"run a coordd release that knows it (docs/backup-and-upgrade.md, \"Version skew\")", n, SnapshotFormat)
		}
	}
	// A short header of a longer version ("coordd-snapshot-v12\n") reads
	// as "coordd-snapshot-v12" without its newline: handled above.
	return fmt.Errorf("snapshot: unknown format %q (this coordd reads %q)", s, snapshotHeader)
}

// SnapshotSummary counts what a snapshot holds.
type SnapshotSummary struct {
	Format int `json:"format"`
	// LeaseTimeMs and CalendarMs are the two clocks as of the snapshot.
	LeaseTimeMs int64 `json:"lease_time_ms"`
	CalendarMs  int64 `json:"calendar_ms"`
	Leases      int   `json:"leases"`
	// LiveLeases are held (not released, not expired at LeaseTimeMs).
	LiveLeases int `json:"live_leases"`
	// MaxGeneration is the highest lease generation in the snapshot.
	MaxGeneration    uint64         `json:"max_generation"`
	Windows          int            `json:"windows"`
	CompletedWindows int            `json:"completed_windows"`
	Resources        int            `json:"resources"`
	Idempotency      int            `json:"idempotency_records"`
	Jobs             int            `json:"jobs"`
	JobsByState      map[string]int `json:"jobs_by_state"`
	LastJobID        uint64         `json:"last_job_id"`
	Schedules        int            `json:"schedules"`
	QueueTargets     int            `json:"queue_targets"`
	Members          int            `json:"members"`
}

func (st *state) summary() *SnapshotSummary {
	out := &SnapshotSummary{Format: SnapshotFormat, LeaseTimeMs: st.leaseTime, CalendarMs: st.calendarTime,
		Leases: st.leases.Len(), Windows: st.windows.Len(), Resources: st.resources.Len(), Idempotency: st.idem.Len(),
		Jobs: st.qjobs.Len(), JobsByState: map[string]int{}, LastJobID: st.lastJobID, Schedules: st.schedules.Len(),
		QueueTargets: st.qtargets.Len(), Members: st.members.Len()}
	st.leases.Ascend(func(l *Lease) bool {
		out.MaxGeneration = max(out.MaxGeneration, l.Generation)
		if l.Live(st.leaseTime) {
			out.LiveLeases++
		}
		return true
	})
	st.windows.Ascend(func(w *Window) bool {
		if w.Completed {
			out.CompletedWindows++
		}
		return true
	})
	st.qjobs.Ascend(func(j *QueueJob) bool {
		out.JobsByState[j.State.String()]++
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
