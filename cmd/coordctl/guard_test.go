package main

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/testutil"
)

// guardHarness runs a guard's loop in virtual time: CLOCK_MONOTONIC is the
// fake clock's time, signals are recorded.
type guardHarness struct {
	t      *testing.T
	clk    *clock.Fake
	g      *guard
	msgs   chan string
	exited chan struct{}
	sent   chan syscall.Signal
	done   chan struct{}
}

func newGuardHarness(t *testing.T, grace, first time.Duration) *guardHarness {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	h := &guardHarness{t: t, clk: clk, msgs: make(chan string), exited: make(chan struct{}),
		sent: make(chan syscall.Signal, 10), done: make(chan struct{})}
	h.g = newGuard(clk, func() int64 { return clk.Now().UnixNano() }, grace, "lease x generation 1", newSyncBuf())
	h.g.kill = func(pid int, sig syscall.Signal) error {
		if pid != -42 {
			t.Errorf("signal %s to %d, want the group -42", sig, pid)
		}
		h.sent <- sig
		return nil
	}
	h.g.pid = 42
	if !h.g.control(h.deadline(first)) {
		t.Fatal("the first deadline stopped the guard")
	}
	go func() {
		h.g.loop(h.exited, h.msgs, make(chan os.Signal))
		close(h.done)
	}()
	t.Cleanup(func() {
		close(h.exited)
		<-h.done
	})
	return h
}

// deadline is the control line of a deadline d from now.
func (h *guardHarness) deadline(d time.Duration) string {
	return fmt.Sprintf("D %d", h.clk.Now().Add(d).UnixNano())
}

// armed waits until the guard's timers are armed at exactly these moments
// from t0 (and no others).
func (h *guardHarness) armed(t0 time.Time, at ...time.Duration) {
	h.t.Helper()
	testutil.Poll(h.t, fmt.Sprintf("timers armed at t0+%v", at), 5*time.Second, time.Millisecond, func() bool {
		for _, d := range at {
			if !h.clk.WaitArmed(t0.Add(d), 0) {
				return false
			}
		}
		return h.clk.Pending() == len(at)
	})
}

func (h *guardHarness) signal(want syscall.Signal) {
	h.t.Helper()
	select {
	case got := <-h.sent:
		if got != want {
			h.t.Fatalf("sent %s, want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		h.t.Fatalf("no %s sent", want)
	}
}

// SIGTERM at the deadline − the grace, SIGKILL at the deadline; each new
// deadline re-arms both, an earlier one changes nothing.
func TestGuardKillsByTheDeadline(t *testing.T) {
	h := newGuardHarness(t, 500*time.Millisecond, 3*time.Second)
	t0 := h.clk.Now()
	h.armed(t0, 2500*time.Millisecond, 3*time.Second)
	h.clk.Advance(2 * time.Second)
	h.msgs <- h.deadline(2 * time.Second) // a renewal: the deadline moves to t0+4s
	h.armed(t0, 3500*time.Millisecond, 4*time.Second)
	h.msgs <- h.deadline(time.Second) // earlier than the deadline: ignored
	h.armed(t0, 3500*time.Millisecond, 4*time.Second)
	h.clk.Advance(1500 * time.Millisecond)
	h.signal(syscall.SIGTERM)
	h.armed(t0, 4*time.Second)
	h.clk.Advance(500 * time.Millisecond)
	h.signal(syscall.SIGKILL)
}

// A stop (the lease lost, coordctl gone or interrupted) sends SIGTERM at
// once and SIGKILL after the grace, or at the deadline if that is sooner;
// the command's exit kills what is left of its group.
func TestGuardStop(t *testing.T) {
	h := newGuardHarness(t, time.Second, 10*time.Second)
	t0 := h.clk.Now()
	h.msgs <- "S lease lost"
	h.signal(syscall.SIGTERM)
	h.armed(t0, time.Second)
	h.clk.Advance(time.Second)
	h.signal(syscall.SIGKILL)

	h = newGuardHarness(t, 5*time.Second, 2*time.Second)
	t0 = h.clk.Now()
	h.msgs <- "S coordctl exited"
	h.signal(syscall.SIGTERM)
	h.armed(t0, 2*time.Second) // the deadline comes before the grace ends
	h.clk.Advance(2 * time.Second)
	h.signal(syscall.SIGKILL)
}

// When the command exits, the rest of its group is killed and the loop
// ends.
func TestGuardCommandExit(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	g := newGuard(clk, func() int64 { return clk.Now().UnixNano() }, time.Second, "job 1 attempt 1", newSyncBuf())
	var sent []syscall.Signal
	g.kill = func(_ int, sig syscall.Signal) error { sent = append(sent, sig); return nil }
	g.pid = 42
	g.control(fmt.Sprintf("D %d", clk.Now().Add(time.Minute).UnixNano()))
	exited := make(chan struct{})
	close(exited)
	g.loop(exited, make(chan string), make(chan os.Signal))
	if len(sent) != 1 || sent[0] != syscall.SIGKILL || clk.Pending() != 0 {
		t.Fatalf("after the exit: sent %v, %d timers armed", sent, clk.Pending())
	}
}
