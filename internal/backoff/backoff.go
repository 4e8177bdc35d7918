// Package backoff is the one retry delay of coordd's loops: exponential
// from Initial by Multiplier up to Max, with a random Jitter fraction off
// each delay so that many clients failing together do not retry together,
// and Reset after a success. Wait sleeps on an injectable clock (clock/),
// so a loop that retries is tested in virtual time.
//
// It is a few lines of its own rather than a dependency: the loops sleep
// on clock.Clock (a fake in tests), which github.com/cenkalti/backoff's
// Retry and Ticker do not take, and they need nothing else of it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/coordd/coordd/clock"
)

// Policy is how delays grow. Zero fields take their defaults.
type Policy struct {
	Initial    time.Duration // first delay (default 100 ms)
	Max        time.Duration // cap (default 10 s; never below Initial)
	Multiplier float64       // growth per failure (default 2)
	// Jitter is the fraction of each delay drawn at random and taken off
	// it: a delay d becomes a uniform value in [d·(1−Jitter), d]. 0: none.
	Jitter float64
	// Rand draws in [0, 1) (default math/rand/v2's Float64); tests pin it.
	Rand func() float64
}

// Backoff is one loop's retry state. It is not safe for concurrent use.
type Backoff struct {
	p    Policy
	next time.Duration
}

// New returns a Backoff at its first delay.
func New(p Policy) *Backoff {
	if p.Initial <= 0 {
		p.Initial = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 10 * time.Second
	}
	p.Max = max(p.Max, p.Initial)
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	p.Jitter = min(max(p.Jitter, 0), 1)
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return &Backoff{p: p, next: p.Initial}
}

// Next returns the delay before the next retry (with jitter) and grows
// the one after it, up to Max.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(time.Duration(float64(b.next)*b.p.Multiplier), b.p.Max)
	if b.p.Jitter > 0 {
		d -= time.Duration(float64(d) * b.p.Jitter * b.p.Rand())
	}
	return d
}

// Reset starts again from Initial (call it after a success).
func (b *Backoff) Reset() { b.next = b.p.Initial }

// Wait sleeps Next on c; false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context, c clock.Clock) bool {
	return Sleep(ctx, c, b.Next())
}

// Sleep waits d on c; false when ctx ended first.
func Sleep(ctx context.Context, c clock.Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
