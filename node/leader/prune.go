package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Prune proposes the retention prune every Interval: completed windows and
// idempotency records older than Retention on lease time, finished jobs
// older than JobRetention on calendar time and beyond MaxFinishedJobs. The
// FSM removes them on every replica alike.
type Prune struct {
	Clock           clock.Clock
	Log             *slog.Logger
	Interval        time.Duration
	Retention       time.Duration
	JobRetention    time.Duration
	MaxFinishedJobs uint64
}

func (*Prune) Name() string { return "prune" }

func (p *Prune) Run(ctx context.Context, l Leadership) error {
	return Every(ctx, p.Clock, p.Interval, func() {
		res, err := l.Propose(ctx, &fsmv1.Prune{CutoffMs: l.LeaseTime() - p.Retention.Milliseconds(),
			JobsCutoffMs: l.CalendarTime() - p.JobRetention.Milliseconds(), MaxFinishedJobs: p.MaxFinishedJobs})
		if err != nil {
			if ctx.Err() == nil {
				p.Log.Warn("prune failed", "err", err)
			}
			return
		}
		if r, ok := res.(*fsm.PruneResult); ok && r.Windows+r.Idempotency+r.Jobs > 0 {
			p.Log.Info("retention pruned records", "windows", r.Windows, "idempotency_records", r.Idempotency,
				"older_than", p.Retention, "finished_jobs", r.Jobs, "jobs_older_than", p.JobRetention,
				"max_finished_jobs", p.MaxFinishedJobs)
		}
	})
}
