// Package jobs runs scheduled jobs so that every occurrence produces its
// effect once, whatever number of replicas run the same binary: each
// occurrence acquires the job's lease, claims the occurrence's window in
// coordd's ledger, runs with the lease's context, completes the window and
// releases. The window comes from the occurrence the schedule intended (in
// the job's time zone), never from the time a run started, so a late,
// repeated or resumed run finds the window's true state. See DESIGN.md.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/schedule"
)

// Schedule says when a job's occurrences are.
type Schedule struct {
	expr string
	tz   string
	now  bool
}

// Cron is a cron expression (5 fields, or 6 with seconds first) or a
// descriptor (@daily, @hourly, @every 30s) in the IANA time zone tz.
func Cron(expr, tz string) Schedule { return Schedule{expr: expr, tz: tz} }

// Every is "@every d" (UTC windows at d's granularity).
func Every(d time.Duration) Schedule { return Schedule{expr: "@every " + d.String(), tz: "UTC"} }

// At is a one-shot occurrence at t; its window key is "once". It never
// starts before t: t is kept to the millisecond (coordd's unit), rounded
// up. (It used to be cut to the second, which ran a job up to a second
// early.)
func At(t time.Time) Schedule {
	if r := t.Sub(t.Truncate(time.Millisecond)); r > 0 {
		t = t.Add(time.Millisecond - r)
	}
	return Schedule{expr: schedule.OncePrefix + t.UTC().Format(time.RFC3339Nano), tz: "UTC"}
}

// Now is a one-shot occurrence when the runner starts; its window key is
// "once", so it runs once across replicas. It is not registered for
// monitoring.
func Now() Schedule { return Schedule{now: true} }

// Concurrency is what may overlap.
type Concurrency int

const (
	// Forbid runs one occurrence of the job at a time (one lease per job).
	Forbid Concurrency = iota
	// Allow runs one run per window; windows may overlap (a lease per window).
	Allow
)

// Job is a scheduled job.
type Job struct {
	Name     string
	Schedule Schedule
	// TTL of the job's lease (default 30 s); renewed at TTL/3 while running.
	TTL time.Duration
	// Window turns an occurrence into a window key (default: the occurrence
	// at the schedule's granularity in the job's zone). ShiftDays: -1 makes
	// "the 00:05 run closes the previous business day".
	Window schedule.Window
	// Run does the work; ctx is cancelled when the lease is lost.
	Run func(ctx context.Context, run *Run) error
	// StartingDeadline: an occurrence that cannot start by occurrence +
	// StartingDeadline is skipped and counted as missed (0: no deadline).
	StartingDeadline time.Duration
	// Concurrency: Forbid (default) or Allow.
	Concurrency Concurrency
	// CatchUp is how far back incomplete windows are still run, oldest
	// first, when the runner starts (default: StartingDeadline, else one
	// interval). A failed or abandoned window is retried until then too.
	CatchUp time.Duration
	// CompleteWithin is when coordd reports a window overdue (default: one
	// interval).
	CompleteWithin time.Duration
	// RetryBackoff is the first delay after a failed run; it doubles up to
	// a minute (default 1 s).
	RetryBackoff time.Duration
}

// Run is one attempt at one occurrence.
type Run struct {
	Job        string
	Window     string
	Occurrence time.Time
	Attempt    uint64
	Generation uint64
	lease      *client.Lease
}

// IdempotencyKey derives a key from the occurrence:
// IdempotencyKey("store-42") is "daily-close-2026-09-25-store-42".
func (r *Run) IdempotencyKey(parts ...string) string {
	return strings.Join(append([]string{r.Job, r.Window}, parts...), "-")
}

// Fence is a FencedCommit of this run's token for resource, with the key
// IdempotencyKey(resource): a repeat (a resumed run) returns the first
// outcome instead of a second effect.
func (r *Run) Fence(ctx context.Context, resource string, payload []byte) (*client.Commit, error) {
	return r.lease.FencedCommit(ctx, resource, r.IdempotencyKey(resource), payload)
}

// Lease is the job's lease for this run.
func (r *Run) Lease() *client.Lease { return r.lease }

// compiled is a validated job.
type compiled struct {
	Job
	sched   *schedule.Schedule
	horizon time.Duration
}

func (j Job) compile() (*compiled, error) {
	if j.Name == "" || strings.ContainsAny(j.Name, "\x00\n") {
		return nil, errors.New("jobs: a job needs a name")
	}
	if j.Run == nil {
		return nil, fmt.Errorf("jobs: job %s has no Run function", j.Name)
	}
	c := &compiled{Job: j}
	if c.TTL == 0 {
		c.TTL = 30 * time.Second
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = time.Second
	}
	if j.Schedule.now {
		return c, nil
	}
	s, err := schedule.Parse(j.Schedule.expr, j.Schedule.tz)
	if err != nil {
		return nil, fmt.Errorf("jobs: job %s: %w", j.Name, err)
	}
	c.sched = s
	c.horizon = j.CatchUp
	if c.horizon == 0 {
		c.horizon = j.StartingDeadline
	}
	if c.horizon == 0 {
		c.horizon = s.Interval()
	}
	if c.horizon == 0 { // one-shot
		c.horizon = time.Hour
	}
	return c, nil
}

func (c *compiled) spec() *coordv1.JobSpec {
	conc := coordv1.JobConcurrency_JOB_CONCURRENCY_FORBID
	if c.Concurrency == Allow {
		conc = coordv1.JobConcurrency_JOB_CONCURRENCY_ALLOW
	}
	return &coordv1.JobSpec{
		Name: c.Name, Schedule: c.Schedule.expr, TimeZone: c.Schedule.tz, CompleteWithinMs: c.CompleteWithin.Milliseconds(),
		TtlMs: c.TTL.Milliseconds(), WindowLayout: c.Window.Layout, WindowShiftDays: int32(c.Window.ShiftDays),
		StartingDeadlineMs: c.StartingDeadline.Milliseconds(), CatchUpMs: c.CatchUp.Milliseconds(), Concurrency: conc,
	}
}

// windowKey is the window of an occurrence.
func (c *compiled) windowKey(occ time.Time) string {
	if c.sched == nil {
		return schedule.OnceWindow
	}
	return c.sched.Key(occ, c.Window)
}

// leaseName is the job's lease, or the window's with Allow.
func (c *compiled) leaseName(window string) string {
	if c.Concurrency == Allow {
		return c.Name + "/" + window
	}
	return c.Name
}

// catchUp returns the occurrences in (now - horizon, now], oldest first:
// what a runner starting at now still owes.
func (c *compiled) catchUp(now time.Time) []time.Time {
	if c.sched == nil {
		return nil
	}
	return c.sched.Between(now.Add(-c.horizon), now, 10_000)
}

// startable reports whether an occurrence may still start at now.
func (c *compiled) startable(occ, now time.Time) bool {
	return c.StartingDeadline == 0 || !now.After(occ.Add(c.StartingDeadline))
}

// giveUp is when a runner stops trying an occurrence that is not done: the
// catch-up horizon, and at least until the next occurrence is due.
func (c *compiled) giveUp(occ time.Time) time.Time {
	return occ.Add(max(c.horizon, c.interval()))
}
