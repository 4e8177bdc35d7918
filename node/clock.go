package node

import (
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// clusterClock stamps commands on the leader (G9): lease time is base +
// time elapsed on the node's clock since this node became leader, never
// below the last stamp. base is the FSM's clock after the new leader
// applied everything (Barrier), so a failover pauses cluster time: leases
// are extended by the gap, never shortened. The node's clock is read for
// elapsed time (monotonic) and, once in a cluster's life, for the wall
// time that sets the first epoch (runLeader).
type clusterClock struct {
	clock clock.Clock
	base  int64
	start time.Time
	last  atomic.Int64
	// calLast is the last calendar stamp (Unix ms): calendar time is the
	// node's wall clock, never below it (nor below the FSM's calendar
	// when this leadership began).
	calLast atomic.Int64
}

func newClusterClock(c clock.Clock, base, calendar int64) *clusterClock {
	cc := &clusterClock{clock: c, base: base, start: c.Now()}
	cc.last.Store(base)
	cc.calLast.Store(calendar)
	return cc
}

// calendar is the calendar time now, for reads and the dispatcher; it does
// not advance stamps.
func (c *clusterClock) calendar() int64 {
	return max(c.clock.Now().UnixMilli(), c.calLast.Load())
}

// stampCalendar returns the calendar stamp of a new command: the wall
// clock, monotonic across calls (a clock stepped back holds the stamp).
func (c *clusterClock) stampCalendar() int64 {
	t := c.clock.Now().UnixMilli()
	for {
		last := c.calLast.Load()
		if t <= last {
			return last
		}
		if c.calLast.CompareAndSwap(last, t) {
			return t
		}
	}
}

// current is the cluster time now, for reads; it does not advance stamps.
func (c *clusterClock) current() int64 {
	return max(c.elapsed(), c.last.Load())
}

func (c *clusterClock) elapsed() int64 {
	return c.base + c.clock.Now().Sub(c.start).Milliseconds()
}

// stamp is what the leader writes into a command besides its body: the
// lease time and the calendar time (the leader's wall clock, never below
// the last stamp; fsm/DESIGN.md "Calendar time").
type stamp struct {
	nowMs, calMs int64
}

// stamp returns the stamp of a new command: lease time monotonic across
// calls.
func (c *clusterClock) stamp() stamp {
	t := c.elapsed()
	for {
		last := c.last.Load()
		if t <= last {
			return stamp{nowMs: last, calMs: c.stampCalendar()}
		}
		if c.last.CompareAndSwap(last, t) {
			return stamp{nowMs: t, calMs: c.stampCalendar()}
		}
	}
}

// envelope wraps body into a command carrying the stamp.
func (s stamp) envelope(body any) *fsmv1.Command {
	return fsm.EnvelopeAt(s.nowMs, s.calMs, body)
}
