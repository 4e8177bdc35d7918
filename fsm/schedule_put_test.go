package fsm

import (
	"testing"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// A put's preconditions: create_only refuses to replace a live schedule
// (not a tombstone, and not a put of the spec it has: a retried create);
// expected_revision replaces only that revision (a retried update of the
// spec now stored passes), and refuses a missing schedule.
func TestSchedulePutPreconditions(t *testing.T) {
	f := New()
	forbid, allow := sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID), sspec(fsmv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW)
	put := func(cal int64, sp *fsmv1.ScheduleSpec, createOnly bool, rev uint64) any {
		return runAt(t, f, 0, cal, &fsmv1.PutSchedule{Name: "reports", Spec: sp, CreateOnly: createOnly, ExpectedRevision: rev})
	}
	wantRejection := func(out any, reason Reason, rev string) {
		t.Helper()
		rej, ok := out.(*Rejection)
		if !ok || rej.Reason != reason || rej.Metadata["schedule"] != "reports" || rej.Metadata["revision"] != rev {
			t.Fatalf("want %s (revision %s), got %#v", reason, rev, out)
		}
	}
	wantPut := func(out any, changed bool, rev uint64) {
		t.Helper()
		r, ok := out.(*ScheduleResult)
		if !ok || r.Changed != changed || r.Schedule.Revision != rev {
			t.Fatalf("want changed=%t at revision %d, got %#v", changed, rev, out)
		}
	}
	wantRejection(put(t0, forbid, false, 1), coorderr.ScheduleNotFound, "")
	wantPut(put(t0, forbid, true, 0), true, 1)
	wantPut(put(t0+1, forbid, true, 0), false, 1) // the create again: unchanged, not refused
	wantRejection(put(t0+2, allow, true, 0), coorderr.ScheduleExists, "1")
	if sc := getSched(t, f, "reports"); sc.Spec.Overlap != OverlapForbid || sc.Revision != 1 {
		t.Fatalf("a refused create changed the schedule: %+v", sc)
	}
	wantRejection(put(t0+3, allow, false, 2), coorderr.ScheduleRevisionMismatch, "1")
	wantPut(put(t0+4, allow, false, 1), true, 2)
	wantPut(put(t0+5, allow, false, 1), false, 2) // the update again: unchanged
	wantRejection(put(t0+6, forbid, false, 1), coorderr.ScheduleRevisionMismatch, "2")

	// Over a tombstone, create_only creates; expected_revision finds none.
	runAt(t, f, 0, t0+7, &fsmv1.DeleteSchedule{Name: "reports"})
	wantRejection(put(t0+8, forbid, false, 3), coorderr.ScheduleNotFound, "")
	if r, ok := put(t0+9, forbid, true, 0).(*ScheduleResult); !ok || !r.Created {
		t.Fatalf("create over a tombstone: %#v", r)
	}
}
