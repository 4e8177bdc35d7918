package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
)

func delays(b *Backoff, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = b.Next()
	}
	return out
}

func TestBackoffGrowsToMaxAndResets(t *testing.T) {
	b := New(Policy{Initial: 50 * time.Millisecond, Max: 300 * time.Millisecond})
	want := []time.Duration{50, 100, 200, 300, 300}
	for i, d := range delays(b, len(want)) {
		if d != want[i]*time.Millisecond {
			t.Fatalf("delay %d = %v, want %v", i, d, want[i]*time.Millisecond)
		}
	}
	b.Reset()
	if d := b.Next(); d != 50*time.Millisecond {
		t.Fatalf("after Reset: %v, want 50ms", d)
	}
}

func TestBackoffJitterTakesOffAFraction(t *testing.T) {
	draws := []float64{0, 0.5, 0.999}
	i := 0
	b := New(Policy{Initial: time.Second, Max: time.Second, Jitter: 0.2, Rand: func() float64 { i++; return draws[i-1] }})
	for k, want := range []time.Duration{time.Second, 900 * time.Millisecond, 800*time.Millisecond + 200*time.Microsecond} {
		if d := b.Next(); d != want {
			t.Fatalf("delay %d = %v, want %v", k, d, want)
		}
	}
	// The default source stays within the bounds.
	b = New(Policy{Initial: time.Second, Max: time.Second, Jitter: 0.5})
	for range 100 {
		if d := b.Next(); d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("jittered delay %v outside [500ms, 1s]", d)
		}
	}
}

func TestBackoffDefaults(t *testing.T) {
	b := New(Policy{Initial: time.Minute, Max: time.Second, Multiplier: 0.5})
	if got := delays(b, 2); got[0] != time.Minute || got[1] != time.Minute {
		t.Fatalf("Max below Initial, Multiplier below 1: %v, want a constant minute", got)
	}
	if d := New(Policy{}).Next(); d != 100*time.Millisecond {
		t.Fatalf("default initial %v", d)
	}
}

func TestWaitSleepsOnTheClock(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000, 0))
	b := New(Policy{Initial: time.Second, Max: 4 * time.Second})
	done := make(chan bool, 1)
	go func() { done <- b.Wait(context.Background(), fc) }()
	if !fc.WaitArmed(fc.Now().Add(time.Second), 5*time.Second) {
		t.Fatal("Wait armed no timer at +1s")
	}
	select {
	case <-done:
		t.Fatal("Wait returned before the clock moved")
	default:
	}
	fc.Advance(time.Second)
	if !<-done {
		t.Fatal("Wait reported a cancelled context")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- b.Wait(ctx, fc) }()
	if !fc.WaitArmed(fc.Now().Add(2*time.Second), 5*time.Second) {
		t.Fatal("second Wait armed no timer at +2s")
	}
	cancel()
	if <-done {
		t.Fatal("Wait after cancel reported true")
	}
}
