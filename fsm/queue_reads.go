package fsm

import (
	"math"
	"sort"
)

// Reads of the job queue. They return copies of records (whose byte
// slices and attempt logs are shared and must not be written), as of the
// last applied command: a claim whose deadline passed since shows running
// until the next command (the leader's dispatcher proposes one at
// NextJobDue).

// QueueJob returns a job with its recent attempts.
func (f *FSM) QueueJob(id uint64) (QueueJob, bool) {
	return get(f, func(s *state) *QueueJob { return s.qjob(id) })
}

// JobFilter selects jobs to list; zero fields match every job.
type JobFilter struct {
	Queue string
	State JobState // 0: any
	Kind  string
	Label *Label // key = value
}

func (fl JobFilter) match(j *QueueJob) bool {
	if (fl.Queue != "" && j.Queue != fl.Queue) || (fl.State != 0 && j.State != fl.State) || (fl.Kind != "" && j.Kind != fl.Kind) {
		return false
	}
	if fl.Label != nil {
		v, ok := j.label(fl.Label.Key)
		return ok && v == fl.Label.Value
	}
	return true
}

// ListQueueJobs returns up to limit jobs matching the filter with ids
// below before (0: from the newest), newest first (ids grow with
// submission); more reports whether another match follows. It walks the
// most selective index the filter has — label, kind, queue and state,
// queue, state, else all jobs — and checks the other fields on each job.
func (f *FSM) ListQueueJobs(fl JobFilter, before uint64, limit int) (out []QueueJob, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if before == 0 {
		before = math.MaxUint64
	}
	top := before - 1
	p := page[QueueJob]{limit: limit}
	visit := func(id uint64) bool {
		j := f.st.qjob(id)
		return !fl.match(j) || p.add(*j)
	}
	q := f.st.qidx
	switch {
	case fl.Label != nil:
		q.byLabel.DescendLessOrEqual(labelKey{fl.Label.Key, fl.Label.Value, top}, func(k labelKey) bool {
			return k.key == fl.Label.Key && k.value == fl.Label.Value && visit(k.id)
		})
	case fl.Kind != "":
		q.byKind.DescendLessOrEqual(queueKey{fl.Kind, top}, func(k queueKey) bool { return k.queue == fl.Kind && visit(k.id) })
	case fl.State != 0: // of one queue, or of all ("")
		q.states.descend(fl.Queue, fl.State, top, visit)
	case fl.Queue != "":
		q.byQueue.DescendLessOrEqual(queueKey{fl.Queue, top}, func(k queueKey) bool { return k.queue == fl.Queue && visit(k.id) })
	default:
		f.st.qjobs.DescendLessOrEqual(&QueueJob{ID: top}, func(j *QueueJob) bool { return visit(j.ID) })
	}
	return p.out, p.more
}

// QueueStats is one queue's job counts by state, kept as jobs move, and
// its oldest available job: the dispatch lag.
type QueueStats struct {
	Queue                                                                string
	Scheduled, Available, Running, Retryable, Succeeded, Cancelled, Dead uint64
	// OldestAvailableRunAt is the earliest run_at among available jobs (0
	// when none); OldestAvailableAgeMs is how long it has waited at the
	// calendar time asked for.
	OldestAvailableRunAt int64
	OldestAvailableAgeMs int64
	// Deliveries: of the available jobs, those with a target (the
	// delivery lane's; pull workers' fetches never take them, and the
	// oldest available job is that of the others).
	Deliveries uint64
	// Pause is set while the queue is paused (queue_pause.go).
	Pause *QueuePause
	QueueCounters
}

// QueueStats returns the stats of queue, or of every queue with jobs
// (sorted by name) when queue is "", with ages at calendar time cal.
// Counts are O(1) per queue; the oldest available job costs one index seek
// per distinct priority present.
func (f *FSM) QueueStats(queue string, cal int64) []QueueStats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q := f.st.qidx
	var names []string
	if queue != "" {
		if _, ok := q.stats[queue]; ok || f.st.queuePaused(queue) {
			names = []string{queue}
		}
	} else {
		for name := range q.stats {
			names = append(names, name)
		}
		f.st.qops.pauses.Ascend(func(p *QueuePause) bool {
			if _, ok := q.stats[p.Queue]; !ok {
				names = append(names, p.Queue)
			}
			return true
		})
		sort.Strings(names)
	}
	out := make([]QueueStats, 0, len(names))
	for _, name := range names {
		c := q.stats[name]
		if c == nil {
			c = &queueCounts{} // paused, without jobs
		}
		st := QueueStats{Queue: name, Scheduled: c.states[JobScheduled], Available: c.states[JobAvailable],
			Running: c.states[JobRunning], Retryable: c.states[JobRetryable], Succeeded: c.states[JobSucceeded],
			Cancelled: c.states[JobCancelled], Dead: c.states[JobDead], Deliveries: c.deliveries, QueueCounters: c.QueueCounters}
		if p, ok := f.st.qops.pauses.Get(&QueuePause{Queue: name}); ok {
			st.Pause = p
		}
		if at, ok := q.oldestAvailable(name); ok {
			st.OldestAvailableRunAt, st.OldestAvailableAgeMs = at, max(0, cal-at)
		}
		out = append(out, st)
	}
	return out
}

// availHead is the first available job of queue at or after key.
func (q *queueIndex) availHead(queue string, key availKey) (head availKey, ok bool) {
	q.avail.AscendGreaterOrEqual(key, func(a availKey) bool {
		head, ok = a, a.queue == queue
		return false
	})
	return head, ok
}

// oldestAvailable is the earliest run_at among queue's available jobs:
// the head of each priority's run is its earliest, so one seek per
// priority present.
func (q *queueIndex) oldestAvailable(queue string) (int64, bool) {
	best, found := int64(0), false
	key := availKey{queue: queue, prio: math.MaxInt32}
	for {
		head, ok := q.availHead(queue, key)
		if !ok {
			return best, found
		}
		if !found || head.runAt < best {
			best, found = head.runAt, true
		}
		if head.prio == math.MinInt32 {
			return best, found
		}
		key = availKey{queue: queue, prio: head.prio - 1, runAt: math.MinInt64}
	}
}

// NextJobDue is the earliest calendar time at which the queue changes by
// itself: a scheduled or retryable job becomes due, or a claim's
// visibility deadline passes. The leader's dispatcher sleeps until then
// and proposes a command (a tick) so the change is applied. A queue
// whose rate limit holds back its available jobs counts too: its bucket's
// next token (queue_limits.go), so the long polls look again then.
func (f *FSM) NextJobDue() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	d, okD := f.st.qidx.due.Min()
	r, okR := f.st.qidx.running.Min()
	if t, ok := f.st.nextRefill(); ok {
		if !okD || t < d.at {
			d, okD = timeKey{at: t}, true
		}
	}
	switch {
	case okD && okR:
		return min(d.at, r.at), true
	case okD:
		return d.at, true
	case okR:
		return r.at, true
	}
	return 0, false
}

// JobsReady reports whether a fetch from queues at calendar time cal
// could hand something out: a job is available there, or some job is due
// that no command has made available yet. For long polls; a true answer
// may still fetch nothing.
func (f *FSM) JobsReady(queues []string, cal int64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, q := range queues {
		if q == DeliveryLane && f.st.qidx.deliver.Len() > 0 {
			return true
		}
		if _, ok := f.st.qidx.fetchHead(q); ok && (f.st.queueLimits(q) == nil || f.st.fetchable(q, cal, 1) > 0) {
			return true
		}
	}
	if d, ok := f.st.qidx.due.Min(); ok && d.at <= cal {
		return true
	}
	return false
}

// DeliveriesAvailable is the number of available jobs with a target, of
// every queue: what the delivery lane holds.
func (f *FSM) DeliveriesAvailable() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.qidx.deliver.Len()
}

// QueueJobCount is the number of jobs in the queue family (all states).
func (f *FSM) QueueJobCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.qjobs.Len()
}
