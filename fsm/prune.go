package fsm

import (
	"sort"

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
		w := s.window(k.job, k.window)
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
	type wq struct {
		at int64
		k  windowKey
	}
	var ws []wq
	s.windows.Ascend(func(w *Window) bool {
		if w.Completed {
			ws = append(ws, wq{w.CompletedAt, windowKey{w.Job, w.Window}})
		}
		return true
	})
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].at < ws[j].at })
	s.completedQ = make([]windowKey, len(ws))
	for i := range ws {
		s.completedQ[i] = ws[i].k
	}
	type iq struct {
		at int64
		k  idemKey
	}
	var is []iq
	s.idem.Ascend(func(r *Idempotency) bool {
		is = append(is, iq{r.At, idemKey{r.Resource, r.Key}})
		return true
	})
	sort.SliceStable(is, func(i, j int) bool { return is[i].at < is[j].at })
	s.idemQ = make([]idemKey, len(is))
	for i := range is {
		s.idemQ[i] = is[i].k
	}
}
