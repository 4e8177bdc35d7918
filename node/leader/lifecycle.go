package leader

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/backoff"
)

// restartBackoff spaces the restarts of a service that failed.
var restartBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// Lifecycle runs the registered services on each leadership: the one
// place where leader-only work starts and stops. Every service goroutine
// belongs to the Lead call of its term, which returns only once they all
// returned.
type Lifecycle struct {
	log   *slog.Logger
	clock clock.Clock

	mu       sync.Mutex
	services []Service
	term     *term // the leadership being led now; nil between
}

type term struct {
	ctx context.Context
	l   Leadership
	wg  sync.WaitGroup
}

// NewLifecycle returns a Lifecycle with no services; restarts wait on c.
func NewLifecycle(log *slog.Logger, c clock.Clock) *Lifecycle {
	return &Lifecycle{log: log, clock: c}
}

// Register adds services: they run on every leadership from now on, and
// at once on the current one if this node leads now.
func (lc *Lifecycle) Register(svcs ...Service) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.services = append(lc.services, svcs...)
	if t := lc.term; t != nil {
		for _, s := range svcs {
			lc.start(t, s)
		}
	}
}

// Names lists the registered services, in registration order.
func (lc *Lifecycle) Names() []string {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	out := make([]string, len(lc.services))
	for i, s := range lc.services {
		out[i] = s.Name()
	}
	return out
}

// Lead runs every service on the ready leadership l until ctx ends, and
// returns once all of them returned.
func (lc *Lifecycle) Lead(ctx context.Context, l Leadership) {
	t := &term{ctx: ctx, l: l}
	lc.mu.Lock()
	lc.term = t
	for _, s := range lc.services {
		lc.start(t, s)
	}
	lc.mu.Unlock()
	<-ctx.Done()
	lc.mu.Lock()
	if lc.term == t {
		lc.term = nil
	}
	lc.mu.Unlock()
	t.wg.Wait()
}

// start runs s on t in a goroutine of t's; lc.mu is held.
func (lc *Lifecycle) start(t *term, s Service) {
	t.wg.Go(func() { lc.supervise(t, s) })
}

// supervise runs s until its term ends, again after a backoff when it fails.
func (lc *Lifecycle) supervise(t *term, s Service) {
	retry := backoff.New(restartBackoff)
	for {
		err := s.Run(t.ctx, t.l)
		if t.ctx.Err() != nil {
			return
		}
		if err == nil {
			lc.log.Debug("leader service finished for this term", "service", s.Name())
			return
		}
		d := retry.Next()
		lc.log.Error("leader service failed; restarting", "service", s.Name(), "err", err, "in", d)
		if !backoff.Sleep(t.ctx, lc.clock, d) {
			return
		}
	}
}
