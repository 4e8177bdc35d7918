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
}

func newClusterClock(c clock.Clock, base int64) *clusterClock {
	cc := &clusterClock{clock: c, base: base, start: c.Now()}
	cc.last.Store(base)
	return cc
}

// current is the cluster time now, for reads; it does not advance stamps.
func (c *clusterClock) current() int64 {
	return max(c.elapsed(), c.last.Load())
}

func (c *clusterClock) elapsed() int64 {
	return c.base + c.clock.Now().Sub(c.start).Milliseconds()
}

// stamp is what the leader writes into a command besides its body: today
// the lease time. The envelope already has room for a calendar time
// (fsm.EnvelopeAt, Command.calendar_ms); stamping it is one more field
// here, filled in stamp() (the leader's wall clock, never below the last)
// and written in envelope.
type stamp struct {
	nowMs int64
}

// stamp returns the stamp of a new command: lease time monotonic across
// calls.
func (c *clusterClock) stamp() stamp {
	t := c.elapsed()
	for {
		last := c.last.Load()
		if t <= last {
			return stamp{nowMs: last}
		}
		if c.last.CompareAndSwap(last, t) {
			return stamp{nowMs: t}
		}
	}
}

// envelope wraps body into a command carrying the stamp.
func (s stamp) envelope(body any) *fsmv1.Command {
	return fsm.Envelope(s.nowMs, body)
}
