package periodic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Runner runs jobs in one replica. Every replica runs the same jobs: each
// puts their schedules (the same spec again changes nothing) and runs a
// queue Worker for their queues; coordd makes each occurrence once and
// hands it to one worker.
type Runner struct {
	c           *client.Client
	log         *slog.Logger
	metrics     Metrics
	concurrency int
	workerOpts  []queue.WorkerOption
	jobs        []Job
	specs       []*coordv1.ScheduleSpec
}

// Option configures a Runner.
type Option func(*Runner)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// WithMetrics sets the metrics sink (see clientprom.NewJobMetrics).
func WithMetrics(m Metrics) Option { return func(r *Runner) { r.metrics = m } }

// WithConcurrency is how many occurrences this replica runs at once per
// queue (default 4).
func WithConcurrency(n int) Option { return func(r *Runner) { r.concurrency = max(n, 1) } }

// WithWorkerOptions passes options to the queue Worker (its id, poll
// wait, shutdown timeout, batching).
func WithWorkerOptions(opts ...queue.WorkerOption) Option {
	return func(r *Runner) { r.workerOpts = append(r.workerOpts, opts...) }
}

// WithShutdownTimeout is how long running occurrences may finish after
// Run's context ends before their context is cancelled and their jobs are
// handed back (default 30 s).
func WithShutdownTimeout(d time.Duration) Option {
	return WithWorkerOptions(queue.WithShutdownTimeout(d))
}

// NewRunner returns a runner on a client.
func NewRunner(c *client.Client, opts ...Option) *Runner {
	r := &Runner{c: c, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: nopMetrics{}, concurrency: 4}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Add adds a job; call it before Run.
func (r *Runner) Add(j Job) error {
	spec, err := j.Spec()
	if err != nil {
		return err
	}
	for _, o := range r.jobs {
		if o.Name == j.Name {
			return fmt.Errorf("periodic: job %s added twice", j.Name)
		}
	}
	r.jobs = append(r.jobs, j)
	r.specs = append(r.specs, spec)
	return nil
}

// Put creates or updates the jobs' schedules in coordd (Run does it
// first; an idempotent upsert, so every replica may).
func (r *Runner) Put(ctx context.Context) error {
	for _, spec := range r.specs {
		resp, err := r.c.PutSchedule(ctx, spec)
		if err != nil {
			return fmt.Errorf("periodic: put schedule %s: %w", spec.GetName(), err)
		}
		if resp.GetChanged() {
			r.log.Info("schedule put", "schedule", spec.GetName(), "spec", spec.GetSchedule(), "created", resp.GetCreated())
		}
	}
	return nil
}

// Run puts the jobs' schedules and runs their occurrences until ctx ends;
// then it stops taking occurrences, lets running ones finish for the
// shutdown timeout and hands the others back (another replica runs them).
func (r *Runner) Run(ctx context.Context) error {
	if len(r.jobs) == 0 {
		return errors.New("periodic: no jobs")
	}
	if err := r.Put(ctx); err != nil {
		return err
	}
	var queues []string
	for _, j := range r.jobs {
		if !slices.Contains(queues, j.queue()) {
			queues = append(queues, j.queue())
		}
	}
	opts := []queue.WorkerOption{queue.WithLogger(r.log)}
	for _, q := range queues {
		opts = append(opts, queue.WithQueue(q, r.concurrency))
	}
	w := queue.NewWorker(r.c, append(opts, r.workerOpts...)...)
	for _, j := range r.jobs {
		w.Handle(j.Name, r.handler(j))
	}
	return w.Run(ctx)
}

// handler runs one attempt of an occurrence of j.
func (r *Runner) handler(j Job) queue.Handler {
	return func(ctx context.Context, qj *queue.Job) error {
		run, err := newRun(qj)
		if err != nil {
			return queue.Permanent(err)
		}
		start := time.Now()
		r.metrics.RunStarted(j.Name, start.Sub(run.Occurrence))
		log := r.log.With("schedule", j.Name, "job_id", qj.ID, "window", run.Window, "attempt", run.Attempt, "token", run.Token)
		if err := j.Run(ctx, run); err != nil {
			r.metrics.RunFailed(j.Name)
			if ctx.Err() != nil {
				r.metrics.ClaimLost(j.Name)
			}
			log.Warn("run failed", "err", err)
			return err
		}
		d := time.Since(start)
		r.metrics.RunCompleted(j.Name, d)
		log.Info("occurrence completed", "duration", d, "start_lag", start.Sub(run.Occurrence))
		return nil
	}
}

// Metrics receives the runner's events, per job. Implementations must be
// safe for concurrent use (clientprom.NewJobMetrics is one). What the
// cluster decides (skipped and overdue occurrences) is in coordd's own
// metrics and in ListOverdue.
type Metrics interface {
	// RunStarted: an attempt started; startLag is its start minus the
	// occurrence (on this replica's clock against the cluster's).
	RunStarted(job string, startLag time.Duration)
	RunCompleted(job string, duration time.Duration)
	RunFailed(job string)
	// ClaimLost: an attempt's context was cancelled (its claim lapsed or
	// the job was cancelled) and the run returned an error.
	ClaimLost(job string)
}

type nopMetrics struct{}

func (nopMetrics) RunStarted(string, time.Duration)   {}
func (nopMetrics) RunCompleted(string, time.Duration) {}
func (nopMetrics) RunFailed(string)                   {}
func (nopMetrics) ClaimLost(string)                   {}
