package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/backoff"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// MaterialiseIdle is the longest the materialiser sleeps without looking
// at the next-due index (a create or resume on this leader wakes it at
// once; this bounds the delay for one that did not pass through here).
const MaterialiseIdle = time.Second

// materialiseBackoff spaces the retries of a failed MaterialiseSchedules.
var materialiseBackoff = backoff.Policy{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// RoundFunc computes, at calendar time now, the items of the schedules
// due then (node/schedules.go); more: a bound was hit, another round
// should follow at once.
type RoundFunc func(now int64) (items []*fsmv1.ScheduleMaterialisation, more bool)

// Materialise turns the due occurrences of schedules into queue jobs, on
// calendar time: each round proposes ONE MaterialiseSchedules for all the
// schedules due (node/DESIGN.md, "Schedules: the materialiser"), then
// sleeps until the earliest next due time (NextDue), at most
// MaterialiseIdle, or until Poke (a put, resume or trigger on this
// leader: a schedule may be due sooner).
type Materialise struct {
	Clock clock.Clock
	Log   *slog.Logger
	// Rounds returns the round function of one term (its own caches).
	Rounds func() RoundFunc
	// NextDue is the earliest next due time of any schedule.
	NextDue func() (calendarMs int64, ok bool)
	// Done counts what a committed round did (metrics); may be nil.
	Done func(items []*fsmv1.ScheduleMaterialisation, res *fsm.MaterialiseResult, now int64)
	Waker
}

func (*Materialise) Name() string { return "materialise" }

func (m *Materialise) Run(ctx context.Context, l Leadership) error {
	round := m.Rounds()
	retry := backoff.New(materialiseBackoff)
	for ctx.Err() == nil {
		// The round and the sleep after it reckon from one calendar reading,
		// now; the sleep ends at an instant of the clock read before it, so
		// a clock that moves meanwhile makes the next round early (it finds
		// nothing and sleeps again), never late.
		base := m.Clock.Now()
		now := l.CalendarTime()
		items, more := round(now)
		if len(items) > 0 {
			res, err := l.Propose(ctx, &fsmv1.MaterialiseSchedules{Items: items})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				d := retry.Next()
				m.Log.Warn("materialising schedules failed; retrying", "schedules", len(items), "err", err, "in", d)
				if !m.sleep(ctx, d) {
					return nil
				}
				continue
			}
			retry.Reset()
			if r, ok := res.(*fsm.MaterialiseResult); ok && m.Done != nil {
				m.Done(items, r, l.CalendarTime())
			}
		}
		if more {
			continue
		}
		wait := MaterialiseIdle
		if next, ok := m.NextDue(); ok {
			wait = min(wait, time.Duration(next-now)*time.Millisecond)
		}
		if wait <= 0 {
			if len(items) > 0 {
				continue // due again at once (more to catch up, or a stale item)
			}
			// Due at the round's calendar time and still nothing made: only
			// schedules that do not compile here are due.
			wait = MaterialiseIdle
		}
		if !m.sleepUntil(ctx, base.Add(wait)) {
			return nil
		}
	}
	return nil
}

// sleep waits d on the clock, or until Poke; false when ctx ended.
func (m *Materialise) sleep(ctx context.Context, d time.Duration) bool {
	return m.sleepUntil(ctx, m.Clock.Now().Add(d))
}

// sleepUntil waits until the instant at of the clock, or until Poke;
// false when ctx ended.
func (m *Materialise) sleepUntil(ctx context.Context, at time.Time) bool {
	t := clock.NewTimerAt(m.Clock, at)
	defer t.Stop()
	select {
	case <-t.C():
	case <-m.C():
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}
