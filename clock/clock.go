// Package clock is coordd's time source, shared by the SDK and the server:
// the real clock, a fake one that tests advance by hand (virtual time, no
// sleeps), and scaled and offset clocks for demos and fault tests. The
// SDK's lease keeper and job runner take one (client.WithClock,
// periodic.WithClock); so do the server node's proposer deadlines, waiting
// acquires, leader ticks and the leader clock (node.Config.Clock).
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock reads time and makes timers and tickers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	AfterFunc(d time.Duration, f func()) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is the part of *time.Timer coordd uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is the part of *time.Ticker coordd uses. Like time.Ticker, it
// drops ticks a slow receiver misses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Wall reads c's wall clock: c.Now(), unless c keeps a wall reading of its
// own (Stepped: a wall clock that NTP stepped while elapsed time went on).
// Calendar time (the leader's stamp) is read with Wall, elapsed time with
// Now: a real clock's Now carries a monotonic reading, so Sub between two
// readings ignores steps of the wall clock, and so does lease time.
func Wall(c Clock) time.Time {
	if w, ok := c.(interface{ Wall() time.Time }); ok {
		return w.Wall()
	}
	return c.Now()
}

// NewTimerAt returns a timer on c that fires at the instant at (at once
// if at has passed). ResetAt re-arms t (a timer of c) for at. On a Fake
// the instant is taken as it is, in one step: a timer set with
// Reset(at.Sub(c.Now())) is armed a whole step late when a test's Advance
// lands between the reading and the Reset, and a loop that sleeps until a
// reckoned instant then misses it. Code that sleeps until an instant it
// reckoned uses these.
func NewTimerAt(c Clock, at time.Time) Timer {
	if f, ok := c.(*Fake); ok {
		return f.addAt(at, 0, nil)
	}
	return c.NewTimer(Until(c, at))
}

// AfterFuncAt has c call f on its own goroutine at the instant at; see
// NewTimerAt.
func AfterFuncAt(c Clock, at time.Time, f func()) Timer {
	if fk, ok := c.(*Fake); ok {
		return fk.addAt(at, 0, f)
	}
	return c.AfterFunc(Until(c, at), f)
}

// ResetAt re-arms t, a timer made by c, to fire at at; see NewTimerAt.
func ResetAt(c Clock, t Timer, at time.Time) bool {
	if ft, ok := t.(*fakeTimer); ok && c == Clock(ft.f) {
		return ft.resetAt(at)
	}
	return t.Reset(Until(c, at))
}

// Since is the time elapsed on c since t.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Until is the time on c until t.
func Until(c Clock, t time.Time) time.Duration { return t.Sub(c.Now()) }

// Real is the system clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }
func (Real) NewTimer(d time.Duration) Timer {
	return realTimer{time.NewTimer(d)}
}
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }
func (Real) NewTicker(d time.Duration) Ticker          { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

// Fake is a manual clock. Timers and tickers fire inside Advance, in
// deadline order; a timer set for now or earlier fires at once, as a
// time.Timer does.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// changed is signalled whenever a timer is created or reset, so a test can
	// wait until the code under test armed its next timer.
	changed chan struct{}
}

// NewFake returns a fake clock at start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{}, 1)}
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.add(d, 0, nil)
}

func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.add(d, 0, fn)
}

// NewTicker returns a ticker that fires every d of virtual time.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.add(d, d, nil)}
}

func (f *Fake) add(d, period time.Duration, fn func()) *fakeTimer {
	f.mu.Lock()
	return f.addLocked(f.now.Add(d), period, fn)
}

func (f *Fake) addAt(at time.Time, period time.Duration, fn func()) *fakeTimer {
	f.mu.Lock()
	return f.addLocked(at, period, fn)
}

// addLocked arms a new timer for at; called with f.mu held, it releases it.
func (f *Fake) addLocked(at time.Time, period time.Duration, fn func()) *fakeTimer {
	t := &fakeTimer{f: f, at: at, period: period, fn: fn, ch: make(chan time.Time, 1), armed: true}
	f.timers = append(f.timers, t)
	fire := t.fireIfDueLocked()
	f.mu.Unlock()
	fire()
	f.signal()
	return t
}

func (f *Fake) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Changed returns a channel that receives after a timer was armed.
func (f *Fake) Changed() <-chan struct{} { return f.changed }

// Advance moves time forward by d, firing every timer that comes due, in
// order; time stands at each deadline while its timer fires. A ticker
// fires once per period that ends within d (its channel holds one tick, as
// time.Ticker's does).
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	f.mu.Unlock()
	for {
		f.mu.Lock()
		sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
		var next *fakeTimer
		for _, t := range f.timers {
			if t.armed && !t.at.After(end) {
				next = t
				break
			}
		}
		if next == nil {
			f.now = end
			f.mu.Unlock()
			return
		}
		if next.at.After(f.now) {
			f.now = next.at
		}
		if next.period > 0 {
			next.at = next.at.Add(next.period)
		} else {
			next.armed = false
		}
		fn, ch, now := next.fn, next.ch, f.now
		f.mu.Unlock()
		if fn != nil {
			fn()
		} else {
			select {
			case ch <- now:
			default:
			}
		}
	}
}

// WaitArmed blocks until a timer is armed to fire at exactly at, or
// timeout (real time) passes; it reports whether it saw one. Tests use it
// to know the code under test is idle, waiting for that moment.
func (f *Fake) WaitArmed(at time.Time, timeout time.Duration) bool {
	return f.waitFor(timeout, func(t *fakeTimer) bool { return t.at.Equal(at) })
}

// WaitArmedBetween blocks until a timer is armed to fire in (from, to],
// or timeout (real time) passes; it reports whether it saw one. For a
// timer whose duration the code under test computes from real time (a
// context's deadline), so that only its range is known.
func (f *Fake) WaitArmedBetween(from, to time.Time, timeout time.Duration) bool {
	return f.waitFor(timeout, func(t *fakeTimer) bool { return t.at.After(from) && !t.at.After(to) })
}

// WaitTimers blocks until at least n timers or tickers are armed, or
// timeout (real time) passes; it reports whether it saw them.
func (f *Fake) WaitTimers(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		if f.Pending() >= n {
			return true
		}
		select {
		case <-f.changed:
		case <-deadline:
			return false
		case <-time.After(time.Millisecond): // timers armed before we looked
		}
	}
}

func (f *Fake) waitFor(timeout time.Duration, match func(*fakeTimer) bool) bool {
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		for _, t := range f.timers {
			if t.armed && match(t) {
				f.mu.Unlock()
				return true
			}
		}
		f.mu.Unlock()
		select {
		case <-f.changed:
		case <-deadline:
			return false
		case <-time.After(time.Millisecond): // timers armed before we looked
		}
	}
}

// WaitTicksReceived blocks until every tick the fake's tickers fired was
// received (their channels are empty), or timeout (real time) passes; it
// reports whether they were. Tests call it between Advance steps so a
// loop on a ticker sees each tick instead of the ones it was too slow for
// being dropped.
func (f *Fake) WaitTicksReceived(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		f.mu.Lock()
		pending := false
		for _, t := range f.timers {
			if t.period > 0 && t.armed && len(t.ch) > 0 {
				pending = true
				break
			}
		}
		f.mu.Unlock()
		if !pending {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Pending returns the number of armed timers and tickers.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.armed {
			n++
		}
	}
	return n
}

type fakeTimer struct {
	f      *Fake
	at     time.Time
	period time.Duration // > 0: a ticker
	fn     func()
	ch     chan time.Time
	armed  bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// Stop and Reset drop a fire not yet received, as time.Timer's do since
// Go 1.23: no stale value wakes a later receive.
func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.armed
	t.armed = false
	t.drain()
	return was
}

func (t *fakeTimer) drain() {
	if t.ch == nil {
		return
	}
	select {
	case <-t.ch:
	default:
	}
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	if t.period > 0 {
		t.period = d
	}
	return t.resetLocked(t.f.now.Add(d))
}

func (t *fakeTimer) resetAt(at time.Time) bool {
	t.f.mu.Lock()
	return t.resetLocked(at)
}

// resetLocked arms t for at; called with f.mu held, it releases it.
func (t *fakeTimer) resetLocked(at time.Time) bool {
	was := t.armed
	t.armed = true
	t.at = at
	t.drain()
	fire := t.fireIfDueLocked()
	t.f.mu.Unlock()
	fire()
	t.f.signal()
	return was
}

// fireIfDueLocked: a timer (not a ticker) set for now or earlier fires at
// once, as a time.Timer with d <= 0 does, instead of waiting for the next
// Advance. It returns what fires it, to be called without f.mu.
func (t *fakeTimer) fireIfDueLocked() func() {
	if t.period > 0 || t.at.After(t.f.now) {
		return func() {}
	}
	t.armed = false
	fn, ch, now := t.fn, t.ch, t.f.now
	return func() {
		if fn != nil {
			go fn() // as time.AfterFunc: on its own goroutine
			return
		}
		select {
		case ch <- now:
		default:
		}
	}
}

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.C() }
func (k fakeTicker) Stop()               { k.t.Stop() }
func (k fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	k.t.Reset(d)
}

// Scaled is a clock that runs speed times faster than the wall clock:
// Now is base + (wall time since epoch) x speed. Processes that share base,
// epoch and speed agree on the time (demos that compress days into seconds).
// Timers and tickers run at the same speed. A Base with a monotonic reading
// (from time.Now) gives readings with one, so Sub between them is the
// scaled elapsed time whatever the wall clock does.
type Scaled struct {
	Base  time.Time
	Epoch time.Time
	Speed float64
}

func (s Scaled) Now() time.Time {
	return s.Base.Add(time.Duration(float64(time.Since(s.Epoch)) * s.Speed))
}

func (s Scaled) real(d time.Duration) time.Duration { return time.Duration(float64(d) / s.Speed) }

func (s Scaled) NewTimer(d time.Duration) Timer {
	return scaledTimer{realTimer{time.NewTimer(s.real(d))}, s}
}

func (s Scaled) AfterFunc(d time.Duration, f func()) Timer {
	return scaledTimer{realTimer{time.AfterFunc(s.real(d), f)}, s}
}

func (s Scaled) NewTicker(d time.Duration) Ticker {
	return scaledTicker{realTicker{time.NewTicker(s.real(d))}, s}
}

type scaledTimer struct {
	realTimer
	s Scaled
}

func (t scaledTimer) Reset(d time.Duration) bool { return t.realTimer.Reset(t.s.real(d)) }

type scaledTicker struct {
	realTicker
	s Scaled
}

func (t scaledTicker) Reset(d time.Duration) { t.realTicker.Reset(t.s.real(d)) }

// Offset is a clock that reads Skew away from Base (a replica whose clock
// is minutes behind); timers are unaffected.
type Offset struct {
	Base Clock
	Skew time.Duration
}

func (o Offset) Now() time.Time                            { return o.Base.Now().Add(o.Skew) }
func (o Offset) Wall() time.Time                           { return Wall(o.Base).Add(o.Skew) }
func (o Offset) NewTimer(d time.Duration) Timer            { return o.Base.NewTimer(d) }
func (o Offset) AfterFunc(d time.Duration, f func()) Timer { return o.Base.AfterFunc(d, f) }
func (o Offset) NewTicker(d time.Duration) Ticker          { return o.Base.NewTicker(d) }

// Skewed is the real clock as a node with a faulty clock sees it: its wall
// reading is offset away and its elapsed time (and timers) run at rate
// (1 = real time). coordd's hidden --test-clock-offset and
// --test-clock-rate flags use it, because Go programs ignore libfaketime.
func Skewed(offset time.Duration, rate float64) Clock {
	var base Clock = Real{}
	if rate > 0 && rate != 1 {
		now := time.Now()
		base = Scaled{Base: now, Epoch: now, Speed: rate}
	}
	if offset == 0 {
		return base
	}
	return Offset{Base: base, Skew: offset}
}

// Stepped is Base with a wall clock that can be stepped as NTP steps a real
// one: Wall reads Base's time plus the steps so far, while Now (elapsed
// time), timers and tickers stay Base's. Tests use it on a Fake to step a
// leader's wall clock forward and back.
type Stepped struct {
	Base Clock
	mu   sync.Mutex
	step time.Duration
}

func (s *Stepped) Now() time.Time                            { return s.Base.Now() }
func (s *Stepped) NewTimer(d time.Duration) Timer            { return s.Base.NewTimer(d) }
func (s *Stepped) AfterFunc(d time.Duration, f func()) Timer { return s.Base.AfterFunc(d, f) }
func (s *Stepped) NewTicker(d time.Duration) Ticker          { return s.Base.NewTicker(d) }

// Wall is Base's time plus every step so far.
func (s *Stepped) Wall() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Wall(s.Base).Add(s.step)
}

// Step moves the wall clock by d (negative: back).
func (s *Stepped) Step(d time.Duration) {
	s.mu.Lock()
	s.step += d
	s.mu.Unlock()
}
