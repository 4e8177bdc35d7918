package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrder(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	var order []int
	f.AfterFunc(2*time.Second, func() { order = append(order, 2) })
	f.AfterFunc(time.Second, func() { order = append(order, 1) })
	stopped := f.AfterFunc(1500*time.Millisecond, func() { order = append(order, 99) })
	stopped.Stop()
	tm := f.NewTimer(3 * time.Second)
	f.Advance(2500 * time.Millisecond)
	if len(order) != 2 || order[0] != 1 || order[1] != 2 {
		t.Fatalf("order %v", order)
	}
	select {
	case <-tm.C():
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(500 * time.Millisecond)
	if at := <-tm.C(); !at.Equal(time.Unix(3, 0)) {
		t.Fatalf("fired at %v", at)
	}
}

func TestScaledAndOffset(t *testing.T) {
	base := time.Date(2026, 9, 24, 23, 59, 0, 0, time.UTC)
	s := Scaled{Base: base, Epoch: time.Now(), Speed: 3600}
	if got := s.Now().Sub(base); got < 0 || got > time.Hour {
		t.Fatalf("scaled now drifted %s", got)
	}
	if d := s.real(time.Hour); d != time.Second {
		t.Fatalf("an hour of scaled time is %s of real time", d)
	}
	o := Offset{Base: s, Skew: -2 * time.Minute}
	early := o.Now()
	if diff := s.Now().Sub(early); diff < 2*time.Minute || diff > 2*time.Minute+time.Hour {
		t.Fatalf("offset %s", diff)
	}
}

func TestFakeTicker(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-tk.C():
		t.Fatal("ticked early")
	default:
	}
	f.Advance(time.Millisecond)
	if at := <-tk.C(); !at.Equal(time.Unix(1, 0)) {
		t.Fatalf("ticked at %v", at)
	}
	// A slow receiver misses ticks: the channel holds one, like time.Ticker.
	f.Advance(3 * time.Second)
	if at := <-tk.C(); !at.Equal(time.Unix(2, 0)) {
		t.Fatalf("kept tick at %v, want the first missed one", at)
	}
	select {
	case at := <-tk.C():
		t.Fatalf("a second buffered tick at %v", at)
	default:
	}
	tk.Reset(500 * time.Millisecond)
	f.Advance(500 * time.Millisecond)
	if at := <-tk.C(); !at.Equal(time.Unix(4, 5e8)) {
		t.Fatalf("after Reset ticked at %v", at)
	}
	tk.Stop()
	f.Advance(time.Hour)
	select {
	case <-tk.C():
		t.Fatal("ticked after Stop")
	default:
	}
	if f.Pending() != 0 {
		t.Fatalf("%d timers armed after Stop", f.Pending())
	}
}

func TestFakeTimerResetAfterStop(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	tm.Stop()
	f.Advance(2 * time.Second)
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported it armed")
	}
	f.Advance(time.Second)
	if at := <-tm.C(); !at.Equal(time.Unix(3, 0)) {
		t.Fatalf("fired at %v", at)
	}
}

func TestSinceUntilAndWaitTimers(t *testing.T) {
	f := NewFake(time.Unix(100, 0))
	start := f.Now()
	f.Advance(1500 * time.Millisecond)
	if d := Since(f, start); d != 1500*time.Millisecond {
		t.Fatalf("Since %s", d)
	}
	if d := Until(f, start.Add(2*time.Second)); d != 500*time.Millisecond {
		t.Fatalf("Until %s", d)
	}
	if f.WaitTimers(1, 10*time.Millisecond) {
		t.Fatal("saw a timer nobody armed")
	}
	go f.NewTimer(time.Second)
	if !f.WaitTimers(1, 5*time.Second) {
		t.Fatal("did not see the armed timer")
	}
}

func TestSkewed(t *testing.T) {
	if _, ok := Skewed(0, 1).(Real); !ok {
		t.Fatal("no skew is the real clock")
	}
	c := Skewed(5*time.Minute, 1)
	if d := c.Now().Sub(time.Now()); d < 5*time.Minute-time.Second || d > 5*time.Minute+time.Second {
		t.Fatalf("offset clock reads %s ahead", d)
	}
	fast := Skewed(-time.Minute, 1000)
	a := fast.Now()
	time.Sleep(2 * time.Millisecond)
	if d := fast.Now().Sub(a); d < time.Second {
		t.Fatalf("rate 1000: 2 ms of real time is %s", d)
	}
}

func TestWaitTicksReceived(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(time.Second)
	f.Advance(time.Second)
	if f.WaitTicksReceived(10 * time.Millisecond) {
		t.Fatal("a tick nobody received counted as received")
	}
	got := make(chan time.Time, 1)
	go func() { got <- <-tk.C() }()
	if !f.WaitTicksReceived(5 * time.Second) {
		t.Fatal("the received tick was not seen")
	}
	<-got
}

// A timer set for now or earlier fires at once, as a time.Timer does,
// not at the next Advance: code that reckons a deadline, is overtaken by
// an Advance and then sets its timer for what is left (0) is woken.
func TestFakeTimerDueNowFiresAtOnce(t *testing.T) {
	f := NewFake(time.Unix(100, 0))
	tm := f.NewTimer(0)
	select {
	case at := <-tm.C():
		if !at.Equal(time.Unix(100, 0)) {
			t.Fatalf("fired at %v", at)
		}
	default:
		t.Fatal("NewTimer(0) did not fire")
	}
	if tm.Stop() {
		t.Fatal("a fired timer still armed")
	}
	tm.Reset(time.Second)
	tm.Reset(-time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("Reset(-1s) did not fire")
	}
	done := make(chan struct{})
	f.AfterFunc(0, func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc(0) did not run")
	}
	if n := f.Pending(); n != 0 {
		t.Fatalf("%d timers still armed", n)
	}
}

// NewTimerAt and ResetAt arm a Fake's timer for the instant given, even
// when the clock moved after the caller reckoned it (a test's Advance
// between the reading and the arming); other clocks get the duration
// until the instant.
func TestTimerAtAnInstant(t *testing.T) {
	f := NewFake(time.Unix(100, 0))
	at := f.Now().Add(time.Second) // reckoned at 100 s
	f.Advance(500 * time.Millisecond)
	tm := NewTimerAt(f, at)
	if !f.WaitArmed(at, time.Second) {
		t.Fatal("NewTimerAt not armed at the instant")
	}
	late := f.NewTimer(time.Second) // the duration reckoned at 100 s: armed at 101.5 s
	f.Advance(500 * time.Millisecond)
	select {
	case got := <-tm.C():
		if !got.Equal(at) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("not fired at the instant")
	}
	select {
	case <-late.C():
		t.Fatal("the relative timer fired at the instant too: the test shows nothing")
	default:
	}
	late.Stop()
	ResetAt(f, tm, at.Add(time.Second))
	if !f.WaitArmed(at.Add(time.Second), time.Second) {
		t.Fatal("ResetAt not armed at the instant")
	}
	ResetAt(f, tm, at.Add(-time.Second)) // passed: fires at once
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("a timer reset for a passed instant did not fire")
	}
	// Another clock: the duration until the instant.
	r := Real{}
	rt := NewTimerAt(r, r.Now().Add(time.Millisecond))
	select {
	case <-rt.C():
	case <-time.After(5 * time.Second):
		t.Fatal("real NewTimerAt did not fire")
	}
	if ResetAt(r, rt, r.Now().Add(time.Hour)) || !rt.Stop() {
		t.Fatal("real ResetAt: not armed")
	}
}

// WaitArmedBetween sees a timer armed inside its range (upper end
// included) and none outside it.
func TestWaitArmedBetween(t *testing.T) {
	f := NewFake(time.Unix(100, 0))
	now := f.Now()
	tm := f.NewTimer(3 * time.Second)
	defer tm.Stop()
	if !f.WaitArmedBetween(now.Add(2*time.Second), now.Add(3*time.Second), time.Second) {
		t.Fatal("the timer at its range's end not seen")
	}
	if f.WaitArmedBetween(now, now.Add(2*time.Second), 20*time.Millisecond) ||
		f.WaitArmedBetween(now.Add(3*time.Second), now.Add(time.Hour), 20*time.Millisecond) {
		t.Fatal("a timer outside the range seen")
	}
}
