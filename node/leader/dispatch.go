package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/coordd/coordd/clock"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Dispatch proposes a Tick whenever calendar time reaches NextDue — the
// FSM's earliest run_at of a scheduled or retryable job, or earliest
// visibility deadline of a running attempt — so due jobs become available
// and lapsed claims end on time with nothing else proposed, and nothing
// scans the jobs. It sleeps on Clock until then, or until Poke (a
// committed command may have moved NextDue). A failed tick is tried again
// after Retry.
type Dispatch struct {
	Clock   clock.Clock
	Log     *slog.Logger
	NextDue func() (calendarMs int64, ok bool)
	Retry   time.Duration
	Waker
}

func (*Dispatch) Name() string { return "dispatch" }

func (d *Dispatch) Run(ctx context.Context, l Leadership) error {
	timer := d.Clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		// The sleep ends at an instant of the clock read before the
		// calendar time: a clock that moves between the two readings makes
		// it early (a wasted look), never late.
		base := d.Clock.Now()
		due, ok := d.NextDue()
		cal := l.CalendarTime()
		if ok && due <= cal {
			if _, err := l.Propose(ctx, &fsmv1.Tick{}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				d.Log.Warn("queue dispatch tick failed; retrying", "err", err, "due", due)
				timer.Reset(d.Retry)
				select {
				case <-ctx.Done():
					return nil
				case <-timer.C():
				}
			}
			continue
		}
		var fire <-chan time.Time
		if ok {
			clock.ResetAt(d.Clock, timer, base.Add(time.Duration(due-cal)*time.Millisecond))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-fire:
		case <-d.C():
			timer.Stop()
		}
	}
}
