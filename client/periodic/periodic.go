// Package periodic declares recurring jobs in code and runs them: a thin layer
// over coordd's schedules and the queue's workers. Each Job becomes a
// schedule (coord.v1.Schedules, put at start by every replica: an
// idempotent upsert), whose occurrences the cluster's leader makes into
// queue jobs, one per occurrence; each replica runs a queue Worker whose
// handler for the job's kind calls Job.Run. So an occurrence is computed
// once, by the leader, on the cluster's calendar clock (a replica's clock
// changes nothing), it is at most one queue job whatever the failovers,
// and whichever replica is free runs it, with the attempt's fencing token
// for its writes (Run.Fence). See DESIGN.md.
package periodic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/schedule"
)

// Schedule says when a job's occurrences are.
type Schedule struct {
	expr string
	tz   string
}

// Cron is a cron expression (5 fields; "@seconds" and 6 fields for a
// seconds field first: "@seconds 30 */5 * * * *") or a
// descriptor (@daily, @hourly, @every 30s) in the IANA time zone tz.
func Cron(expr, tz string) Schedule { return Schedule{expr: expr, tz: tz} }

// Every is "@every d" (real time: multiples of d since the Unix epoch;
// UTC windows at d's granularity).
func Every(d time.Duration) Schedule { return Schedule{expr: "@every " + d.String(), tz: "UTC"} }

// At is a one-shot occurrence at t; its window key is "once". It never
// starts before t: t is kept to the millisecond (coordd's unit), rounded
// up.
func At(t time.Time) Schedule {
	if r := t.Sub(t.Truncate(time.Millisecond)); r > 0 {
		t = t.Add(time.Millisecond - r)
	}
	return Schedule{expr: schedule.OncePrefix + t.UTC().Format(time.RFC3339Nano), tz: "UTC"}
}

// Concurrency is what an occurrence does while the previous one's job is
// not final (the schedule's overlap policy).
type Concurrency int

const (
	// Forbid skips the occurrence (recorded as skipped, OVERLAP): one run
	// at a time. The default.
	Forbid Concurrency = iota
	// Allow runs it anyway: runs may overlap.
	Allow
	// Replace cancels the previous job (its run's context is cancelled and
	// its fenced writes refused) and runs the new one.
	Replace
)

// DefaultQueue is the queue of jobs that name none.
const DefaultQueue = "jobs"

// Job is a recurring job declared in code.
type Job struct {
	// Name is the schedule's name and the queue jobs' kind: 1 to 128 bytes
	// of letters, digits, '.', '_', ':' and '-'.
	Name     string
	Schedule Schedule
	// Run does the work of one occurrence; ctx is cancelled when the
	// attempt's claim is lost (no heartbeat acknowledged within the
	// visibility timeout, the job cancelled by Replace) — before another
	// worker could be handed the job.
	Run func(ctx context.Context, run *Run) error
	// Window turns an occurrence into a window key (default: the
	// occurrence at the schedule's granularity in its zone). ShiftDays: -1
	// makes "the 00:05 run closes the previous business day".
	Window schedule.Window
	// Queue is the queue its jobs go to (default "jobs").
	Queue string
	// Concurrency: Forbid (default), Allow or Replace.
	Concurrency Concurrency
	// StartingDeadline: an occurrence the cluster could not make within
	// this long after its time is skipped (DEADLINE). 0: none.
	StartingDeadline time.Duration
	// CatchUp: after an outage of the cluster, occurrences up to this long
	// ago are still made (default: max(1 h, one interval)).
	CatchUp time.Duration
	// CompleteWithin: an occurrence whose job is not final by then is
	// overdue (default: one interval).
	CompleteWithin time.Duration
	// MaxAttempts per occurrence (default 25), RetryBackoff the first
	// delay after a failed attempt (default 1 s, doubling to an hour).
	MaxAttempts  int
	RetryBackoff time.Duration
	// VisibilityTimeout: an attempt whose worker stops heartbeating for
	// this long lapses and the job is handed to another (default 30 s).
	VisibilityTimeout time.Duration
	// Args are the parameters every occurrence's job carries (JSON).
	Args []byte
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// Spec is the job's schedule as PutSchedule takes it.
func (j Job) Spec() (*coordv1.ScheduleSpec, error) {
	if !nameRE.MatchString(j.Name) {
		return nil, fmt.Errorf("periodic: job name %q: 1 to 128 letters, digits, '.', '_', ':' or '-'", j.Name)
	}
	if j.Run == nil {
		return nil, fmt.Errorf("periodic: job %s has no Run function", j.Name)
	}
	if _, err := schedule.Compile(schedule.Spec{Expr: j.Schedule.expr, TimeZone: j.Schedule.tz, Window: j.Window}); err != nil {
		return nil, fmt.Errorf("periodic: job %s: %w", j.Name, err)
	}
	overlap := coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID
	switch j.Concurrency {
	case Allow:
		overlap = coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW
	case Replace:
		overlap = coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_REPLACE
	}
	return &coordv1.ScheduleSpec{
		Name: j.Name, Schedule: j.Schedule.expr, TimeZone: j.Schedule.tz, WindowLayout: j.Window.Layout,
		WindowShiftDays: int32(j.Window.ShiftDays), StartingDeadline: durationpb.New(j.StartingDeadline),
		CatchUp: durationpb.New(j.CatchUp), CompleteWithin: durationpb.New(j.CompleteWithin), Overlap: overlap,
		Job: &coordv1.JobTemplate{Queue: j.queue(), Kind: j.Name, Args: j.Args, MaxAttempts: int32(j.MaxAttempts),
			BackoffInitial: durationpb.New(j.RetryBackoff), VisibilityTimeout: durationpb.New(j.VisibilityTimeout)},
	}, nil
}

func (j Job) queue() string { return cmp.Or(j.Queue, DefaultQueue) }

// Run is one attempt at one occurrence.
type Run struct {
	Job    string
	Window string
	// Occurrence is when the occurrence was due (the cluster's calendar
	// time; for a DST gap, the end of the gap).
	Occurrence time.Time
	// Manual: made by a trigger (coordctl schedule trigger), not by the
	// schedule.
	Manual bool
	// Attempt is the attempt's number (1, 2, ... per occurrence); Token
	// its fencing token, "job:<id>:<attempt>".
	Attempt uint32
	Token   string
	job     *queue.Job
}

func newRun(j *queue.Job) (*Run, error) {
	r := &Run{Job: j.Labels[labelSchedule], Window: j.Labels[labelWindow], Attempt: j.Attempt, Token: j.Token(), job: j}
	ms, err := strconv.ParseInt(j.Labels[labelOccurrence], 10, 64)
	if r.Job == "" || r.Window == "" || err != nil {
		return nil, fmt.Errorf("%w: job %d of kind %s was not made by a schedule (labels %v)", errNotScheduled, j.ID, j.Kind, j.Labels)
	}
	r.Occurrence = time.UnixMilli(ms)
	r.Manual = strings.Contains(r.Window, schedule.ManualMark)
	return r, nil
}

// The labels a schedule's jobs carry (fsm.LabelSchedule, ...).
const (
	labelSchedule   = "coordd.schedule"
	labelWindow     = "coordd.window"
	labelOccurrence = "coordd.occurrence_ms"
)

var errNotScheduled = errors.New("periodic: not a scheduled job")

// IdempotencyKey derives a key from the occurrence:
// IdempotencyKey("store-42") is "daily-close-2026-09-25-store-42".
func (r *Run) IdempotencyKey(parts ...string) string {
	return strings.Join(append([]string{r.Job, r.Window}, parts...), "-")
}

// Resource is the occurrence's own resource for name: "name/window".
// Each occurrence is a job of its own, and a resource fenced by a job's
// attempts belongs to that job (tokens of different jobs are not
// comparable), so what an occurrence writes is fenced per occurrence:
// "scheduled/store-1/2026-09-25".
func (r *Run) Resource(name string) string { return name + "/" + r.Window }

// Fence is a FencedCommit of this attempt's token on Resource(name), with
// the key IdempotencyKey(name): accepted only while this attempt is the
// job's live one (a worker that paused past its visibility timeout is
// refused, even before its successor writes), and a repeat (a later
// attempt of the same occurrence redoing a write that got through)
// returns the first outcome instead of a second effect.
func (r *Run) Fence(ctx context.Context, name string, payload []byte) (*client.Commit, error) {
	return r.job.FencedCommit(ctx, r.Resource(name), r.IdempotencyKey(name), payload)
}

// QueueJob is the queue's job of this attempt (its id, args, labels).
func (r *Run) QueueJob() *queue.Job { return r.job }
