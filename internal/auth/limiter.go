package auth

import (
	"fmt"
	"sync"

	"golang.org/x/time/rate"
)

// Limits are per-identity caps; zero means unlimited.
type Limits struct {
	// LeasesPerIdentity caps the live leases one identity holds (enforced
	// in the FSM, exactly, as Acquire's max_live_leases).
	LeasesPerIdentity uint32
	// RequestsPerSecond and Burst rate-limit calls (and KeepAlive stream
	// opens) per identity on the node a call enters. Excess calls are
	// refused at once, never queued.
	RequestsPerSecond float64
	Burst             int
	// KeepAliveStreams caps open KeepAlive streams per identity on a node.
	KeepAliveStreams int
	// WaitingAcquires caps Acquire calls with wait queued per identity on
	// the leader (each holds a call open until it is granted).
	WaitingAcquires int
}

// Limiter holds the per-identity rate limiters and counts of one node.
type Limiter struct {
	cfg     Limits
	mu      sync.Mutex
	rates   map[string]*rate.Limiter
	streams map[string]int
	waits   map[string]int
}

// NewLimiter returns a limiter enforcing cfg.
func NewLimiter(cfg Limits) *Limiter {
	return &Limiter{cfg: cfg, rates: map[string]*rate.Limiter{}, streams: map[string]int{}, waits: map[string]int{}}
}

// Allow takes one call of identity from its token bucket, or refuses it
// (RateLimited).
func (l *Limiter) Allow(identity string) error {
	if l.cfg.RequestsPerSecond <= 0 {
		return nil
	}
	l.mu.Lock()
	r := l.rates[identity]
	if r == nil {
		burst := l.cfg.Burst
		if burst <= 0 {
			burst = max(1, int(l.cfg.RequestsPerSecond))
		}
		r = rate.NewLimiter(rate.Limit(l.cfg.RequestsPerSecond), burst)
		l.rates[identity] = r
	}
	l.mu.Unlock()
	if r.Allow() {
		return nil
	}
	return &Error{Kind: RateLimited,
		Msg:  fmt.Sprintf("identity %q is over its request rate (%g/s, burst %d); retry later", identity, l.cfg.RequestsPerSecond, r.Burst()),
		Meta: map[string]string{"identity": identity}}
}

// OpenStream counts one more KeepAlive stream of identity (StreamLimit);
// the returned function gives it back.
func (l *Limiter) OpenStream(identity string) (func(), error) {
	return l.hold(l.streams, l.cfg.KeepAliveStreams, identity, StreamLimit, "KeepAlive streams open on this node")
}

// StartWait counts one more waiting Acquire of identity (WaitLimit); the
// returned function gives it back.
func (l *Limiter) StartWait(identity string) (func(), error) {
	return l.hold(l.waits, l.cfg.WaitingAcquires, identity, WaitLimit, "waiting Acquire calls")
}

// hold counts one more open thing of identity in counts, up to limit (0:
// unlimited); the returned function gives it back.
func (l *Limiter) hold(counts map[string]int, limit int, identity string, kind Kind, what string) (func(), error) {
	if limit <= 0 {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if counts[identity] >= limit {
		return nil, &Error{Kind: kind, Msg: fmt.Sprintf("identity %q already has %d %s, its limit", identity, limit, what),
			Meta: map[string]string{"identity": identity}}
	}
	counts[identity]++
	return func() {
		l.mu.Lock()
		if counts[identity]--; counts[identity] == 0 {
			delete(counts, identity)
		}
		l.mu.Unlock()
	}, nil
}
