package fsm

import (
	"sort"

	"github.com/google/btree"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// prune applies the retention policy: completed windows and idempotency
// records older than the cutoff go, and finished queue jobs by their own
// calendar cutoff and count limit (queue_prune.go). Leases are never
// pruned (G1). The queues
// are in apply order, which is time order because the clock never goes back,
// so a prune costs what it removes.
func (s *state) prune(c *fsmv1.Prune) any {
	cutoff := c.GetCutoffMs()
	var res PruneResult
	for len(s.completedQ) > 0 {
		k := s.completedQ[0]
		w := s.window(k.ledger, k.window)
		if w != nil && w.Completed && w.CompletedAt >= cutoff {
			break
		}
		if w != nil && w.Completed {
			s.windows.Delete(w)
			s.emitWindow(EventDelete, w)
			res.Windows++
		}
		s.completedQ = s.completedQ[1:]
	}
	for len(s.idemQ) > 0 {
		k := s.idemQ[0]
		r := s.idempotency(k.resource, k.key)
		if r != nil && r.At >= cutoff {
			break
		}
		if r != nil {
			s.idem.Delete(r)
			res.Idempotency++
		}
		s.idemQ = s.idemQ[1:]
	}
	res.Jobs = s.pruneJobs(c.GetJobsCutoffMs(), c.GetMaxFinishedJobs())
	res.Schedules = s.pruneSchedules(c.GetJobsCutoffMs())
	if cap(s.completedQ) > 1024 && len(s.completedQ) < cap(s.completedQ)/4 {
		s.completedQ = append([]windowKey(nil), s.completedQ...)
	}
	if cap(s.idemQ) > 1024 && len(s.idemQ) < cap(s.idemQ)/4 {
		s.idemQ = append([]idemKey(nil), s.idemQ...)
	}
	return &res
}

// rebuildQueues derives the prune queues from the trees after a restore.
func (s *state) rebuildQueues() {
	s.completedQ = timeOrder(s.windows, func(w *Window) (int64, windowKey, bool) {
		return w.CompletedAt, windowKey{w.Ledger, w.Window}, w.Completed
	})
	s.idemQ = timeOrder(s.idem, func(r *Idempotency) (int64, idemKey, bool) {
		return r.At, idemKey{r.Resource, r.Key}, true
	})
}

// timeOrder returns the keys of the records of t that key accepts, in the
// order of their times (records of equal times in t's order).
func timeOrder[T, K any](t *btree.BTreeG[T], key func(T) (at int64, k K, ok bool)) []K {
	type timed struct {
		at int64
		k  K
	}
	var ts []timed
	t.Ascend(func(r T) bool {
		if at, k, ok := key(r); ok {
			ts = append(ts, timed{at, k})
		}
		return true
	})
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].at < ts[j].at })
	out := make([]K, len(ts))
	for i := range ts {
		out[i] = ts[i].k
	}
	return out
}
