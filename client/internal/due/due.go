// Package due holds the two scheduling pieces the SDK's keepers share (the
// lease keeper and the queue worker's heartbeats): a min-heap of items by
// due time that knows each item's place, and a local deadline that only
// moves later.
package due

import (
	"container/heap"
	"time"

	"github.com/coordd/coordd/clock"
)

// Slot is embedded in what a Heap orders: its place in the heap. The zero
// Slot is in no heap.
type Slot struct{ pos int } // index + 1; 0: not in a heap

// Queued reports whether the item is in a heap.
func (s *Slot) Queued() bool { return s.pos > 0 }

func (s *Slot) slot() *Slot { return s }

// Item is what a Heap orders: something that embeds a Slot and is due at
// Due (which changes only while the item is out of the heap, or is
// followed by Fix or Init).
type Item interface {
	Due() time.Time
	slot() *Slot
}

// Heap is a min-heap of items by due time. An item is in one heap at most.
// The zero Heap is empty and ready.
type Heap[T Item] struct{ items items[T] }

// Len is the number of items in the heap.
func (h *Heap[T]) Len() int { return len(h.items) }

// Peek is the earliest item; the heap must not be empty.
func (h *Heap[T]) Peek() T { return h.items[0] }

// Push adds x.
func (h *Heap[T]) Push(x T) { heap.Push(&h.items, x) }

// Pop removes and returns the earliest item; the heap must not be empty.
func (h *Heap[T]) Pop() T { return heap.Pop(&h.items).(T) }

// Remove takes x out of the heap if it is in it.
func (h *Heap[T]) Remove(x T) {
	if s := x.slot(); s.Queued() {
		heap.Remove(&h.items, s.pos-1)
	}
}

// Fix restores the order after x's due time changed.
func (h *Heap[T]) Fix(x T) { heap.Fix(&h.items, x.slot().pos-1) }

// Each calls f for every item, in no particular order; f may change due
// times, then call Init.
func (h *Heap[T]) Each(f func(T)) {
	for _, x := range h.items {
		f(x)
	}
}

// Init restores the order after any number of due times changed.
func (h *Heap[T]) Init() { heap.Init(&h.items) }

// items implements heap.Interface.
type items[T Item] []T

func (h items[T]) Len() int           { return len(h) }
func (h items[T]) Less(i, j int) bool { return h[i].Due().Before(h[j].Due()) }
func (h items[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot().pos, h[j].slot().pos = i+1, j+1
}
func (h *items[T]) Push(x any) {
	t := x.(T)
	*h = append(*h, t)
	t.slot().pos = len(*h)
}
func (h *items[T]) Pop() any {
	old := *h
	t := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	t.slot().pos = 0
	return t
}

// Deadline is a local deadline: the time after which a holder considers
// what it holds lost unless an acknowledgement moved it, and the timer
// that fires then.
type Deadline struct {
	At    time.Time
	Timer clock.Timer
	clk   clock.Clock
}

// Start sets the deadline to at and has clk call f then.
func (d *Deadline) Start(clk clock.Clock, at time.Time, f func()) {
	d.At, d.clk = at, clk
	d.Timer = clock.AfterFuncAt(clk, at, f)
}

// Extend moves the deadline to at if that is later (an acknowledgement of
// a message sent at at - TTL + margin).
func (d *Deadline) Extend(at time.Time) {
	if at.After(d.At) {
		d.At = at
		clock.ResetAt(d.clk, d.Timer, at)
	}
}
