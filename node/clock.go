package server

import (
	"sync/atomic"
	"time"
)

// Clock is a node's source of time. Only two things read it: the leader's
// monotonic elapsed time (which advances the cluster clock) and, once in a
// cluster's life, the wall clock that sets the cluster clock's epoch.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now (with its monotonic reading).
func (SystemClock) Now() time.Time { return time.Now() }

// clusterClock stamps commands on the leader: base + monotonic time since
// this node became leader, never below the last stamp. base is the FSM's
// clock after the new leader applied everything, so a failover pauses
// cluster time (leases are extended by the gap, never shortened: G9).
type clusterClock struct {
	clock Clock
	base  int64
	start time.Time
	last  atomic.Int64
}

func newClusterClock(c Clock, base int64) *clusterClock {
	cc := &clusterClock{clock: c, base: base, start: c.Now()}
	cc.last.Store(base)
	return cc
}

// current is the cluster time now, for reads; it does not advance stamps.
func (c *clusterClock) current() int64 {
	t := c.base + c.clock.Now().Sub(c.start).Milliseconds()
	return max(t, c.last.Load())
}

// stamp returns a time for a new command: monotonic across calls.
func (c *clusterClock) stamp() int64 {
	t := c.base + c.clock.Now().Sub(c.start).Milliseconds()
	for {
		last := c.last.Load()
		if t <= last {
			return last
		}
		if c.last.CompareAndSwap(last, t) {
			return t
		}
	}
}

// SkewedClock is a clock for fault tests: its wall reading is Offset away
// from the real one and its elapsed time runs at Rate (1 = real time).
// coordd exposes it through --test-clock-offset and --test-clock-rate,
// because Go programs ignore libfaketime.
type SkewedClock struct {
	Offset time.Duration
	Rate   float64
	start  time.Time
}

// NewSkewedClock starts a skewed clock now.
func NewSkewedClock(offset time.Duration, rate float64) *SkewedClock {
	if rate <= 0 {
		rate = 1
	}
	return &SkewedClock{Offset: offset, Rate: rate, start: time.Now()}
}

// Now keeps the monotonic reading, so Sub between two readings is the
// scaled elapsed time.
func (c *SkewedClock) Now() time.Time {
	elapsed := time.Since(c.start)
	return c.start.Add(time.Duration(float64(elapsed)*c.Rate) + c.Offset)
}
