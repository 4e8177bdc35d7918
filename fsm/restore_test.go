package fsm

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// A restore releases every held lease at the snapshot's lease time, bumps
// every generation, keeps resources and the clocks, and drops the member
// records it is told to: the old holder's token neither commits nor
// renews, and the next grant is above every generation in the snapshot.
func TestPrepareRestoreReleasesAndBumps(t *testing.T) {
	f := New()
	held := mustAcquire(t, f, 1000, "held", "a", 10_000)
	if r := run(t, f, 1010, &fsmv1.FencedCommit{Resource: "res", LeaseName: "held", Generation: held.Generation, IdempotencyKey: "k1"}).(*CommitResult); !r.Accepted {
		t.Fatalf("commit: %+v", r)
	}
	mustAcquire(t, f, 1020, "gone", "a", 10)
	mustAcquire(t, f, 1040, "gone", "b", 10) // generation 2, expired later
	run(t, f, 1050, &fsmv1.SetMember{Id: "old", GrpcAddress: "10.0.0.1:7400"})
	run(t, f, 1050, &fsmv1.SetMember{Id: "n1", GrpcAddress: "10.0.0.2:7400"})
	var snap bytes.Buffer
	if err := f.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := PrepareRestore(bytes.NewReader(snap.Bytes()), &out, RestoreOptions{GenerationBump: 100,
		KeepMember: func(id string) bool { return id == "n1" }})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Leases != 2 || sum.LiveLeases != 0 || sum.MaxGeneration != 102 || sum.Resources != 1 || sum.Members != 1 {
		t.Fatalf("summary %+v", sum)
	}
	g := New()
	if err := g.Restore(io.NopCloser(&out)); err != nil {
		t.Fatal(err)
	}
	if g.LeaseTime() != f.LeaseTime() {
		t.Fatalf("lease time %d after the restore, %d before", g.LeaseTime(), f.LeaseTime())
	}
	l, _, ok := g.Lease("held")
	if !ok || !l.Released || l.Generation != held.Generation+100 || l.ExpiresAt > f.LeaseTime() {
		t.Fatalf("held lease after the restore: %+v (lease time %d)", l, f.LeaseTime())
	}
	// The old token: refused for commits and renewals, even before its TTL.
	now := f.LeaseTime() + 1
	wantReason(t, run(t, g, now, &fsmv1.FencedCommit{Resource: "res", LeaseName: "held", Generation: held.Generation, IdempotencyKey: "k2"}), coorderr.StaleToken)
	if _, ok := run(t, g, now, &fsmv1.Renew{Name: "held", Owner: "a", Generation: held.Generation, TtlMs: 1000}).(*LeaseResult); ok {
		t.Fatal("the old holder renewed after the restore")
	}
	// The acknowledged commit is still there (its key answers as a duplicate).
	if r := run(t, g, now, &fsmv1.FencedCommit{Resource: "res", LeaseName: "held", Generation: held.Generation, IdempotencyKey: "k1"}).(*CommitResult); !r.Duplicate || r.Generation != held.Generation {
		t.Fatalf("acknowledged commit after the restore: %+v", r)
	}
	if l := mustAcquire(t, g, now, "held", "c", 1000); l.Generation != held.Generation+101 {
		t.Fatalf("first grant after the restore: %+v", l)
	}
	if l := mustAcquire(t, g, now, "gone", "c", 1000); l.Generation != 103 {
		t.Fatalf("first grant of the expired lease after the restore: %+v", l)
	}
	if m := g.Members(); len(m) != 1 || m[0].ID != "n1" {
		t.Fatalf("members after the restore: %+v", m)
	}
}

func TestPrepareRestoreRefusesOverflow(t *testing.T) {
	f := New()
	mustAcquire(t, f, 1000, "l", "a", 10)
	var snap bytes.Buffer
	if err := f.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	_, err := PrepareRestore(&snap, io.Discard, RestoreOptions{GenerationBump: ^uint64(0)})
	if err == nil || !strings.Contains(err.Error(), `overflows the generation of lease "l"`) {
		t.Fatalf("err %v", err)
	}
}

// A snapshot of a newer format is refused with a message that says so.
func TestSnapshotOfNewerFormatRefused(t *testing.T) {
	f := New()
	var snap bytes.Buffer
	if err := f.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	b := bytes.Replace(snap.Bytes(), []byte("coordd-snapshot-v1\n"), []byte("coordd-snapshot-v2\n"), 1)
	err := New().Restore(io.NopCloser(bytes.NewReader(b)))
	if err == nil || !strings.Contains(err.Error(), "format v2 is newer than this coordd reads (v1)") {
		t.Fatalf("restore of a v2 snapshot: %v", err)
	}
	_, err = InspectSnapshot(strings.NewReader("garbage garbage garbage"))
	if err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Fatalf("inspect of garbage: %v", err)
	}
}
