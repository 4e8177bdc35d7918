package periodic

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/client/queue"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/schedule"
)

func noop(context.Context, *Run) error { return nil }

func TestSpecValidation(t *testing.T) {
	for _, j := range []Job{
		{Schedule: Cron("@daily", "UTC"), Run: noop},
		{Name: "a/b", Schedule: Cron("@daily", "UTC"), Run: noop},
		{Name: "x", Schedule: Cron("@daily", "UTC")},
		{Name: "x", Schedule: Cron("bad", "UTC"), Run: noop},
		{Name: "x", Schedule: Cron("@daily", "No/Such_Zone"), Run: noop},
		{Name: "x", Schedule: Cron("@daily", "UTC"), Window: schedule.Window{ShiftDays: 1000}, Run: noop},
	} {
		if _, err := j.Spec(); err == nil {
			t.Errorf("%+v gave a spec", j)
		}
	}
	r := NewRunner(nil)
	if err := r.Add(Job{Name: "x", Schedule: Every(time.Minute), Run: noop}); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(Job{Name: "x", Schedule: Every(time.Hour), Run: noop}); err == nil {
		t.Fatal("added a job twice")
	}
}

// A job is a schedule whose jobs have the job's name as their kind.
func TestSpecOfAJob(t *testing.T) {
	spec, err := Job{Name: "daily-close", Schedule: Cron("5 0 * * *", "America/Sao_Paulo"), Window: schedule.Window{ShiftDays: -1},
		Concurrency: Replace, StartingDeadline: time.Hour, CatchUp: 6 * time.Hour, CompleteWithin: 2 * time.Hour,
		MaxAttempts: 3, RetryBackoff: 30 * time.Second, VisibilityTimeout: 10 * time.Second, Args: []byte(`{"stores":4}`), Run: noop}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	want := &coordv1.ScheduleSpec{Name: "daily-close", Schedule: "5 0 * * *", TimeZone: "America/Sao_Paulo", WindowShiftDays: -1,
		StartingDeadline: pbtime.Dur(3_600_000), CatchUp: pbtime.Dur(21_600_000), CompleteWithin: pbtime.Dur(7_200_000),
		Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_REPLACE,
		Job: &coordv1.JobTemplate{Queue: "jobs", Kind: "daily-close", Args: []byte(`{"stores":4}`), MaxAttempts: 3,
			BackoffInitial: pbtime.Dur(30_000), VisibilityTimeout: pbtime.Dur(10_000)}}
	if !proto.Equal(spec, want) {
		t.Fatalf("spec %v\nwant %v", spec, want)
	}
	every, _ := Job{Name: "tick", Schedule: Every(30 * time.Second), Queue: "ops", Run: noop}.Spec()
	if every.GetSchedule() != "@every 30s" || every.GetJob().GetQueue() != "ops" ||
		every.GetOverlap() != coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID {
		t.Fatalf("every: %v", every)
	}
}

// At never starts before t: kept to the millisecond, rounded up.
func TestAtRoundsUp(t *testing.T) {
	at := At(time.Date(2026, 9, 25, 10, 0, 0, 712_300_000, time.UTC))
	if at.expr != "@once 2026-09-25T10:00:00.713Z" {
		t.Fatalf("%q", at.expr)
	}
}

// A run is read from the labels the schedule puts on its jobs.
func TestRunFromTheJobsLabels(t *testing.T) {
	qj := &queue.Job{ID: 7, Kind: "daily-close", Attempt: 2, Labels: map[string]string{
		labelSchedule: "daily-close", labelWindow: "2026-09-25", labelOccurrence: "1790391900000"}}
	run, err := newRun(qj)
	if err != nil {
		t.Fatal(err)
	}
	if run.Job != "daily-close" || run.Window != "2026-09-25" || !run.Occurrence.Equal(time.UnixMilli(1_790_391_900_000)) ||
		run.Attempt != 2 || run.Token != "job:7:2" || run.Manual || run.QueueJob() != qj {
		t.Fatalf("run %+v", run)
	}
	if k := run.IdempotencyKey("store-42"); k != "daily-close-2026-09-25-store-42" {
		t.Fatalf("key %s", k)
	}
	if r := run.Resource("scheduled/store-1"); r != "scheduled/store-1/2026-09-25" {
		t.Fatalf("resource %s", r)
	}
	qj.Labels[labelWindow] = "2026-09-25/manual-1790391900123"
	if run, _ := newRun(qj); !run.Manual {
		t.Fatal("a triggered occurrence is manual")
	}
	if _, err := newRun(&queue.Job{ID: 8, Kind: "daily-close"}); !errors.Is(err, errNotScheduled) {
		t.Fatalf("a job without the labels: %v", err)
	}
}
