package fsm

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/coorderr"
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
	if f.CalendarTime() != 0 {
		t.Fatalf("fresh calendar %d", f.CalendarTime())
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
		if got := f.CalendarTime(); got != s.want {
			t.Fatalf("step %d (stamp %d): calendar %d, want %d", i, s.cal, got, s.want)
		}
	}
	// A batch envelope carries no time of its own; each inner command
	// advances the calendar with its own stamp.
	runAt(t, f, 10, 9_999_999_999_999, &fsmv1.Batch{Commands: []*fsmv1.Command{
		EnvelopeAt(11, 1_700_000_002_000, &fsmv1.Tick{}),
		EnvelopeAt(12, 1_700_000_001_500, &fsmv1.Tick{}),
	}})
	if got := f.CalendarTime(); got != 1_700_000_002_000 {
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
	if f.LeaseTime() != 1060 {
		t.Fatalf("lease clock %d", f.LeaseTime())
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
	if h.CalendarTime() != 1_700_000_000_000 || h.Digest() != f.Digest() {
		t.Fatalf("restored calendar %d", h.CalendarTime())
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

// The not-before gate of a claim is on calendar time, not lease time: a
// lease clock that lags the calendar by an hour (failovers, an outage)
// does not hold a due window back, and one that runs ahead does not let
// an early claim through. A command stamped without a calendar time (from
// before the leader stamped one) is judged on lease time, as it was then,
// so replaying an old log decides the same. Job and window timestamps are
// calendar time too; holder checks stay on lease time.
func TestClaimNotBeforeOnTheCalendar(t *testing.T) {
	const cal = 1_700_000_000_000
	f := New()
	claim := func(window string, nb int64) *fsmv1.Acquire {
		return &fsmv1.Acquire{Name: "lease-" + window, Owner: "a", TtlMs: 1000, ClaimJob: "job", ClaimWindow: window, ClaimNotBeforeMs: nb}
	}
	// Lease time an hour behind the calendar: a window due now is claimed.
	lease := int64(cal - 3_600_000)
	r, ok := runAt(t, f, lease, cal, claim("due", cal)).(*AcquireResult)
	if !ok || !r.Acquired || !r.Claim.Claimed {
		t.Fatalf("a window due on the calendar was refused: %#v", r)
	}
	if r.Claim.Window.StartedAt != cal || r.Claim.Window.FirstStartedAt != cal || r.Lease.AcquiredAt != lease {
		t.Fatalf("window started at %d (want calendar %d), lease acquired at %d (want lease time %d)",
			r.Claim.Window.StartedAt, cal, r.Lease.AcquiredAt, lease)
	}
	// Not due for 800 ms on the calendar, whatever lease time says.
	rej := runAt(t, f, lease+1, cal+200, claim("later", cal+1000))
	wantReason(t, rej, coorderr.TooEarly)
	if got := rej.(*Rejection).Metadata["wait_ms"]; got != "800" {
		t.Fatalf("wait_ms %q, want 800 (on the calendar)", got)
	}
	// The answer without a write agrees with the apply.
	if answer, ok := f.CheckAcquire(cal+10_000, cal+200, claim("later", cal+1000)); !ok {
		t.Fatal("CheckAcquire left a too-early claim to the apply")
	} else {
		wantReason(t, answer, coorderr.TooEarly)
	}
	if _, ok := f.CheckAcquire(lease, cal+1000, claim("later", cal+1000)); ok {
		t.Fatal("CheckAcquire refused a claim due on the calendar")
	}
	// Completion and the job's record are calendar time.
	runAt(t, f, lease+2, cal+250, &fsmv1.RegisterJob{Job: &fsmv1.JobRecord{Name: "job", Schedule: "@every 1m"}})
	w := runAt(t, f, lease+3, cal+300, &fsmv1.CompleteWindow{Job: "job", Window: "due", LeaseName: "lease-due", Owner: "a", Generation: 1}).(*WindowResult)
	j, _ := f.RegistryJob("job")
	if w.Window.CompletedAt != cal+300 || j.RegisteredAt != cal+250 || j.LastCompletedAt != cal+300 {
		t.Fatalf("completed at %d, job registered at %d, last completed %d: want calendar times", w.Window.CompletedAt, j.RegisteredAt, j.LastCompletedAt)
	}
	// An old entry (no calendar stamp) is judged on its lease time, even
	// once the FSM has a calendar time.
	g := New()
	runAt(t, g, 4000, cal, &fsmv1.Tick{})
	wantReason(t, run(t, g, 4200, claim("old", 5000)), coorderr.TooEarly)
	if r := run(t, g, 5000, claim("old", 5000)).(*AcquireResult); !r.Claim.Claimed || r.Claim.Window.StartedAt != 5000 {
		t.Fatalf("old entry at its not-before lease time: %+v", r)
	}
}
