package fsm

import (
	"testing"

	"google.golang.org/protobuf/proto"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// runAt applies body stamped with lease time now and calendar time cal
// through the encoded entry point.
func runAt(t testing.TB, f *FSM, now, cal int64, body any) any {
	t.Helper()
	data, err := proto.Marshal(EnvelopeAt(now, cal, body))
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(data)
}

func TestCalendarOnlyMovesForward(t *testing.T) {
	f := New()
	if f.CalendarMs() != 0 {
		t.Fatalf("fresh calendar %d", f.CalendarMs())
	}
	steps := []struct {
		cal, want int64
	}{
		{1_700_000_000_000, 1_700_000_000_000},
		{1_700_000_000_500, 1_700_000_000_500},
		{1_700_000_000_100, 1_700_000_000_500}, // stamped earlier, applied later: no step back
		{0, 1_700_000_000_500},                 // an entry from before calendar_ms: unchanged
		{1_700_000_001_000, 1_700_000_001_000},
	}
	for i, s := range steps {
		runAt(t, f, int64(i), s.cal, &fsmv1.Tick{})
		if got := f.CalendarMs(); got != s.want {
			t.Fatalf("step %d (stamp %d): calendar %d, want %d", i, s.cal, got, s.want)
		}
	}
	// A batch envelope carries no time of its own; each inner command
	// advances the calendar with its own stamp.
	runAt(t, f, 10, 9_999_999_999_999, &fsmv1.Batch{Commands: []*fsmv1.Command{
		EnvelopeAt(11, 1_700_000_002_000, &fsmv1.Tick{}),
		EnvelopeAt(12, 1_700_000_001_500, &fsmv1.Tick{}),
	}})
	if got := f.CalendarMs(); got != 1_700_000_002_000 {
		t.Fatalf("after batch: %d", got)
	}
}

// Lease expiry stays on lease time: a calendar far ahead (a leader whose
// wall clock jumped) expires nothing, and a lagging lease clock is not
// pushed forward by it.
func TestCalendarDoesNotExpireLeases(t *testing.T) {
	f := New()
	runAt(t, f, 1000, 1_700_000_000_000, acq("l", "a", 100, ""))
	runAt(t, f, 1050, 1_800_000_000_000, &fsmv1.Tick{})
	if r, ok := runAt(t, f, 1060, 1_800_000_000_001, &fsmv1.Renew{Name: "l", Owner: "a", Generation: 1, TtlMs: 100}).(*LeaseResult); !ok || r.Lease.ExpiresAt != 1160 {
		t.Fatalf("renew judged on the calendar: %#v", r)
	}
	if f.Clock() != 1060 {
		t.Fatalf("lease clock %d", f.Clock())
	}
}

func TestCalendarSnapshotAndDigest(t *testing.T) {
	f, g := New(), New()
	runAt(t, f, 5, 1_700_000_000_000, &fsmv1.Tick{})
	runAt(t, g, 5, 1_700_000_000_001, &fsmv1.Tick{})
	if f.Digest() == g.Digest() {
		t.Fatal("the digest does not cover the calendar")
	}
	h := restored(t, f)
	if h.CalendarMs() != 1_700_000_000_000 || h.Digest() != f.Digest() {
		t.Fatalf("restored calendar %d", h.CalendarMs())
	}
	// A state that never saw a calendar stamp encodes as before the field
	// existed (proto3 omits the zero), so old digests stay comparable.
	a, b := New(), New()
	run(t, a, 5, &fsmv1.Tick{})
	runAt(t, b, 5, 0, &fsmv1.Tick{})
	if a.Digest() != b.Digest() {
		t.Fatal("a zero calendar changed the encoding")
	}
}
