package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/clock"
)

// Runner runs jobs in one replica. Every replica runs the same jobs; coordd
// decides which replica runs each occurrence.
type Runner struct {
	c        *client.Client
	clock    clock.Clock
	log      *slog.Logger
	metrics  Metrics
	poll     time.Duration
	shutdown time.Duration
	jobs     []*compiled
	noGate   bool
}

// WithoutClusterClockGate lets occurrences start when this runner's clock
// says so even if coordd's clock has not reached them yet. By default a
// claim is refused before its occurrence on the cluster's clock, so a
// replica whose clock runs ahead waits instead of starting early; runners
// on virtual or accelerated clocks that run ahead of real time (demos,
// tests) turn the gate off.
func WithoutClusterClockGate() Option { return func(r *Runner) { r.noGate = true } }

// Option configures a Runner.
type Option func(*Runner)

// WithClock sets the clock that drives schedules (tests: clock.Fake).
func WithClock(c clock.Clock) Option { return func(r *Runner) { r.clock = c } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// WithMetrics sets the metrics sink (see clientprom.NewJobMetrics).
func WithMetrics(m Metrics) Option { return func(r *Runner) { r.metrics = m } }

// WithPollInterval is how often a replica that does not hold a job's lease
// checks whether the occurrence completed or needs taking over (default 1 s).
func WithPollInterval(d time.Duration) Option { return func(r *Runner) { r.poll = d } }

// WithShutdownTimeout is how long running occurrences may finish after the
// runner's context ends before they are cancelled (default 30 s).
func WithShutdownTimeout(d time.Duration) Option { return func(r *Runner) { r.shutdown = d } }

// NewRunner returns a runner on a client.
func NewRunner(c *client.Client, opts ...Option) *Runner {
	r := &Runner{c: c, clock: clock.Real{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: nopMetrics{},
		poll: time.Second, shutdown: 30 * time.Second}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Add adds a job; call it before Run.
func (r *Runner) Add(j Job) error {
	c, err := j.compile()
	if err != nil {
		return err
	}
	for _, o := range r.jobs {
		if o.Name == c.Name {
			return fmt.Errorf("jobs: job %s added twice", c.Name)
		}
	}
	r.jobs = append(r.jobs, c)
	return nil
}

// Run registers the jobs with coordd and runs them until ctx ends. Then it
// stops taking occurrences, lets running ones finish for the shutdown
// timeout, cancels the rest, and returns once every lease is released.
func (r *Runner) Run(ctx context.Context) error {
	if len(r.jobs) == 0 {
		return errors.New("jobs: no jobs")
	}
	for _, j := range r.jobs {
		if j.sched == nil {
			continue
		}
		if _, err := r.c.RegisterJob(ctx, j.spec()); err != nil {
			return fmt.Errorf("jobs: register %s: %w", j.Name, err)
		}
	}
	// work outlives ctx by the shutdown timeout.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stop := context.AfterFunc(ctx, func() {
		t := r.clock.NewTimer(r.shutdown)
		select {
		case <-t.C():
			cancelWork()
		case <-work.Done():
			t.Stop()
		}
	})
	defer stop()
	var wg sync.WaitGroup
	for _, j := range r.jobs {
		wg.Add(1)
		go func(j *compiled) {
			defer wg.Done()
			r.jobLoop(ctx, work, j)
		}(j)
	}
	wg.Wait()
	return nil
}

// jobLoop schedules one job: first what the catch-up horizon still owes,
// oldest first, then each occurrence as it comes. With Forbid occurrences
// run one after another; with Allow each runs on its own.
func (r *Runner) jobLoop(sched, work context.Context, j *compiled) {
	var wg sync.WaitGroup
	defer wg.Wait()
	handle := func(occ time.Time) {
		if j.Concurrency == Allow {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.occurrence(sched, work, j, occ)
			}()
			return
		}
		r.occurrence(sched, work, j, occ)
	}
	start := r.clock.Now()
	if j.sched == nil { // Now(): once, at start
		handle(start)
		return
	}
	for _, occ := range j.catchUp(start) {
		handle(occ)
	}
	last := start
	for {
		next := j.sched.Next(last)
		if next.IsZero() {
			return
		}
		if !r.sleepUntil(sched, next) {
			return
		}
		last = next
		handle(next)
	}
}

// sleepUntil waits on the runner's clock; false when ctx ended first.
func (r *Runner) sleepUntil(ctx context.Context, t time.Time) bool {
	d := t.Sub(r.clock.Now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := r.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// occurrence drives one occurrence to completion: acquire, claim, run,
// complete, release; retried with backoff after a failure or a lost lease,
// and polled while another replica holds the lease, until the window is
// completed (by anyone), it misses its starting deadline, or the horizon
// passes.
func (r *Runner) occurrence(sched, work context.Context, j *compiled, occ time.Time) {
	window := j.windowKey(occ)
	log := r.log.With("job", j.Name, "window", window)
	backoff := j.RetryBackoff
	skipped, tooEarly := false, false
	// slack is how long the cluster made this occurrence wait (this
	// replica's clock is ahead by about that much): it moves the give-up
	// time, which is on this replica's clock, so waiting is not missing.
	var slack time.Duration
	for sched.Err() == nil {
		now := r.clock.Now()
		if now.After(j.giveUp(occ).Add(slack)) && j.sched != nil {
			log.Warn("occurrence given up: not completed within the catch-up horizon", "occurrence", occ)
			r.metrics.RunMissed(j.Name)
			return
		}
		if !j.startable(occ, now) {
			w, err := r.c.GetWindow(sched, j.Name, window)
			if errors.Is(err, client.ErrNotFound) {
				log.Warn("occurrence missed: past its starting deadline", "occurrence", occ, "deadline", j.StartingDeadline)
				r.metrics.RunMissed(j.Name)
				return
			}
			if err == nil && w.GetCompletedAt() > 0 {
				return
			}
		}
		done, ran, err := r.attempt(work, j, occ, window)
		switch {
		case done:
			return
		case !ran && err == nil:
			if !skipped {
				skipped = true
				r.metrics.RunSkipped(j.Name)
				log.Debug("another replica holds the lease")
			}
			// The next attempt is the poll: an acquire-and-claim on a
			// completed window answers from the leader's state (no log
			// entry) that it is done, and one on a lapsed lease takes over.
			if !r.sleepUntil(sched, r.clock.Now().Add(r.poll)) {
				return
			}
		case errors.Is(err, client.ErrTooEarly):
			// This replica's clock is ahead of the cluster's: wait for the
			// occurrence on the cluster's clock. Not a failure.
			wait := client.RetryAfter(err)
			if !tooEarly {
				tooEarly = true
				log.Warn("occurrence is not due yet on the cluster's clock; is this replica's clock ahead?", "occurrence", occ, "wait", wait)
			}
			wait = max(wait, time.Millisecond)
			slack += wait
			if !r.sleepUntil(sched, r.clock.Now().Add(wait)) {
				return
			}
		default:
			if errors.Is(err, client.ErrLeaseLost) {
				r.metrics.LeaseLost(j.Name)
			}
			log.Warn("run failed; the window stays incomplete and will be retried", "err", err, "in", backoff)
			if !r.sleepUntil(sched, r.clock.Now().Add(backoff)) {
				return
			}
			backoff = min(2*backoff, time.Minute)
		}
	}
}

// attempt is one occurrence in two calls: acquire-and-claim, run,
// complete-and-release (one log entry each). done is true when the window
// is completed (by this run or earlier); ran is false when another replica
// holds the lease.
func (r *Runner) attempt(work context.Context, j *compiled, occ time.Time, window string) (done, ran bool, err error) {
	// The attempt runs under work, not sched: at shutdown a running
	// occurrence may finish (until the shutdown timeout cancels work).
	opts := []client.AcquireOption{client.AcquireClaim(j.Name, window)}
	if !r.noGate {
		opts = append(opts, client.ClaimNotBefore(occ))
	}
	l, err := r.c.Acquire(work, j.leaseName(window), j.TTL, opts...)
	switch {
	case errors.Is(err, client.ErrWindowCompleted):
		return true, false, nil
	case errors.Is(err, client.ErrNotAcquired):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	claim := l.Claim()
	lctx, cancel := context.WithCancelCause(work)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	completed := false
	defer func() {
		stop()
		cancel(nil)
		if !completed { // failed, lost or panicked: give the lease back, the window stays open
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(work), 5*time.Second)
			relErr := l.Release(rctx)
			rcancel()
			if errors.Is(relErr, client.ErrLeaseLost) && !errors.Is(err, client.ErrLeaseLost) {
				err = errors.Join(err, relErr)
			}
		}
	}()
	start := r.clock.Now()
	r.metrics.RunStarted(j.Name, start.Sub(occ))
	run := &Run{Job: j.Name, Window: window, Occurrence: occ, Attempt: claim.Attempts, Generation: l.Generation(), lease: l}
	if err := j.Run(lctx, run); err != nil {
		r.metrics.RunFailed(j.Name)
		return false, true, err
	}
	if lctx.Err() != nil { // lost while running: the effect may be partial, leave the window open
		return false, true, context.Cause(lctx)
	}
	// Complete under work (not lctx, which ending the lease cancels).
	if _, err := claim.CompleteAndRelease(work, nil); err != nil {
		return false, true, err // the deferred Release frees a lease the server may still hold
	}
	completed = true
	d := r.clock.Now().Sub(start)
	r.metrics.RunCompleted(j.Name, d, j.interval())
	r.log.Info("occurrence completed", "job", j.Name, "window", window, "attempt", claim.Attempts,
		"generation", l.Generation(), "duration", d, "start_lag", start.Sub(occ))
	return true, true, nil
}

func (c *compiled) interval() time.Duration {
	if c.sched == nil {
		return 0
	}
	return c.sched.Interval()
}

// Metrics receives the runner's events, per job. Implementations must be
// safe for concurrent use (clientprom.NewJobMetrics is one).
type Metrics interface {
	RunStarted(job string, startLag time.Duration)
	RunCompleted(job string, duration, interval time.Duration)
	RunFailed(job string)
	// RunSkipped: another replica held the lease for this occurrence.
	RunSkipped(job string)
	// RunMissed: the occurrence missed its starting deadline or horizon.
	RunMissed(job string)
	LeaseLost(job string)
}

type nopMetrics struct{}

func (nopMetrics) RunStarted(string, time.Duration)                  {}
func (nopMetrics) RunCompleted(string, time.Duration, time.Duration) {}
func (nopMetrics) RunFailed(string)                                  {}
func (nopMetrics) RunSkipped(string)                                 {}
func (nopMetrics) RunMissed(string)                                  {}
func (nopMetrics) LeaseLost(string)                                  {}
