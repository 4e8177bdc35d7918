package schedule

import (
	"math"
	"time"
)

// zone maps between instants (Unix seconds) and wall times (see cron.go)
// in one time zone, with the DST rules of DESIGN.md: a wall time that
// happens twice is taken at its first instant; a wall time that never
// happens (in a gap) belongs to the instant the gap ends.
type zone struct {
	loc      *time.Location
	fixed    bool // no transitions at all (UTC, fixed offsets)
	fixedOff int64
}

func newZone(loc *time.Location) zone {
	z := zone{loc: loc}
	t := time.Unix(0, 0).In(loc)
	start, end := t.ZoneBounds()
	if start.IsZero() && end.IsZero() {
		_, off := t.Zone()
		z.fixed, z.fixedOff = true, int64(off)
	}
	return z
}

// offset is the zone's UTC offset at instant t.
func (z zone) offset(t int64) int64 {
	if z.fixed {
		return z.fixedOff
	}
	_, off := time.Unix(t, 0).In(z.loc).Zone()
	return int64(off)
}

// wall is the wall reading at instant t.
func (z zone) wall(t int64) int64 { return t + z.offset(t) }

// wallHigh is the highest wall reading at or before instant t: the wall
// reading, except in the second pass of a repeated interval (after clocks
// went back), where it is the last reading of the first pass. It never
// decreases as t grows, so "slot s is due by instant t" is
// "s <= wallHigh(t)".
func (z zone) wallHigh(t int64) int64 {
	if z.fixed {
		return t + z.fixedOff
	}
	w := z.wall(t)
	if st, ok := z.prevChange(t); ok {
		if pw := st - 1 + z.offset(st-1); pw > w {
			w = pw
		}
	}
	return w
}

// Zone transitions. Go's time.Time.ZoneBounds is only a hint here: on 31
// December of leap years in the range of a zone's POSIX rule (2040, 2044,
// … in Berlin or New York) it returns an end before the instant asked
// (tzset counts a year as 365 days), and it reports "transitions" where
// nothing changes (each 1 January in that range, a change of name only).
// A transition here is an instant e with offset(e-1) != offset(e); the
// offsets (time.Time.Zone) are exact. Every walk is bounded and moves
// forward (or back) by construction, whatever the hint says.

// maxZoneSteps bounds the hints one search follows (one per pseudo
// transition between two real ones: about one a year in a rule's range).
const maxZoneSteps = 64

// nextChange is the first transition in (t, limit], if any.
func (z zone) nextChange(t, limit int64) (int64, bool) {
	if z.fixed {
		return 0, false
	}
	off := z.offset(t)
	for x, i := t, 0; x < limit && i < maxZoneSteps; i++ {
		_, end := time.Unix(x, 0).In(z.loc).ZoneBounds()
		if end.IsZero() {
			return 0, false
		}
		e := end.Unix()
		trusted := e > x // the offset is constant on [x, e)
		if !trusted {
			e = x + daySecs // the hint went back: probe a day ahead
		}
		if e > limit {
			if trusted {
				return 0, false
			}
			e = limit
		}
		if z.offset(e) == off {
			x = e // nothing changed (yet)
			continue
		}
		if trusted && z.offset(e-1) == off {
			return e, true
		}
		return z.firstChange(x, e, off), true
	}
	return 0, false
}

// prevChange is the last transition at or before t, if any.
func (z zone) prevChange(t int64) (int64, bool) {
	if z.fixed {
		return 0, false
	}
	off := z.offset(t)
	for x, i := t, 0; i < maxZoneSteps; i++ {
		start, _ := time.Unix(x, 0).In(z.loc).ZoneBounds()
		if start.IsZero() {
			return 0, false
		}
		s := start.Unix()
		trusted := s <= x // the offset is constant on [s, x]
		if !trusted {
			s = x - daySecs
		}
		if z.offset(s-1) == off {
			x = s - 1 // nothing changed there
			continue
		}
		if trusted {
			return s, true
		}
		return z.firstChange(s-1, x, z.offset(s-1)), true
	}
	return 0, false
}

// firstChange is an instant e in (lo, hi] with offset(e-1) != offset(e),
// given offset(lo) == off != offset(hi) (bisection: about 25 steps for a
// day).
func (z zone) firstChange(lo, hi int64, off int64) int64 {
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if z.offset(mid) == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// gap is an interval of wall times [from, to) that the zone skips: its
// clocks jump from the instant `at` (whose wall reading is `to`).
type gap struct {
	from, to, at int64
	nameBefore   string
	offBefore    int
}

// instant maps a wall time to its instant: the first one when the wall
// time happens twice; when it never happens, ok is false and g is the gap
// it falls in (g.at is then the instant it belongs to).
func (z zone) instant(w int64) (t int64, g gap, ok bool) {
	if z.fixed {
		return w - z.fixedOff, gap{}, true
	}
	guess := w - z.offset(w)
	off := z.offset(guess)
	st, hasStart := z.prevChange(guess)
	en, hasEnd := z.nextChange(guess, math.MaxInt64)
	found := false
	consider := func(c int64) {
		if !found || c < t {
			t, found = c, true
		}
	}
	var offPrev, offNext int64
	if hasStart {
		offPrev = z.offset(st - 1)
		if c := w - offPrev; c < st {
			consider(c)
		}
	}
	if hasEnd {
		offNext = z.offset(en)
		if c := w - offNext; c >= en {
			consider(c)
		}
	}
	if c := w - off; (!hasStart || c >= st) && (!hasEnd || c < en) {
		consider(c)
	}
	if found {
		return t, gap{}, true
	}
	// The wall time is skipped: by the transition that starts this zone
	// period or by the one that ends it.
	if hasStart && offPrev < off && w >= st+offPrev && w < st+off {
		g, _ := z.gapAt(st)
		return st, g, false
	}
	if hasEnd && offNext > off && w >= en+off && w < en+offNext {
		g, _ := z.gapAt(en)
		return en, g, false
	}
	// Not reached with real zone data (periods are longer than the offset
	// changes); answer with the guess rather than fail.
	return guess, gap{}, true
}

// gapAt reports the gap whose clocks jump at instant t, if any.
func (z zone) gapAt(t int64) (gap, bool) {
	if z.fixed {
		return gap{}, false
	}
	_, off := time.Unix(t, 0).In(z.loc).Zone()
	name, ob := time.Unix(t-1, 0).In(z.loc).Zone()
	if ob >= off {
		return gap{}, false
	}
	return gap{from: t + int64(ob), to: t + int64(off), at: t, nameBefore: name, offBefore: ob}, true
}

// gaps calls f for each gap whose jump instant is in (a, b], oldest first.
// Its work is one step per zone transition in the interval; each step
// moves forward (nextChange), so it ends whatever the zone data says.
func (z zone) gaps(a, b int64, f func(gap)) {
	for t := a; t < b; {
		en, ok := z.nextChange(t, b)
		if !ok || en <= t {
			return
		}
		if g, ok := z.gapAt(en); ok {
			f(g)
		}
		t = en
	}
}

// repeat reports whether instant t is in the second pass of a repeated
// interval: the clocks went back by `back` at instant st <= t, and
// t - back had the same wall reading in the first pass [st-back, st).
func (z zone) repeat(t int64) (back, st int64, ok bool) {
	st, ok = z.prevChange(t)
	if !ok {
		return 0, 0, false
	}
	back = z.offset(st-1) - z.offset(t)
	if back <= 0 || t >= st+back {
		return 0, 0, false
	}
	return back, st, true
}

// timeOf is a time.Time whose clock fields read wall time w: in the zone
// at w's instant, or, for a skipped wall time, with the offset in force
// before the gap (so a layout with the offset stays truthful: 02:30 CET is
// the instant 03:30 CEST).
func (z zone) timeOf(w int64) time.Time {
	t, g, ok := z.instant(w)
	if ok {
		return time.Unix(t, 0).In(z.loc)
	}
	return time.Unix(w-int64(g.offBefore), 0).In(time.FixedZone(g.nameBefore, g.offBefore))
}
