// Package leader is the work that runs only on the leader. Each
// leader-only service is one file here (or, for the API's, one file in
// api/), under one contract: a Service has a name and runs while this node
// leads. One Lifecycle (lifecycle.go) starts every registered service when
// a leadership becomes ready and stops them all when it ends, so "what
// runs on the leader?" is this directory (node/DESIGN.md, "What runs on
// the leader").
//
// The package knows neither Raft nor the node nor the API: the node hands
// each service a Leadership (its clocks and its proposer for that term),
// and the API registers its own services through the node.
package leader

import (
	"context"
	"sync"
	"time"

	"github.com/coordd/coordd/clock"
)

// Leadership is one term of this node as ready leader, as its services
// see it.
type Leadership interface {
	// LeaseTime is lease time now (Unix ms; monotonic on this
	// leader): what leases are judged on.
	LeaseTime() int64
	// CalendarTime is calendar time now (Unix ms): the leader's wall clock,
	// never below its last stamp; what jobs and schedules are judged on.
	CalendarTime() int64
	// LastStamp is the lease time stamped on the last command proposed in
	// this term (the tick service appends ticks only when the log is idle).
	LastStamp() int64
	// Propose stamps an fsm command body, commits it under this leadership
	// and returns the FSM's result; a rejection is the error.
	Propose(ctx context.Context, body any) (any, error)
}

// Service is one piece of leader-only work.
type Service interface {
	// Name names the service in logs and in Lifecycle.Names.
	Name() string
	// Run works while l lasts and returns nil when ctx ends (the
	// leadership ended, or the node stops). An error returned before that
	// is logged and the service runs again after a backoff, while the
	// leadership lasts; nil before that means it has nothing more to do
	// in this term.
	Run(ctx context.Context, l Leadership) error
}

// Waker is a wake-up channel of capacity one that a service sleeps on:
// Poke never blocks, and pokes while nobody listens merge into one. The
// zero value is ready; services that other code wakes embed it.
type Waker struct {
	once sync.Once
	ch   chan struct{}
}

// C is the channel a poke arrives on.
func (w *Waker) C() <-chan struct{} {
	w.once.Do(func() { w.ch = make(chan struct{}, 1) })
	return w.ch
}

// Poke wakes the service (now, or when it next sleeps).
func (w *Waker) Poke() {
	w.C()
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Every calls f every d on c until ctx ends, and returns nil then: the
// loop of the periodic services.
func Every(ctx context.Context, c clock.Clock, d time.Duration, f func()) error {
	tk := c.NewTicker(d)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C():
			f()
		}
	}
}
