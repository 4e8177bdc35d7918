package schedule

import "time"

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
	tm := time.Unix(t, 0).In(z.loc)
	_, off := tm.Zone()
	w := t + int64(off)
	if start, _ := tm.ZoneBounds(); !start.IsZero() {
		st := start.Unix()
		if pw := st - 1 + z.offset(st-1); pw > w {
			w = pw
		}
	}
	return w
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
	tm := time.Unix(guess, 0).In(z.loc)
	_, o := tm.Zone()
	off := int64(o)
	start, end := tm.ZoneBounds()
	found := false
	consider := func(c int64) {
		if !found || c < t {
			t, found = c, true
		}
	}
	var st, en, offPrev, offNext int64
	if !start.IsZero() {
		st = start.Unix()
		offPrev = z.offset(st - 1)
		if c := w - offPrev; c < st {
			consider(c)
		}
	}
	if !end.IsZero() {
		en = end.Unix()
		offNext = z.offset(en)
		if c := w - offNext; c >= en {
			consider(c)
		}
	}
	if c := w - off; (start.IsZero() || c >= st) && (end.IsZero() || c < en) {
		consider(c)
	}
	if found {
		return t, gap{}, true
	}
	// The wall time is skipped: by the transition that starts this zone
	// period or by the one that ends it.
	if !start.IsZero() && offPrev < off && w >= st+offPrev && w < st+off {
		name, ob := time.Unix(st-1, 0).In(z.loc).Zone()
		return st, gap{from: st + offPrev, to: st + off, at: st, nameBefore: name, offBefore: ob}, false
	}
	if !end.IsZero() && offNext > off && w >= en+off && w < en+offNext {
		name, ob := tm.Zone()
		return en, gap{from: en + off, to: en + offNext, at: en, nameBefore: name, offBefore: ob}, false
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
	tm := time.Unix(t, 0).In(z.loc)
	start, _ := tm.ZoneBounds()
	if start.IsZero() || start.Unix() != t {
		return gap{}, false
	}
	_, off := tm.Zone()
	name, ob := time.Unix(t-1, 0).In(z.loc).Zone()
	if ob >= off {
		return gap{}, false
	}
	return gap{from: t + int64(ob), to: t + int64(off), at: t, nameBefore: name, offBefore: ob}, true
}

// gaps calls f for each gap whose jump instant is in (a, b], oldest first.
// Its work is one step per zone transition in the interval.
func (z zone) gaps(a, b int64, f func(gap)) {
	if z.fixed {
		return
	}
	for t := a; t < b; {
		_, end := time.Unix(t, 0).In(z.loc).ZoneBounds()
		if end.IsZero() {
			return
		}
		en := end.Unix() // the first transition after t
		if en > b {
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
	if z.fixed {
		return 0, 0, false
	}
	tm := time.Unix(t, 0).In(z.loc)
	start, _ := tm.ZoneBounds()
	if start.IsZero() {
		return 0, 0, false
	}
	st = start.Unix()
	_, off := tm.Zone()
	back = z.offset(st-1) - int64(off)
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
