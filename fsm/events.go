package fsm

import (
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/google/btree"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Change events: every change of a replicated record is an output of Apply,
// in the order it was made. They are a function of the state and the
// command only (no clock, no map order), so every replica emits the same
// events for the same entry, numbered alike by the node (log index and
// position within the entry). See DESIGN.md "Change events".

// Family is the kind of record an event is about: a coord.v1.WatchFamily.
type Family = coordv1.WatchFamily

// EventKind is what happened to the record: a coord.v1.WatchEventKind.
type EventKind = coordv1.WatchEventKind

// Event is one change of a record.
type Event struct {
	Family Family
	Kind   EventKind
	Key    string
	// Record is the record after the change (PUT), the expired lease
	// (EXPIRE) or the last state of a removed record (DELETE): a *Lease,
	// *Window, *Resource, *Job or *QueueJob. It is the record stored in the
	// state, shared: never modify it.
	Record any
	// At and Cal are the lease time and calendar time of the command that
	// made the change.
	At, Cal int64
}

// Size estimates the memory an event keeps alive (for bounding rings).
func (e *Event) Size() int {
	n := 64 + len(e.Key)
	switch r := e.Record.(type) {
	case *Lease:
		n += 112 + len(r.Name) + len(r.Owner) + len(r.RequestID) + len(r.Identity) + len(r.Value)
	case *Window:
		n += 112 + len(r.Ledger) + len(r.Window) + len(r.LeaseName) + len(r.Owner) + len(r.Result)
	case *Resource:
		n += 80 + len(r.Name) + len(r.LeaseName) + len(r.LastIdempotencyKey)
	case *RegistryJob:
		n += 160 + len(r.Name) + len(r.Schedule) + len(r.TimeZone) + len(r.WindowLayout) + len(r.RegisteredBy) + len(r.LastCompletedWindow)
	case *QueueJob:
		n += 224 + len(r.Queue) + len(r.Kind) + len(r.UniqueKey) + len(r.Identity) + len(r.Args)
		for _, l := range r.Labels {
			n += 32 + len(l.Key) + len(l.Value)
		}
		for _, a := range r.Log {
			n += 96 + len(a.WorkerID) + len(a.Identity) + len(a.Error) + len(a.Result)
		}
	}
	return n
}

// Keys of the families: what a watch prefix matches.

// WindowEventKey is the key of a window: "ledger/window".
func WindowEventKey(ledger, window string) string { return ledger + "/" + window }

// QueueJobEventKey is the key of a queued job: "queue/id", made with one
// allocation (one per change of a job, on every node).
func QueueJobEventKey(queue string, id uint64) string {
	var buf [64]byte
	return string(strconv.AppendUint(append(append(buf[:0], queue...), '/'), id, 10))
}

// emit records a change made by the command being applied. It costs
// nothing while nobody collects events.
func (s *state) emit(f Family, k EventKind, key string, rec any) {
	if !s.emitting {
		return
	}
	s.events = append(s.events, Event{Family: f, Kind: k, Key: key, Record: rec, At: s.leaseTime, Cal: s.calendarTime})
}

func (s *state) emitLease(k EventKind, l *Lease) { s.emit(FamilyLease, k, l.Name, l) }

func (s *state) emitWindow(k EventKind, w *Window) {
	if s.emitting {
		s.emit(FamilyWindow, k, WindowEventKey(w.Ledger, w.Window), w)
	}
}

func (s *state) emitResource(r *Resource) { s.emit(FamilyResource, EventPut, r.Name, r) }

func (s *state) emitResourceDelete(r *Resource) { s.emit(FamilyResource, EventDelete, r.Name, r) }

func (s *state) emitSchedule(k EventKind, sc *Schedule) { s.emit(FamilySchedule, k, sc.Name, sc) }

func (s *state) emitQueueJob(k EventKind, j *QueueJob) {
	if s.emitting {
		s.emit(FamilyQueueJob, k, QueueJobEventKey(j.Queue, j.ID), j)
	}
}

// Lease expiry is time-based: nothing in the log says "expired". The FSM
// notices it when its clock (the highest lease stamp applied) reaches a
// lease's deadline, before the command that carries that stamp, and emits
// EXPIRE then. expiry indexes the deadlines of unreleased leases that have
// not expired yet, so the check costs one Min() per command and O(log n)
// per lease that expires. Derived: rebuilt after a restore from the leases
// still live at the snapshot's clock (the others were noticed before).

// putLease stores n in place of old (nil for a new lease), moves its
// deadline in the expiry index and emits the change.
func (s *state) putLease(old, n *Lease) {
	if old != nil && !old.Released {
		s.expiry.Delete(nameTime{old.ExpiresAt, old.Name})
	}
	s.leases.ReplaceOrInsert(n)
	if !n.Released && n.ExpiresAt > s.leaseTime {
		s.expiry.ReplaceOrInsert(nameTime{n.ExpiresAt, n.Name})
	}
	s.emitLease(EventPut, n)
}

// expireLeases emits EXPIRE for every lease whose deadline the clock
// reached, in deadline order (then by name).
func (s *state) expireLeases() {
	for {
		k, ok := s.expiry.Min()
		if !ok || k.at > s.leaseTime {
			return
		}
		s.expiry.DeleteMin()
		if l := s.lease(k.name); l != nil && !l.Released && l.ExpiresAt == k.at {
			s.emitLease(EventExpire, l)
		}
	}
}

func (s *state) rebuildExpiry() {
	s.expiry = btree.NewG(btreeDegree, lessNameTime)
	s.leases.Ascend(func(l *Lease) bool {
		if !l.Released && l.ExpiresAt > s.leaseTime {
			s.expiry.ReplaceOrInsert(nameTime{l.ExpiresAt, l.Name})
		}
		return true
	})
}

// ApplyBatchTo is ApplyBatch that also hands the change events of each
// entry to sink, in order, under the FSM's lock: sink(i, events) for entry
// i, also when it has none (events is then empty). The slice is valid only
// during the call (the next entry's events reuse it): a sink that keeps
// events copies them. sink must not call the FSM.
func (f *FSM) ApplyBatchTo(entries [][]byte, sink func(i int, events []Event)) []any {
	out := make([]any, len(entries))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	f.st.emitting = sink != nil
	defer func() { f.st.emitting = false }()
	defer f.publishQueueChanges()
	for i, data := range entries {
		if data != nil {
			cmd := &fsmv1.Command{}
			if err := decodeCommand(data, cmd); err != nil {
				// Fail-stop: a replica that cannot read the log must not guess.
				panic(fmt.Sprintf("fsm: undecodable log entry (%d of a batch of %d): %v", i+1, len(entries), err))
			}
			out[i] = f.st.apply(cmd)
		}
		if sink != nil {
			sink(i, f.st.events)
			f.st.reuseEvents()
		}
	}
	return out
}

// maxEventBuffer is the most events whose buffer the state keeps for the
// next entry (a bulk operation's entry may have many more).
const maxEventBuffer = 4096

// reuseEvents empties the events buffer for the next entry, keeping its
// memory: growing a new one for every entry was a third of the cost of
// emitting a queued job's change (docs/benchmarks.md, "The log's entries
// decoded by generated code"). The records it pointed to are let go.
func (s *state) reuseEvents() {
	if cap(s.events) > maxEventBuffer {
		s.events = nil
		return
	}
	clear(s.events)
	s.events = s.events[:0]
}

// ApplyCommandEvents applies a command outside Raft (tests, tools) and
// returns its result and change events.
func (f *FSM) ApplyCommandEvents(cmd *fsmv1.Command) (any, []Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	f.st.emitting = true
	defer func() { f.st.emitting, f.st.events = false, nil }()
	defer f.publishQueueChanges()
	res := f.st.apply(cmd)
	return res, f.st.events
}

// View is a read-only copy of the state at one point of the log, taken in
// O(1); it stays valid while the FSM applies on.
type View struct{ st *state }

// ViewWith takes a View and calls at under the same lock, so that at sees
// exactly the entries the View reflects (the node reads its last applied
// index there).
func (f *FSM) ViewWith(at func()) *View {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at != nil {
		at()
	}
	return &View{st: f.st.clone()}
}

// LeaseTime is the view's lease time.
func (v *View) LeaseTime() int64 { return v.st.leaseTime }

// CalendarTime is the view's calendar time.
func (v *View) CalendarTime() int64 { return v.st.calendarTime }

// Records calls fn with every record of the families wanted (nil: all)
// whose key starts with prefix, as EXISTING events, family by family in
// the state's order (by name; windows by job and window; queued jobs by
// id), until fn returns false. Leases, windows, resources and schedules are found by a seek to the prefix; queued
// jobs, whose key starts with the queue, by a walk of all jobs.
func (v *View) Records(prefix string, wanted func(Family) bool, fn func(Event) bool) {
	st := v.st
	ok := true
	ev := func(f Family, key string, rec any) bool {
		ok = fn(Event{Family: f, Kind: EventExisting, Key: key, Record: rec, At: st.leaseTime, Cal: st.calendarTime})
		return ok
	}
	has := func(f Family) bool { return ok && (wanted == nil || wanted(f)) }
	if has(FamilyLease) {
		st.leases.AscendGreaterOrEqual(&Lease{Name: prefix}, func(l *Lease) bool {
			return hasPrefix(l.Name, prefix) && ev(FamilyLease, l.Name, l)
		})
	}
	if has(FamilyWindow) {
		// A window's key is "ledger/window", and ledger names may hold '/':
		// every matching window's ledger starts with the prefix's part
		// before its first '/', so the walk covers those ledgers.
		lp := ledgerPart(prefix)
		st.windows.AscendGreaterOrEqual(&Window{Ledger: lp}, func(w *Window) bool {
			if !hasPrefix(w.Ledger, lp) {
				return false
			}
			if key := WindowEventKey(w.Ledger, w.Window); hasPrefix(key, prefix) {
				return ev(FamilyWindow, key, w)
			}
			return true
		})
	}
	if has(FamilyResource) {
		st.resources.AscendGreaterOrEqual(&Resource{Name: prefix}, func(r *Resource) bool {
			return hasPrefix(r.Name, prefix) && ev(FamilyResource, r.Name, r)
		})
	}
	if has(FamilySchedule) {
		st.schedules.AscendGreaterOrEqual(&Schedule{Name: prefix}, func(sc *Schedule) bool {
			return hasPrefix(sc.Name, prefix) && ev(FamilySchedule, sc.Name, sc)
		})
	}
	if has(FamilyQueueJob) {
		st.qjobs.Ascend(func(j *QueueJob) bool {
			if key := QueueJobEventKey(j.Queue, j.ID); hasPrefix(key, prefix) {
				return ev(FamilyQueueJob, key, j)
			}
			return true
		})
	}
}

// ledgerPart is the part of a window key prefix before its first '/': every
// window whose key starts with the prefix has a ledger name starting with it.
func ledgerPart(prefix string) string {
	for i := 0; i < len(prefix); i++ {
		if prefix[i] == '/' {
			return prefix[:i]
		}
	}
	return prefix
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// Position is where a change event sits in the log: the index of its
// entry and its place among that entry's events. The node numbers events
// as it applies entries; every replica numbers them alike.
type Position struct {
	Index  uint64
	Offset uint32
}

// Before reports whether p comes before q in the log.
func (p Position) Before(q Position) bool {
	return p.Index < q.Index || (p.Index == q.Index && p.Offset < q.Offset)
}

// LogEvent is an event at its position, shared by every watcher of a node.
type LogEvent struct {
	Position
	Event
	enc atomic.Pointer[[]byte]
}

// Encoded returns the event's wire encoding, made by encode once per event
// and then shared: a node with many watchers encodes each change once.
func (e *LogEvent) Encoded(encode func(*LogEvent) []byte) []byte {
	if b := e.enc.Load(); b != nil {
		return *b
	}
	b := encode(e)
	e.enc.Store(&b)
	return b
}

// WatchBatch is what a watch hands its sender at a time: the initial View
// (only in the first batch of a watch that asked for one), or events in
// log order; Next is where to resume after the batch (every event before
// it was delivered or did not match).
type WatchBatch struct {
	View   *View
	Events []*LogEvent
	Next   Position
}
