package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An attempt with a max_run ends on the worker at its start + max_run -
// margin even while its heartbeats are acknowledged: the handler's context
// is cancelled with ErrClaimLost wrapping ErrMaxRunExceeded, before the
// server ends the attempt, and nothing is reported for it.
func TestMaxRunCancelsHeartbeatingHandler(t *testing.T) {
	h := newHarness(t)
	h.f.maxRun = 2 * time.Second
	h.f.add("default", "k", nil, 3*time.Second) // margin 300 ms
	w, ch, returned := h.startBlocking()
	s := recv(t, ch, "start")
	h.advanceTo(h.at(time.Second))
	recv(t, h.f.heartbeats, "heartbeat") // acknowledged: the local deadline would move to t0+3.7s
	end := h.at(1800 * time.Millisecond) // max_run less its margin (10 %: 200 ms)
	if !h.clk.WaitArmed(end, 5*time.Second) {
		t.Fatal("no deadline armed at t0+1.8s (max_run - margin)")
	}
	h.clk.Advance(end.Add(-time.Millisecond).Sub(h.clk.Now()))
	if s.ctx.Err() != nil {
		t.Fatalf("cancelled before max_run - margin: %v", context.Cause(s.ctx))
	}
	h.clk.Advance(time.Millisecond)
	err := recv(t, returned, "handler return")
	if !errors.Is(err, ErrClaimLost) || !errors.Is(err, ErrMaxRunExceeded) {
		t.Fatalf("cause %v", err)
	}
	_ = w.Stop(context.Background())
	if len(h.f.failed)+len(h.f.completed) != 0 {
		t.Fatalf("outcome sent for an attempt max_run ended: %v %v", h.f.failed, h.f.completed)
	}
}
