package backup

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

func apply(t *testing.T, f *fsm.FSM, now int64, body any) {
	t.Helper()
	data, err := proto.Marshal(fsm.EnvelopeAt(now, 1_700_000_000_000+now, body))
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(data)
}

// Count agrees with the state machine's own reading of a snapshot, and
// this package reads the format fsm writes.
func TestCountMatchesTheFSM(t *testing.T) {
	if SnapshotFormat != fsm.SnapshotFormat {
		t.Fatalf("backup reads snapshot format %d, fsm writes %d", SnapshotFormat, fsm.SnapshotFormat)
	}
	f := fsm.New()
	apply(t, f, 1000, &fsmv1.Acquire{Name: "a", Owner: "o", TtlMs: 10_000})
	apply(t, f, 1000, &fsmv1.Acquire{Name: "b", Owner: "o", TtlMs: 10})
	apply(t, f, 1100, &fsmv1.Acquire{Name: "b", Owner: "p", TtlMs: 10})
	apply(t, f, 1200, &fsmv1.FencedCommit{Resource: "r", LeaseName: "a", Generation: 1, IdempotencyKey: "k"})
	var jobs []*fsmv1.QueueJobSpec
	for range 2 {
		j := &fsmv1.QueueJobSpec{Queue: "q", Kind: "k", Args: []byte(`{}`)}
		fsm.FillJobDefaults(j)
		jobs = append(jobs, j)
	}
	apply(t, f, 1300, &fsmv1.SubmitJobs{Jobs: jobs})
	// The queue records added after the first backups: a pause, limits, a
	// bulk operation (Count refused snapshots holding them once).
	apply(t, f, 1400, &fsmv1.PauseQueue{Queue: "q", Paused: true, Identity: "ops"})
	apply(t, f, 1400, &fsmv1.SetQueueLimits{Queue: "q", Limits: &fsmv1.QueueLimitsSpec{Concurrency: 2}, Identity: "ops"})
	apply(t, f, 1400, &fsmv1.StartBulkJobs{OpId: "op-1", Action: fsmv1.BulkAction_BULK_ACTION_CANCEL,
		Selector: &fsmv1.JobSelector{Queue: "q"}, Identity: "ops"})
	var snap bytes.Buffer
	if err := f.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	c, err := Count(bytes.NewReader(snap.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := fsm.InspectSnapshot(bytes.NewReader(snap.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Leases != 2 || c.Leases != s.Leases || c.LiveLeases != s.LiveLeases || c.MaxGeneration != 2 ||
		c.Resources != 1 || c.Idempotency != s.Idempotency || c.Jobs != 2 || c.Jobs != s.Jobs ||
		c.JobsByState["AVAILABLE"] != s.JobsByState["AVAILABLE"] || c.LastJobID != s.LastJobID || c.LeaseTimeMs != s.LeaseTimeMs {
		t.Fatalf("Count %+v, fsm %+v", c, s)
	}
	if c.PausedQueues != 1 || c.QueueLimits != 1 || c.BulkOps != 1 || !reflect.DeepEqual(c, s) {
		t.Fatalf("Count %+v, fsm %+v: want the same counts, one pause, one limits record and one bulk operation", c, s)
	}
	if _, err := Count(strings.NewReader("coordd-snapshot-v2\n")); err == nil || !strings.Contains(err.Error(), "newer than this coordd reads") {
		t.Fatalf("v2: %v", err)
	}
}
