package fsm

import (
	"strings"

	"github.com/google/btree"
)

// Reads return copies of records; callers may keep them.

// get returns a copy of the record lookup finds, read under the read
// lock; false when there is none.
func get[T any](f *FSM, lookup func(*state) *T) (T, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if r := lookup(f.st); r != nil {
		return *r, true
	}
	var zero T
	return zero, false
}

// all returns copies of every record of the tree that tree picks, in
// order, read under the read lock (nil when there is none).
func all[T any](f *FSM, tree func(*state) *btree.BTreeG[*T]) []T {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []T
	tree(f.st).Ascend(func(r *T) bool {
		out = append(out, *r)
		return true
	})
	return out
}

// page collects a page of a listing: up to limit records, and whether
// another one follows.
type page[T any] struct {
	out   []T
	limit int
	more  bool
}

// add adds r to the page, or notes that the page is full and another
// record follows. It reports whether the listing goes on.
func (p *page[T]) add(r T) bool {
	if len(p.out) == p.limit {
		p.more = true
		return false
	}
	p.out = append(p.out, r)
	return true
}

// pageFrom lists up to limit records of t from pivot on, in t's order,
// while in accepts them, leaving out those skip accepts; more reports
// whether another one follows. The caller holds the read lock.
func pageFrom[T any](t *btree.BTreeG[*T], pivot *T, limit int, in, skip func(*T) bool) (out []T, more bool) {
	p := page[T]{limit: limit}
	t.AscendGreaterOrEqual(pivot, func(r *T) bool { return in(r) && (skip(r) || p.add(*r)) })
	return p.out, p.more
}

// Lease returns the lease record and the lease time it was read at.
func (f *FSM) Lease(name string) (Lease, int64, bool) {
	var clock int64
	l, ok := get(f, func(s *state) *Lease {
		clock = s.leaseTime
		return s.lease(name)
	})
	return l, clock, ok
}

// Leases lists up to limit leases whose name has prefix, starting at the
// first name >= after (exclusive of after itself). more reports whether
// further leases follow.
func (f *FSM) Leases(prefix, after string, limit int) (out []Lease, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return pageFrom(f.st.leases, &Lease{Name: max(prefix, after)}, limit,
		func(l *Lease) bool { return strings.HasPrefix(l.Name, prefix) },
		func(l *Lease) bool { return l.Name == after })
}

// LiveLeases counts leases held at lease time now. O(n): for metrics.
func (f *FSM) LiveLeases(now int64) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	f.st.leases.Ascend(func(l *Lease) bool {
		if l.Live(now) {
			n++
		}
		return true
	})
	return n
}

// Window returns one window record.
func (f *FSM) Window(ledger, window string) (Window, bool) {
	return get(f, func(s *state) *Window { return s.window(ledger, window) })
}

// Windows lists up to limit windows of ledger after the window key after.
func (f *FSM) Windows(ledger, after string, limit int) (out []Window, more bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return pageFrom(f.st.windows, &Window{Ledger: ledger, Window: after}, limit,
		func(w *Window) bool { return w.Ledger == ledger },
		func(w *Window) bool { return after != "" && w.Window == after })
}

// Resource returns the fence state of a resource.
func (f *FSM) Resource(name string) (Resource, bool) {
	return get(f, func(s *state) *Resource { return s.resource(name) })
}

// Members returns the known gRPC addresses by server id, sorted by id.
func (f *FSM) Members() []Member {
	return all(f, func(s *state) *btree.BTreeG[*Member] { return s.members })
}

// Counts reports the number of records per family.
func (f *FSM) Counts() (leases, windows, resources, idempotency int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.leases.Len(), f.st.windows.Len(), f.st.resources.Len(), f.st.idem.Len()
}
