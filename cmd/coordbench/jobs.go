package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/jobs"
)

// lagMetrics collects the runners' start lags and completions.
type lagMetrics struct {
	mu        sync.Mutex
	lags      []time.Duration
	completed atomic.Int64
	failed    atomic.Int64
}

func (m *lagMetrics) RunStarted(_ string, lag time.Duration) {
	m.mu.Lock()
	m.lags = append(m.lags, lag)
	m.mu.Unlock()
}
func (m *lagMetrics) RunCompleted(string, time.Duration, time.Duration) { m.completed.Add(1) }
func (m *lagMetrics) RunFailed(string)                                  { m.failed.Add(1) }
func (m *lagMetrics) RunSkipped(string)                                 {}
func (m *lagMetrics) RunMissed(string)                                  {}
func (m *lagMetrics) LeaseLost(string)                                  {}

// jobsWorkload runs `clients` jobs, each every second, on three replicas
// (three SDK clients and runners); ops are occurrences completed, latency
// is the start lag (start minus occurrence).
func jobsWorkload(ctx context.Context, cfg config, n int) (*result, error) {
	m := &lagMetrics{}
	var commits atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for rep := 0; rep < 3; rep++ {
		c, err := client.New(ctx, cfg.endpoints, client.WithOwner(fmt.Sprintf("replica-%s-%d", run, rep)))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		r := jobs.NewRunner(c, jobs.WithMetrics(m), jobs.WithPollInterval(250*time.Millisecond), jobs.WithShutdownTimeout(2*time.Second))
		for j := 0; j < n; j++ {
			if err := r.Add(jobs.Job{Name: fmt.Sprintf("job-%s-%d", run, j), Schedule: jobs.Every(time.Second), TTL: 10 * time.Second,
				CatchUp: time.Second, Run: func(ctx context.Context, run *jobs.Run) error {
					_, err := run.Fence(ctx, "effect-"+run.Job, nil)
					if err == nil {
						commits.Add(1)
					}
					return err
				}}); err != nil {
				return nil, err
			}
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	// Warm up one occurrence, then measure.
	time.Sleep(2 * time.Second)
	m.mu.Lock()
	m.lags = m.lags[:0]
	m.mu.Unlock()
	c0, f0 := m.completed.Load(), m.failed.Load()
	t0 := time.Now()
	time.Sleep(cfg.duration)
	elapsed := time.Since(t0)
	c1, f1 := m.completed.Load(), m.failed.Load()
	cancel()
	wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &result{workload: "jobs", clients: n, ops: c1 - c0, elapsed: elapsed, lat: append([]time.Duration(nil), m.lags...), errors: f1 - f0}
	r.add("jobs", n)
	r.add("replicas", 3)
	r.add("expected_per_s", n)
	return r, nil
}
