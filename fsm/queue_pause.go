package fsm

import (
	"math"

	"github.com/google/btree"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Paused queues (PauseQueue): while a queue is paused no fetch hands out
// its jobs — a pull worker's fetch skips it, and its available jobs with
// a target leave the delivery lane for the queue's own index (where only
// a pull fetch of an unpaused queue would look), so the deliverers do not
// see them either. Everything else goes on: submits, heartbeats,
// completions, failures, lapses, due times, cancel and retry. A resumed
// queue's jobs are taken by fetches as they come (no burst: nothing is
// handed out by the resume itself). A paused queue is a record (who, when:
// calendar ms) in the snapshot; a resume deletes it.

// QueuePause is a paused queue. Records are immutable once stored.
type QueuePause struct {
	Queue    string
	PausedBy string
	PausedAt int64 // calendar ms
}

func lessQueuePause(a, b *QueuePause) bool { return a.Queue < b.Queue }

// PauseResult is the outcome of a PauseQueue: the queue's pause record
// after it (nil: not paused), and whether the command changed nothing
// (Already: paused before a pause, or not paused before a resume).
type PauseResult struct {
	Pause   *QueuePause
	Already bool
}

// queueOps holds the operators' records of the queue: paused queues and
// bulk operations (queue_bulk.go). Replicated (in snapshots); cloned with
// the state.
type queueOps struct {
	pauses *btree.BTreeG[*QueuePause]
	bulks  *btree.BTreeG[*BulkOp]
}

func newQueueOps() *queueOps {
	return &queueOps{pauses: btree.NewG(btreeDegree, lessQueuePause), bulks: btree.NewG(btreeDegree, lessBulkOp)}
}

func (o *queueOps) clone() *queueOps {
	return &queueOps{pauses: o.pauses.Clone(), bulks: o.bulks.Clone()}
}

func (s *state) queuePaused(queue string) bool {
	if s.qops.pauses.Len() == 0 {
		return false
	}
	_, ok := s.qops.pauses.Get(&QueuePause{Queue: queue})
	return ok
}

// pauseQueue pauses or resumes a queue. Pausing a paused queue keeps who
// paused it first and when (Already).
func (s *state) pauseQueue(cal int64, c *fsmv1.PauseQueue) any {
	q := c.GetQueue()
	if q == "" || len(q) > MaxQueueNameBytes || TextProblem(q) != "" {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "queue"}, "a queue name is 1 to %d bytes of UTF-8 without control characters", MaxQueueNameBytes)
	}
	old, was := s.qops.pauses.Get(&QueuePause{Queue: q})
	if c.GetPaused() {
		if was {
			return &PauseResult{Pause: old, Already: true}
		}
		rec := &QueuePause{Queue: q, PausedBy: c.GetIdentity(), PausedAt: cal}
		s.reindexDeliveries(q, func() { s.qops.pauses.ReplaceOrInsert(rec) })
		return &PauseResult{Pause: rec}
	}
	if !was {
		return &PauseResult{Already: true}
	}
	s.reindexDeliveries(q, func() { s.qops.pauses.Delete(old) })
	return &PauseResult{}
}

// reindexDeliveries moves queue's available jobs with a target between
// the delivery lane and the queue's own index around change (a pause or
// a resume), since queueIndex.dynamic places them by whether the queue is
// paused. It costs the queue's available jobs.
func (s *state) reindexDeliveries(queue string, change func()) {
	var ids []uint64
	if s.qidx.counts(queue).deliveries > 0 {
		s.qidx.states.ascend(queue, JobAvailable, 0, func(id uint64) bool {
			ids = append(ids, id)
			return true
		})
	}
	var moved []*QueueJob
	for _, id := range ids {
		if j := s.qjob(id); j.Target != nil {
			s.qidx.removeDynamic(j)
			moved = append(moved, j)
		}
	}
	change()
	s.qidx.paused = s.pausedSet()
	for _, j := range moved {
		s.qidx.addDynamic(j)
	}
}

// pausedSet is the set of paused queues, for the index (nil when none).
func (s *state) pausedSet() map[string]bool {
	if s.qops.pauses.Len() == 0 {
		return nil
	}
	m := make(map[string]bool, s.qops.pauses.Len())
	s.qops.pauses.Ascend(func(p *QueuePause) bool {
		m[p.Queue] = true
		return true
	})
	return m
}

// QueuePauses lists the paused queues by name (queue "": all).
func (f *FSM) QueuePauses(queue string) []QueuePause {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []QueuePause
	f.st.qops.pauses.Ascend(func(p *QueuePause) bool {
		if queue == "" || p.Queue == queue {
			out = append(out, *p)
		}
		return true
	})
	return out
}

// QueuePaused reports whether queue is paused.
func (f *FSM) QueuePaused(queue string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.queuePaused(queue)
}

// fetchable reports whether a pull fetch may take queue's jobs.
func (q *queueIndex) fetchable(queue string) bool { return !q.paused[queue] }

// pausedHead is availHead for a fetch: nothing in a paused queue.
func (q *queueIndex) fetchHead(queue string) (availKey, bool) {
	if !q.fetchable(queue) {
		return availKey{}, false
	}
	return q.availHead(queue, availKey{queue: queue, prio: math.MaxInt32})
}

func queuePauseRecord(p *QueuePause) *fsmv1.QueuePauseRecord {
	return &fsmv1.QueuePauseRecord{Queue: p.Queue, PausedBy: p.PausedBy, PausedAtMs: p.PausedAt}
}
