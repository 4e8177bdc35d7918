package backup

import (
	"fmt"
	"io"

	"github.com/coordd/coordd/internal/snapfile"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// SnapshotFormat is the fsm snapshot encoding this package reads
// (internal/snapfile, which fsm writes and reads with).
const SnapshotFormat = snapfile.Format

// Counts is what a snapshot holds, counted record by record.
type Counts = snapfile.Counts

// Count reads a snapshot (the bytes after a backup's header) and counts
// its records. Every record is decoded; the meta record's counts must
// match what follows. It does not run the state machine's own checks
// (coordd restore does, before it writes anything).
func Count(r io.Reader) (*Counts, error) {
	c := snapfile.NewCounts()
	var meta *fsmv1.SnapshotMeta
	err := snapfile.Read(r, func(rec *fsmv1.SnapshotRecord) error {
		if m, ok := rec.GetRecord().(*fsmv1.SnapshotRecord_Meta); ok {
			meta = m.Meta
		}
		return c.Add(rec)
	})
	if err != nil {
		return nil, err
	}
	for _, m := range []struct {
		what      string
		meta, got int
	}{{"leases", int(meta.GetLeases()), c.Leases}, {"windows", int(meta.GetWindows()), c.Windows},
		{"resources", int(meta.GetResources()), c.Resources}, {"jobs", int(meta.GetQueueJobs()), c.Jobs},
		{"schedules", int(meta.GetSchedules()), c.Schedules}, {"members", int(meta.GetMembers()), c.Members}} {
		if m.meta != m.got {
			return nil, fmt.Errorf("snapshot: the meta record counts %d %s, the snapshot holds %d", m.meta, m.what, m.got)
		}
	}
	return c, nil
}
