package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/coordd/coordd/clock"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Tick appends a Tick at once when a leadership begins (the followers'
// clocks move to the new term's base) and then whenever nothing was
// proposed for Interval: the applied clock never lags the leader's by more
// than 1.5 intervals (its ticker runs at half the interval).
type Tick struct {
	Clock    clock.Clock
	Log      *slog.Logger
	Interval time.Duration
}

func (*Tick) Name() string { return "tick" }

func (t *Tick) Run(ctx context.Context, l Leadership) error {
	if _, err := l.Propose(ctx, &fsmv1.Tick{}); err != nil && ctx.Err() == nil {
		t.Log.Warn("first tick failed", "err", err)
	}
	return Every(ctx, t.Clock, t.Interval/2, func() {
		if l.LeaseTime()-l.LastStamp() < t.Interval.Milliseconds() {
			return
		}
		if _, err := l.Propose(ctx, &fsmv1.Tick{}); err != nil && ctx.Err() == nil {
			t.Log.Warn("tick failed", "err", err)
		}
	})
}
