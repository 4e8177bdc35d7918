package api

import (
	"context"
	"testing"
	"time"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Overdue windows, next occurrences and the monitor are judged on calendar
// time; stuck leases on lease time. The fake node's lease time lags its
// calendar by far more than a job's interval (failovers and outages): a
// window is overdue by calendar time, not by the lagging lease clock.
func TestOverdueOnCalendarTime(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	j := &jobs{s: s}
	ctx := context.Background()
	// Registered at calendar time cal0; lease time is ~20 days behind.
	cal0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC).UnixMilli()
	n.calendar = cal0
	if _, err := j.RegisterJob(ctx, &coordv1.RegisterJobRequest{Spec: &coordv1.JobSpec{Name: "every-minute", Schedule: "@every 1m"}}); err != nil {
		t.Fatal(err)
	}
	st, err := j.JobStatus(ctx, &coordv1.JobStatusRequest{Name: "every-minute"})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetJob().GetRegisteredAt(); got != cal0 {
		t.Fatalf("registered at %d, want calendar time %d", got, cal0)
	}
	if next := st.GetNextOccurrences(); len(next) == 0 || next[0] <= cal0 || next[0] > cal0+60_000 {
		t.Fatalf("next occurrences %v from calendar time %d", next, cal0)
	}
	if len(st.GetOverdue()) != 0 {
		t.Fatalf("overdue at registration: %v", st.GetOverdue())
	}
	// Three minutes later on the calendar (lease time unmoved): the
	// occurrences at 12:01 and 12:02 are overdue (due one interval after),
	// not the one before the registration.
	n.calendar = cal0 + 3*60_000
	od, err := j.ListOverdue(ctx, &coordv1.ListOverdueRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(od.GetWindows()) != 2 {
		t.Fatalf("%d overdue windows, want 2 (12:01, 12:02): %v", len(od.GetWindows()), od.GetWindows())
	}
	for _, w := range od.GetWindows() {
		if w.GetOccurrence() < cal0 || w.GetOverdueMs() < 0 || w.GetOverdueMs() > 2*60_000 {
			t.Fatalf("overdue window %v at calendar %d", w, n.calendar)
		}
	}
	a := s.computeAbsence(n.fsm, n.now, n.calendar)
	if a.perJob["every-minute"] != 2 {
		t.Fatalf("monitor: %d overdue", a.perJob["every-minute"])
	}
}
