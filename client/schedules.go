package client

import (
	"context"
	"errors"
	"iter"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/client/internal/pages"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Schedules (coord.v1.Schedules, proto/coord/v1/schedules.proto): recurring
// jobs whose occurrences the leader makes into queue jobs, run by workers
// (client/queue). Every call goes through Raw: this client's one routing
// and retry policy. Put, pause, resume and delete are retried after an
// unknown outcome (a repeat leaves the schedule as the first left it), and
// so are the reads; a trigger is not (a repeat would be a second
// occurrence): its error then matches ErrUnknownOutcome.

// Schedules returns the generated coord.v1.Schedules client over Raw.
func (c *Client) Schedules() coordv1.SchedulesClient { return coordv1.NewSchedulesClient(c.Raw()) }

// PutSchedule creates a schedule or replaces its whole spec (an
// idempotent upsert by name: the same spec again answers Changed = false;
// fields left out take their defaults). CreateSchedule and UpdateSchedule
// do not replace what the caller did not mean to.
func (c *Client) PutSchedule(ctx context.Context, spec *coordv1.ScheduleSpec) (*coordv1.PutScheduleResponse, error) {
	return c.Schedules().PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec})
}

// CreateSchedule creates a schedule (create_only): a live schedule of that
// name with another spec is ErrScheduleExists, with the same spec the
// answer is unchanged (Created and Changed false), so a retry after an
// unknown outcome is not refused.
func (c *Client) CreateSchedule(ctx context.Context, spec *coordv1.ScheduleSpec) (*coordv1.PutScheduleResponse, error) {
	return c.Schedules().PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec, CreateOnly: true})
}

// UpdateSchedule changes a live schedule: it reads it, lets change modify
// its spec (the stored one, defaults filled in: what change leaves alone
// stays as it is), and puts the result with the revision read
// (expected_revision). When the schedule changed in between
// (ErrScheduleRevisionMismatch) it reads and changes it again, up to
// updateAttempts times. change's error ends it. A missing schedule is
// ErrNotFound, a deleted one ErrScheduleNotFound. The answer is the put's,
// with the spec before the change (before).
func (c *Client) UpdateSchedule(ctx context.Context, name string, change func(spec *coordv1.ScheduleSpec) error) (
	resp *coordv1.PutScheduleResponse, before *coordv1.ScheduleSpec, err error) {
	for range updateAttempts {
		var cur *coordv1.GetScheduleResponse
		if cur, err = c.GetSchedule(ctx, name, 1); err != nil {
			return nil, nil, err
		}
		before = cur.GetSchedule().GetSpec()
		spec := proto.CloneOf(before)
		if err = change(spec); err != nil {
			return nil, before, err
		}
		resp, err = c.Schedules().PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec, ExpectedRevision: cur.GetSchedule().GetRevision()})
		if !errors.Is(err, ErrScheduleRevisionMismatch) {
			return resp, before, err
		}
	}
	return nil, before, err
}

// updateAttempts bounds UpdateSchedule's read-change-put rounds.
const updateAttempts = 10

// GetSchedule returns a schedule (also a tombstone) with its next
// occurrences (next: how many, 0 for 5) and its recent ones with their
// jobs' states. A missing schedule is ErrNotFound.
func (c *Client) GetSchedule(ctx context.Context, name string, next int32, opts ...ReadOption) (*coordv1.GetScheduleResponse, error) {
	return c.Schedules().GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: name, Next: next, Stale: readOpts(opts).stale})
}

// ListSchedulesPage returns one page of schedules whose name starts with
// prefix (tombstones with showDeleted), by name.
func (c *Client) ListSchedulesPage(ctx context.Context, prefix string, showDeleted bool, pageToken string, pageSize int32,
	opts ...ReadOption) (*coordv1.ListSchedulesResponse, error) {
	return c.Schedules().ListSchedules(ctx, &coordv1.ListSchedulesRequest{Prefix: prefix, ShowDeleted: showDeleted,
		PageToken: pageToken, PageSize: pageSize, Stale: readOpts(opts).stale})
}

// ListSchedules iterates over every schedule whose name starts with
// prefix, page by page; it stops at the first error, which it yields.
func (c *Client) ListSchedules(ctx context.Context, prefix string, showDeleted bool, opts ...ReadOption) iter.Seq2[*coordv1.Schedule, error] {
	return pages.All(func(token string) (*coordv1.ListSchedulesResponse, error) {
		return c.ListSchedulesPage(ctx, prefix, showDeleted, token, 0, opts...)
	}, (*coordv1.ListSchedulesResponse).GetSchedules)
}

// PauseSchedule stops making occurrences.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*coordv1.PauseScheduleResponse, error) {
	return c.Schedules().PauseSchedule(ctx, &coordv1.PauseScheduleRequest{Name: name})
}

// ResumeSchedule makes occurrences again from now on (the missed ones are
// one PAUSED record).
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*coordv1.ResumeScheduleResponse, error) {
	return c.Schedules().ResumeSchedule(ctx, &coordv1.ResumeScheduleRequest{Name: name})
}

// TriggerSchedule makes an extra occurrence now. Not retried after an
// unknown outcome.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (*coordv1.TriggerScheduleResponse, error) {
	return c.Schedules().TriggerSchedule(ctx, &coordv1.TriggerScheduleRequest{Name: name})
}

// DeleteSchedule makes a schedule a tombstone (its history kept until
// retention prunes it).
func (c *Client) DeleteSchedule(ctx context.Context, name string) (*coordv1.DeleteScheduleResponse, error) {
	return c.Schedules().DeleteSchedule(ctx, &coordv1.DeleteScheduleRequest{Name: name})
}

// ListOverdue returns one page of overdue occurrences of schedules
// (schedule "" for all), oldest first; the first page also carries the
// total, the top schedules and stuck leases.
func (c *Client) ListOverdue(ctx context.Context, schedule, pageToken string, pageSize int32) (*coordv1.ListOverdueResponse, error) {
	return c.Schedules().ListOverdue(ctx, &coordv1.ListOverdueRequest{Schedule: schedule, PageToken: pageToken, PageSize: pageSize})
}
