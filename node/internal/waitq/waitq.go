// Package waitq is the line of callers waiting on the leader, in arrival
// order: the waiting acquires of one lease name (node/waiters.go) and the
// long-polling fetches (node/queue.go) are each one Queue.
//
// A caller joins with Push and waits on its Waiter: Done receives the one
// outcome the serving side delivers (a handoff, a fetch's jobs), Woken a
// hint to look again. A caller that stops waiting (its context ended, its
// wait ran out, leadership was lost) calls Leave, which settles the race
// with a delivery: either it is out of the line and nothing will be
// delivered, or the outcome was delivered already (it is in Done), or the
// serving side has claimed it (Claim: an outcome is being produced, such
// as a fetch in flight), and the claim's end delivers its outcome, the
// last. Leaving the head of the line wakes the next caller: it may be its
// turn now.
package waitq

import "sync"

// Queue is one line of waiters. The zero value is empty and ready.
type Queue[T, R any] struct {
	mu   sync.Mutex
	line []*Waiter[T, R]
}

// Waiter is one caller in a Queue, carrying Value (what it waits for).
type Waiter[T, R any] struct {
	Value T
	q     *Queue[T, R]
	wake  chan struct{} // buffered 1
	done  chan R        // buffered 1: a delivery never blocks
	// Guarded by q.mu.
	inLine    bool
	claimed   bool // the serving side is producing its outcome
	left      bool // the caller stopped waiting; a claim's outcome is its last
	abandoned bool // the caller will not read its outcome
	delivered bool // an outcome is in done
}

// Status is what Leave found.
type Status int

const (
	Removed   Status = iota // out of the line; nothing will be delivered
	Delivered               // the outcome is in Done
	Claimed                 // its claim's outcome will be delivered when the claim ends
)

// Push puts a caller with v at the end of the line.
func (q *Queue[T, R]) Push(v T) *Waiter[T, R] {
	w := &Waiter[T, R]{Value: v, q: q, wake: make(chan struct{}, 1), done: make(chan R, 1), inLine: true}
	q.mu.Lock()
	q.line = append(q.line, w)
	q.mu.Unlock()
	return w
}

// Len is the number of callers in the line (claimed ones included).
func (q *Queue[T, R]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.line)
}

// First is the longest-waiting caller, or nil.
func (q *Queue[T, R]) First() *Waiter[T, R] {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.line) == 0 {
		return nil
	}
	return q.line[0]
}

// WakeAll tells every caller in the line to look again.
func (q *Queue[T, R]) WakeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.line {
		w.Wake()
	}
}

// Any reports whether a caller still waiting (not left) has a value match
// accepts. match runs with the queue locked and must not call it.
func (q *Queue[T, R]) Any(match func(T) bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.line {
		if !w.left && match(w.Value) {
			return true
		}
	}
	return false
}

// Claim walks the callers neither claimed nor left, in arrival order, and
// claims those pick accepts; it returns them in that order. pick runs with
// the queue locked and must not call it.
func (q *Queue[T, R]) Claim(pick func(T) bool) []*Waiter[T, R] {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*Waiter[T, R]
	for _, w := range q.line {
		if !w.claimed && !w.left && pick(w.Value) {
			w.claimed = true
			out = append(out, w)
		}
	}
	return out
}

// removeLocked takes w out of the line; when it was first, the new first
// is woken.
func (q *Queue[T, R]) removeLocked(w *Waiter[T, R]) {
	if !w.inLine {
		return
	}
	w.inLine = false
	for i, x := range q.line {
		if x == w {
			q.line = append(q.line[:i:i], q.line[i+1:]...)
			if i == 0 && len(q.line) > 0 {
				q.line[0].Wake()
			}
			return
		}
	}
}

func (w *Waiter[T, R]) deliverLocked(r R) {
	w.q.removeLocked(w)
	w.delivered = true
	w.done <- r
}

// Wake tells w to look again (Woken receives).
func (w *Waiter[T, R]) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Woken receives after Wake.
func (w *Waiter[T, R]) Woken() <-chan struct{} { return w.wake }

// Done receives w's outcome.
func (w *Waiter[T, R]) Done() <-chan R { return w.done }

// Deliver ends w's wait with r: out of the line, r in Done. It reports
// false, delivering nothing, when w left or already has an outcome.
func (w *Waiter[T, R]) Deliver(r R) bool {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	if w.delivered || !w.inLine {
		return false
	}
	w.deliverLocked(r)
	return true
}

// Leave is the caller's: it stops waiting. See Status.
func (w *Waiter[T, R]) Leave() Status {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.leaveLocked()
}

// Abandon is Leave by a caller that will not read an outcome delivered
// later (Unclaim reports it).
func (w *Waiter[T, R]) Abandon() Status {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	w.abandoned = true
	return w.leaveLocked()
}

func (w *Waiter[T, R]) leaveLocked() Status {
	switch {
	case w.delivered:
		return Delivered
	case w.claimed:
		w.left = true
		return Claimed
	default:
		w.left = true
		w.q.removeLocked(w)
		return Removed
	}
}

// Unclaim ends the serving side's claim on w with outcome r: final, or a
// caller that left, delivers r; otherwise w keeps its place in the line
// (the claim produced nothing, as a fetch that came back empty).
// abandoned reports a delivery to a caller that will not read it.
func (w *Waiter[T, R]) Unclaim(r R, final bool) (delivered, abandoned bool) {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	w.claimed = false
	if w.delivered || !(final || w.left) {
		return false, false
	}
	w.deliverLocked(r)
	return true, w.abandoned
}
