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

// BulkIdle is the longest the bulk service sleeps while no operation is
// in progress: a fallback, since a start on this leader wakes it at once
// and a new leader looks first thing. It differs from the other services'
// idle periods so that tests in virtual time can tell their timers apart.
const BulkIdle = 5 * time.Second

// BulkBatch is the most jobs one StepBulkJobs acts on (one log entry).
const BulkBatch = fsm.MaxJobBatch

var bulkBackoff = backoff.Policy{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// Bulk applies the bulk operations in progress (fsm/queue_bulk.go): for
// each, one StepBulkJobs from its replicated cursor at a time, until it is
// finished, taking turns between operations. A new leader resumes at the
// cursor the log holds; a step proposed by a deposed leader, or repeated
// after an unknown outcome, names an old cursor and changes nothing.
type Bulk struct {
	Clock clock.Clock
	Log   *slog.Logger
	// Running lists the operations in progress.
	Running func() []fsm.BulkOp
	// Done reports a committed step (metrics, logs); may be nil.
	Done func(op fsm.BulkOp)
	Waker
}

func (*Bulk) Name() string { return "bulk" }

func (b *Bulk) Run(ctx context.Context, l Leadership) error {
	retry := backoff.New(bulkBackoff)
	timer := b.Clock.NewTimer(BulkIdle)
	defer timer.Stop()
	for ctx.Err() == nil {
		ops := b.Running()
		failed := false
		for _, op := range ops {
			res, err := l.Propose(ctx, &fsmv1.StepBulkJobs{OpId: op.ID, Cursor: op.Cursor, Max: BulkBatch})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				b.Log.Warn("bulk step failed; retrying", "op", op.ID, "cursor", op.Cursor, "err", err)
				failed = true
				break
			}
			if r, ok := res.(*fsm.BulkResult); ok && b.Done != nil && !r.Stale {
				b.Done(r.Op)
			}
		}
		var wait time.Duration
		switch {
		case failed:
			wait = retry.Next()
		case len(ops) > 0:
			retry.Reset()
			continue
		default:
			wait = BulkIdle
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		case <-b.C():
			timer.Stop()
		}
	}
	return nil
}
