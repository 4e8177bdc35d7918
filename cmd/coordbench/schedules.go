package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/periodic"
)

// lagMetrics collects the runners' start lags and completions.
type lagMetrics struct {
	mu        sync.Mutex
	lags      []time.Duration
	completed atomic.Int64
	failed    atomic.Int64
}

func (m *lagMetrics) RunStarted(string, time.Duration) {}

func (m *lagMetrics) lag(d time.Duration) {
	m.mu.Lock()
	m.lags = append(m.lags, d)
	m.mu.Unlock()
}
func (m *lagMetrics) RunCompleted(string, time.Duration) { m.completed.Add(1) }
func (m *lagMetrics) RunFailed(string)                   { m.failed.Add(1) }
func (m *lagMetrics) ClaimLost(string)                   {}

// schedulesWorkload runs `clients` schedules, each every second, whose
// jobs three replicas run (three SDK clients, each a periodic.Runner: it puts
// the schedules and runs a queue worker). ops are the occurrences due in
// the measured window (whole seconds) whose effect (a fenced commit with
// the attempt's token, keyed by the occurrence) was made; latency is their
// start lag (handler start minus occurrence). Counting by occurrence, not by completion
// time, matters: every job fires on the second, so completions arrive in
// waves and a window counted by completion time would see 9 or 10 of them.
func schedulesWorkload(ctx context.Context, cfg config, n int) (*result, error) {
	m := &lagMetrics{}
	// The window [from, to) of occurrence times measured, in unix ns.
	var from, to atomic.Int64
	from.Store(math.MaxInt64)
	var (
		effects    atomic.Int64 // first fenced commits of occurrences in the window
		dupEffects atomic.Int64 // runs that found their effect already done
	)
	inside := func(occ time.Time) bool { return occ.UnixNano() >= from.Load() && occ.UnixNano() < to.Load() }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for rep := 0; rep < 3; rep++ {
		c, err := client.New(ctx, cfg.endpoints, client.WithOwner(fmt.Sprintf("replica-%s-%d", run, rep)))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		r := periodic.NewRunner(c, periodic.WithMetrics(m), periodic.WithConcurrency(max(64, n/2)), periodic.WithShutdownTimeout(2*time.Second))
		for j := 0; j < n; j++ {
			if err := r.Add(periodic.Job{Name: fmt.Sprintf("sched-%s-%d", run, j), Schedule: periodic.Every(time.Second),
				VisibilityTimeout: 10 * time.Second, Concurrency: periodic.Allow, Run: func(ctx context.Context, run *periodic.Run) error {
					if inside(run.Occurrence) {
						m.lag(time.Since(run.Occurrence)) // the start lag
					}
					cm, err := run.Fence(ctx, "effect-"+run.Job, nil)
					if err != nil || !inside(run.Occurrence) {
						return err
					}
					if cm.Duplicate {
						dupEffects.Add(1)
					} else {
						effects.Add(1)
					}
					return nil
				}}); err != nil {
				return nil, err
			}
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	// Warm up until one occurrence of every job completed (registering
	// thousands of jobs takes seconds), then measure the occurrences of
	// the next whole seconds.
	warm := time.Now()
	for m.completed.Load() < int64(n) {
		if time.Since(warm) > time.Minute {
			return nil, fmt.Errorf("schedules: %d of %d first occurrences completed after a minute", m.completed.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now().Truncate(time.Second).Add(time.Second)
	secs := max(1, cfg.duration.Round(time.Second))
	to.Store(t0.Add(secs).UnixNano())
	from.Store(t0.UnixNano())
	f0 := m.failed.Load()
	// Wait for the window to pass plus a margin, so every occurrence in it
	// finished, one way or the other.
	time.Sleep(time.Until(t0.Add(secs + 3*time.Second)))
	f1 := m.failed.Load()
	cancel()
	wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &result{workload: "schedules", clients: n, ops: effects.Load(), elapsed: secs, lat: append([]time.Duration(nil), m.lags...), errors: f1 - f0}
	r.add("schedules", n)
	r.add("replicas", 3)
	r.add("expected_per_s", n)
	// Missed: occurrences of the window without their effect.
	r.add("missed", n*int(secs/time.Second)-int(effects.Load()))
	// Exactly once: a second run of an occurrence would find its effect
	// done (a duplicate); none is expected here.
	r.add("duplicate_effects", int(dupEffects.Load()))
	return r, nil
}
