package node

import (
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// leaderClock stamps commands on the leader with two times (DESIGN.md,
// "Time"):
//
//   - lease time (G9): base + time elapsed on the node's clock since this
//     node became leader, never below the last stamp. base is the FSM's
//     lease time after the new leader applied everything (Barrier), so a
//     failover pauses lease time: leases are extended by the gap, never
//     shortened. Elapsed time is read with Now (monotonic on a real
//     clock), so a step of the wall clock does not move it.
//   - calendar time: the leader's wall clock (clock.Wall, Unix ms), never
//     below the last calendar stamp nor the FSM's calendar time when this
//     leadership began. A leader whose wall clock is behind holds at the
//     last stamp until its wall clock passes it; one stepped forward jumps
//     forward with it.
type leaderClock struct {
	clock     clock.Clock
	base      int64
	start     time.Time
	lastLease atomic.Int64 // last lease-time stamp
	lastCal   atomic.Int64 // last calendar stamp
}

// newLeaderClock starts a leadership's clock: lease time from base (the
// FSM's lease time after the barrier), calendar time not below calendar (the
// FSM's calendar time then).
func newLeaderClock(c clock.Clock, base, calendar int64) *leaderClock {
	cc := &leaderClock{clock: c, base: base, start: c.Now()}
	cc.lastLease.Store(base)
	cc.lastCal.Store(calendar)
	return cc
}

// leaseTime is the lease time now, for reads; it does not advance stamps.
func (c *leaderClock) leaseTime() int64 {
	return max(c.elapsed(), c.lastLease.Load())
}

func (c *leaderClock) elapsed() int64 {
	return c.base + c.clock.Now().Sub(c.start).Milliseconds()
}

// calendarTime is the calendar time now (what a command stamped now would
// carry), for the leader's calendar decisions; it does not advance stamps.
func (c *leaderClock) calendarTime() int64 {
	return max(clock.Wall(c.clock).UnixMilli(), c.lastCal.Load())
}

// stamp is what the leader writes into a command besides its body.
type stamp struct {
	leaseMs    int64 // lease time
	calendarMs int64 // calendar time
}

// stamp returns the stamp of a new command: both times monotonic across
// calls.
func (c *leaderClock) stamp() stamp {
	return stamp{
		leaseMs:    advance(&c.lastLease, c.elapsed()),
		calendarMs: advance(&c.lastCal, clock.Wall(c.clock).UnixMilli()),
	}
}

// advance moves last up to t and returns the new value (last when t is
// behind it).
func advance(last *atomic.Int64, t int64) int64 {
	for {
		l := last.Load()
		if t <= l {
			return l
		}
		if last.CompareAndSwap(l, t) {
			return t
		}
	}
}

// envelope wraps body into a command carrying the stamp.
func (s stamp) envelope(body any) *fsmv1.Command {
	return fsm.EnvelopeAt(s.leaseMs, s.calendarMs, body)
}
