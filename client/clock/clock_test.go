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
