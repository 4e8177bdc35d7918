// Package watchhub is a node's ring of recent change events and the
// watchers that read it. The FSM emits the change events of every entry
// it applies (fsm/events.go); the node's apply path hands them, numbered
// by log index and position, to the Hub (Publish): a bounded ring that
// every watcher of this node reads from its own cursor. Nothing is copied
// per watcher, the apply path never waits for a watcher, and a watcher
// whose unread events leave the ring is dropped. It knows the FSM's
// events, neither Raft nor the API: the node feeds it (node/raftfsm.go)
// and serves Node.Watch from it (node/watch.go). See node/DESIGN.md
// "Watch".
package watchhub

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
)

// Config bounds the watch ring and the watchers of a node.
type Config struct {
	// Events and Bytes bound the ring of recent change events (estimated
	// memory, records included): how far back a watch may start or resume,
	// and how far a watcher may fall behind before it is dropped.
	Events int
	Bytes  int64
	// MaxWatchers caps the watches this node serves at once.
	MaxWatchers int
	// ProgressInterval: a watcher whose prefix saw no change while others
	// did hears its resume position at most this often.
	ProgressInterval time.Duration
}

// Defaults are the watch settings New gives unset fields.
func Defaults() Config {
	return Config{Events: 1 << 16, Bytes: 64 << 20, MaxWatchers: 10_000, ProgressInterval: time.Second}
}

func (c Config) withDefaults() Config {
	d := Defaults()
	if c.Events <= 0 {
		c.Events = d.Events
	}
	if c.Bytes <= 0 {
		c.Bytes = d.Bytes
	}
	if c.MaxWatchers <= 0 {
		c.MaxWatchers = d.MaxWatchers
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	return c
}

// Limits of one delivery: a batch holds at most this many events and,
// past the first event, this many estimated bytes.
const (
	watchBatchEvents = 512
	watchBatchBytes  = 1 << 20
	// reapInterval is how often the hub looks for watchers whose unread
	// events left the ring (a watcher stuck in a send never looks itself).
	reapInterval = 250 * time.Millisecond
)

// watchError is a watch the node cannot serve: the API maps reason to a
// code (WATCH_INDEX_COMPACTED, WATCHER_TOO_SLOW, WATCH_LIMIT).
type watchError struct {
	reason coorderr.Reason
	msg    string
	meta   map[string]string
}

func (e *watchError) Error() string { return e.msg }

// WatchRefused returns the reason and metadata of the refusal.
func (e *watchError) WatchRefused() (coorderr.Reason, map[string]string) { return e.reason, e.meta }

func compactedError(from, oldest fsm.Position) error {
	first := oldest.Index
	if oldest.Offset > 0 {
		first++
	}
	return &watchError{reason: coorderr.WatchIndexCompacted,
		msg: fmt.Sprintf("watch from index %d position %d: this node holds events from index %d on; re-read the state and watch from now",
			from.Index, from.Offset, first),
		meta: map[string]string{"oldest_index": strconv.FormatUint(first, 10)}}
}

func tooSlowError(at fsm.Position) error {
	return &watchError{reason: coorderr.WatcherTooSlow,
		msg:  fmt.Sprintf("watcher too slow: the events from index %d position %d left this node's ring before it read them", at.Index, at.Offset),
		meta: map[string]string{"resume_index": strconv.FormatUint(at.Index, 10), "resume_position": strconv.FormatUint(uint64(at.Offset), 10)}}
}

// ErrStopped is what Watch returns when its stopped channel closes (the
// node shuts down).
var ErrStopped = errors.New("watchhub: stopped")

// Hub is a node's ring of recent change events and its watchers.
//
// Events get sequence numbers in publish order; slot seq%len(ring) holds
// event seq while tail <= seq < head. Publishers (the apply path, under the
// FSM's lock) and registration hold mu; readers take no lock: they read
// slots between their cursor and head, then check that tail did not pass
// their cursor meanwhile (a slot is overwritten only after tail moved past
// it).
type Hub struct {
	cfg   Config
	clock clock.Clock

	ring  []atomic.Pointer[fsm.LogEvent]
	head  atomic.Uint64 // seq of the next event
	tail  atomic.Uint64 // seq of the oldest event held
	last  atomic.Uint64 // index of the last entry applied
	epoch atomic.Uint64 // bumped when a snapshot replaces the state
	wake  atomic.Pointer[chan struct{}]

	// restoring is the index of the snapshot raft opened last (the one it
	// restores next): raft does not tell the FSM.
	restoring atomic.Uint64

	mu       sync.Mutex
	bytes    int64
	oldest   fsm.Position // every event from here on is held (or yet to come)
	watchers map[*watcher]struct{}
	gauge    atomic.Int64
	// watching wakes the reaper when the first watcher registers: it
	// sleeps while there are none (no timer on an idle node).
	watching chan struct{}
}

// New returns an empty hub; zero fields of cfg take Defaults.
func New(cfg Config, c clock.Clock) *Hub {
	cfg = cfg.withDefaults()
	h := &Hub{cfg: cfg, clock: c, ring: make([]atomic.Pointer[fsm.LogEvent], cfg.Events),
		oldest: fsm.Position{Index: 1}, watchers: map[*watcher]struct{}{},
		watching: make(chan struct{}, 1)}
	ch := make(chan struct{})
	h.wake.Store(&ch)
	return h
}

// Publish appends the events of the entry at index (apply path). It copies
// them: evs is the FSM's buffer, reused for the next entry.
func (h *Hub) Publish(index uint64, evs []fsm.Event) {
	if len(evs) == 0 {
		h.last.Store(index)
		return
	}
	h.mu.Lock()
	head := h.head.Load()
	for i := range evs {
		e := &fsm.LogEvent{Position: fsm.Position{Index: index, Offset: uint32(i)}, Event: evs[i]}
		size := int64(e.Size())
		for tail := h.tail.Load(); tail < head && (head-tail >= uint64(len(h.ring)) || h.bytes+size > h.cfg.Bytes); tail++ {
			old := h.ring[tail%uint64(len(h.ring))].Load()
			h.bytes -= int64(old.Size())
			h.oldest = fsm.Position{Index: old.Index, Offset: old.Offset + 1}
			h.tail.Store(tail + 1) // before the slot is reused
		}
		h.ring[head%uint64(len(h.ring))].Store(e)
		h.bytes += size
		head++
		h.head.Store(head)
	}
	h.last.Store(index)
	h.mu.Unlock()
	h.signal()
}

// signal wakes every reader waiting for events.
func (h *Hub) signal() {
	ch := make(chan struct{})
	close(*h.wake.Swap(&ch))
}

// OpeningSnapshot notes the index of the snapshot raft opens: raft opens
// a snapshot right before it restores the FSM from it (at start and on
// InstallSnapshot), and the FSM's Restore is not told.
func (h *Hub) OpeningSnapshot(index uint64) { h.restoring.Store(index) }

// Restored empties the ring after the snapshot opened last replaced the
// state (see OpeningSnapshot).
func (h *Hub) Restored() { h.reset(h.restoring.Load()) }

// reset empties the ring after a snapshot replaced the state at index:
// watchers are dropped (their next events would not follow the ones they
// saw), and watches may start after index.
func (h *Hub) reset(index uint64) {
	h.mu.Lock()
	h.epoch.Add(1)
	for s := h.tail.Load(); s < h.head.Load(); s++ {
		h.ring[s%uint64(len(h.ring))].Store(nil)
	}
	h.tail.Store(h.head.Load())
	h.bytes = 0
	h.oldest = fsm.Position{Index: index + 1}
	h.last.Store(index)
	for w := range h.watchers {
		w.drop(compactedError(w.position(), h.oldest))
	}
	h.mu.Unlock()
	h.signal()
}

// watcher is one watch's cursor.
type watcher struct {
	from    fsm.Position // events before it are skipped
	epoch   uint64
	cursor  atomic.Uint64 // seq of the next event to read
	next    atomic.Pointer[fsm.Position]
	dropped chan struct{}
	once    sync.Once
	err     error
}

func (w *watcher) drop(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.dropped)
	})
}

func (w *watcher) position() fsm.Position {
	if p := w.next.Load(); p != nil {
		return *p
	}
	return w.from
}

// register adds a watcher starting at from (index 0: after the last entry
// applied). With initial, it also returns a View of the state exactly at
// the watcher's start, taken under the FSM's lock: nothing is missed or
// seen twice between the two.
func (h *Hub) register(f *fsm.FSM, from fsm.Position, initial bool) (*watcher, fsm.WatchBatch, error) {
	var (
		w   *watcher
		err error
	)
	locate := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.watchers) >= h.cfg.MaxWatchers {
			err = &watchError{reason: coorderr.WatchLimit, msg: fmt.Sprintf("this node serves its limit of %d watches", h.cfg.MaxWatchers),
				meta: map[string]string{"limit": strconv.Itoa(h.cfg.MaxWatchers)}}
			return
		}
		tail, head := h.tail.Load(), h.head.Load()
		seq := head
		if from.Index == 0 {
			from = fsm.Position{Index: h.last.Load() + 1}
		} else {
			if from.Before(h.oldest) {
				err = compactedError(from, h.oldest)
				return
			}
			// The first event held at or after from (events are in
			// position order).
			n := int(head - tail)
			seq = tail + uint64(sort.Search(n, func(i int) bool {
				return !h.ring[(tail+uint64(i))%uint64(len(h.ring))].Load().Before(from)
			}))
		}
		w = &watcher{from: from, epoch: h.epoch.Load(), dropped: make(chan struct{})}
		w.cursor.Store(seq)
		h.watchers[w] = struct{}{}
		h.gauge.Store(int64(len(h.watchers)))
		select {
		case h.watching <- struct{}{}:
		default:
		}
	}
	var first fsm.WatchBatch
	if initial {
		first.View = f.ViewWith(locate)
	} else {
		locate()
	}
	if err != nil {
		return nil, fsm.WatchBatch{}, err
	}
	first.Next = w.from
	return w, first, nil
}

func (h *Hub) unregister(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.gauge.Store(int64(len(h.watchers)))
	h.mu.Unlock()
}

// reap drops the watchers whose unread events left the ring.
func (h *Hub) reap() {
	h.mu.Lock()
	defer h.mu.Unlock()
	tail, epoch := h.tail.Load(), h.epoch.Load()
	for w := range h.watchers {
		if w.epoch != epoch {
			w.drop(compactedError(w.position(), h.oldest))
		} else if w.cursor.Load() < tail {
			w.drop(tooSlowError(w.position()))
		}
	}
}

// RunReaper reaps every reapInterval while the node has watchers and
// sleeps while it has none, until ctx ends.
func (h *Hub) RunReaper(ctx context.Context) {
	for {
		if h.gauge.Load() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-h.watching:
			}
			continue
		}
		t := h.clock.NewTimer(reapInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			h.reap()
		}
	}
}

// read collects up to a batch of matching events from w's cursor. It
// returns the events, the position after what it looked at, and whether it
// reached the head; an error when w fell off the ring.
func (h *Hub) read(w *watcher, buf []*fsm.LogEvent, match func(*fsm.Event) bool) ([]*fsm.LogEvent, fsm.Position, bool, error) {
	last := h.last.Load() // before head: every event of entries up to last is below head
	head := h.head.Load()
	seq := w.cursor.Load()
	next := w.position()
	size := 0
	for ; seq < head && len(buf) < watchBatchEvents && size < watchBatchBytes; seq++ {
		e := h.ring[seq%uint64(len(h.ring))].Load()
		if e == nil {
			break // reset under us: the check below says so
		}
		if e.Before(w.from) {
			continue
		}
		next = fsm.Position{Index: e.Index, Offset: e.Offset + 1}
		if match(&e.Event) {
			buf = append(buf, e)
			size += e.Size()
		}
	}
	if h.epoch.Load() != w.epoch {
		return nil, next, false, compactedError(w.position(), fsm.Position{Index: h.last.Load() + 1})
	}
	if w.cursor.Load() < h.tail.Load() {
		return nil, next, false, tooSlowError(w.position())
	}
	atHead := seq == head
	if atHead && next.Before(fsm.Position{Index: last + 1}) {
		next = fsm.Position{Index: last + 1}
	}
	if next.Before(w.from) {
		next = w.from
	}
	w.cursor.Store(seq)
	return buf, next, atHead, nil
}

// serve delivers w's batches to send until done closes or an error.
func (h *Hub) serve(done <-chan struct{}, w *watcher, first fsm.WatchBatch, match func(*fsm.Event) bool,
	send func(fsm.WatchBatch) error) error {
	if err := send(first); err != nil {
		return err
	}
	sent := first.Next // the resume position the watcher last heard
	sentAt := h.clock.Now()
	buf := make([]*fsm.LogEvent, 0, 64)
	var progress clock.Timer
	defer func() {
		if progress != nil {
			progress.Stop()
		}
	}()
	for {
		wake := *h.wake.Load() // before read: a publish after it closes this channel
		evs, next, atHead, err := h.read(w, buf[:0], match)
		if err != nil {
			return err
		}
		w.next.Store(&next)
		if len(evs) > 0 || (sent.Before(next) && h.clock.Now().Sub(sentAt) >= h.cfg.ProgressInterval) {
			select {
			case <-done:
				return nil
			default:
			}
			if err := send(fsm.WatchBatch{Events: evs, Next: next}); err != nil {
				return err
			}
			sent, sentAt = next, h.clock.Now()
		}
		if !atHead {
			continue
		}
		var tick <-chan time.Time
		if sent.Before(next) { // a position not yet told: tell it when things stay quiet
			at := sentAt.Add(h.cfg.ProgressInterval)
			if progress == nil {
				progress = clock.NewTimerAt(h.clock, at)
			} else {
				clock.ResetAt(h.clock, progress, at)
			}
			tick = progress.C()
		}
		select {
		case <-wake:
		case <-tick:
		case <-done:
			return nil
		}
	}
}

// Watch delivers the change events of the applied state, from
// position from (index 0: from the next entry applied), to send: first a
// batch with the start position (and, with initial, a View of the state
// there), then batches of events that match, in log order, each with the
// position to resume after it. Events are shared: send must not keep or
// change them after it returns. It returns when ctx ends, send fails, or
// the watch cannot go on (an error with WatchRefused: the start is no
// longer held, the watcher fell off the ring, or a snapshot replaced the
// state). A send blocked on a slow client does not hold it up: Watch
// returns, and the caller ends the stream, which ends the send.
//
// f is the FSM whose applied events are published to h (the initial View
// is read from it); Watch returns ErrStopped when stopped closes.
func (h *Hub) Watch(ctx context.Context, stopped <-chan struct{}, f *fsm.FSM, from fsm.Position, initial bool,
	match func(*fsm.Event) bool, send func(fsm.WatchBatch) error) error {
	if match == nil {
		match = func(*fsm.Event) bool { return true }
	}
	w, first, err := h.register(f, from, initial)
	if err != nil {
		return err
	}
	defer h.unregister(w)
	done := make(chan struct{})
	stop := sync.OnceFunc(func() { close(done) })
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- h.serve(done, w, first, match, send) }()
	select {
	case err := <-errc:
		return err
	case <-w.dropped:
		return w.err
	case <-ctx.Done():
		// The caller's stream ended: a send in progress returns at once.
		stop()
		<-errc
		return ctx.Err()
	case <-stopped:
		return ErrStopped
	}
}

// Watchers is the number of watches this hub serves.
func (h *Hub) Watchers() int { return int(h.gauge.Load()) }
