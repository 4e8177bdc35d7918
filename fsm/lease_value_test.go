package fsm

import (
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// A lease's value: set by its Acquire, replaced only by a Renew that sets
// one (by the holder), kept by a release, never inherited by the next
// generation; snapshots keep it.
func TestLeaseValue(t *testing.T) {
	f := New()
	a := acq("e", "o1", 100, "r1")
	a.Value = []byte("v1")
	run(t, f, 10, a)
	val := func() string { l, _, _ := f.Lease("e"); return l.Value }
	if val() != "v1" {
		t.Fatalf("after acquire: %q", val())
	}
	run(t, f, 20, &fsmv1.Renew{Name: "e", Owner: "o1", Generation: 1})
	if val() != "v1" {
		t.Fatalf("a renew without a value changed it: %q", val())
	}
	run(t, f, 30, &fsmv1.Renew{Name: "e", Owner: "o1", Generation: 1, Value: []byte("v2")})
	if val() != "v2" {
		t.Fatalf("proclaimed: %q", val())
	}
	wantReason(t, run(t, f, 40, &fsmv1.Renew{Name: "e", Owner: "o2", Generation: 1, Value: []byte("x")}), coorderr.LeaseLost)
	if val() != "v2" {
		t.Fatalf("a refused renew changed it: %q", val())
	}
	run(t, f, 50, &fsmv1.Renew{Name: "e", Owner: "o1", Generation: 1, Value: []byte{}})
	if val() != "" {
		t.Fatalf("cleared: %q", val())
	}
	run(t, f, 60, &fsmv1.Renew{Name: "e", Owner: "o1", Generation: 1, Value: []byte("v3")})
	run(t, f, 70, &fsmv1.Release{Name: "e", Owner: "o1", Generation: 1})
	if val() != "v3" {
		t.Fatalf("after release: %q", val())
	}
	run(t, f, 80, acq("e", "o2", 100, "r2"))
	if l, _, _ := f.Lease("e"); l.Value != "" || l.Generation != 2 {
		t.Fatalf("the next generation inherited %q", l.Value)
	}
	b := acq("f", "o", 100, "r")
	b.Value = []byte("kept")
	run(t, f, 90, b)
	g := restored(t, f)
	if l, _, _ := g.Lease("f"); l.Value != "kept" || g.Digest() != f.Digest() {
		t.Fatalf("restored value %q", l.Value)
	}
}
