package schedule

// The occurrence engine: instants in Unix ms (what the API speaks), cron
// and @every occurrences on whole seconds.

// occ is one occurrence: its instant (ms) and, for cron schedules, the
// slot (wall time, seconds) it was scheduled for.
type occ struct {
	at     int64
	wall   int64
	dstGap bool // the slot's wall time was skipped by the zone: at is the end of the gap
	second bool // DSTCadence: in the second pass of a repeated interval
}

// gapRep is the slot that stands for the slots of gap g: they all belong
// to the instant the gap ends, and run once. When the schedule has a slot
// at the first wall time after the gap, that slot (an ordinary occurrence
// at that instant) absorbs them and moved is false; otherwise the last
// slot inside the gap runs at the gap's end and moved is true. ok is false
// when the gap holds no slot.
func (s *Schedule) gapRep(g gap) (rep int64, moved bool) {
	if s.spec.isSlot(g.to) {
		return g.to, false
	}
	last, ok := s.spec.prevSlot(g.to - 1)
	if !ok || last < g.from {
		return g.to, false
	}
	return last, true
}

// cronOcc is the occurrence of slot sl.
func (s *Schedule) cronOcc(sl int64) occ {
	t, g, ok := s.z.instant(sl)
	if ok {
		return occ{at: t * 1000, wall: sl}
	}
	rep, moved := s.gapRep(g)
	return occ{at: g.at * 1000, wall: rep, dstGap: moved}
}

// nextAfter is the first occurrence strictly after instant x (ms).
func (s *Schedule) nextAfter(x int64) (occ, bool) {
	switch s.kind {
	case kindOnce:
		if s.onceMs > x {
			return occ{at: s.onceMs}, true
		}
		return occ{}, false
	case kindEvery:
		d := s.every * 1000
		at := (floorDiv(x, d) + 1) * d
		return occ{at: at, wall: s.z.wall(at / 1000)}, true
	}
	if s.cadence {
		t, ok := s.nextCadence(floorDiv(x, 1000))
		if !ok {
			return occ{}, false
		}
		return s.occAt(t), true
	}
	// Slots due by x are those up to wallHigh(x); the next occurrence is
	// the first slot above.
	sl, ok := s.spec.nextSlot(s.z.wallHigh(floorDiv(x, 1000)) + 1)
	if !ok {
		return occ{}, false
	}
	return s.cronOcc(sl), true
}

// atOrBefore is the last occurrence at or before instant y (ms).
func (s *Schedule) atOrBefore(y int64) (occ, bool) {
	switch s.kind {
	case kindOnce:
		if s.onceMs <= y {
			return occ{at: s.onceMs}, true
		}
		return occ{}, false
	case kindEvery:
		d := s.every * 1000
		at := floorDiv(y, d) * d
		return occ{at: at, wall: s.z.wall(at / 1000)}, true
	}
	if s.cadence {
		t, ok := s.prevCadence(floorDiv(y, 1000))
		if !ok {
			return occ{}, false
		}
		return s.occAt(t), true
	}
	sl, ok := s.spec.prevSlot(s.z.wallHigh(floorDiv(y, 1000)))
	if !ok {
		return occ{}, false
	}
	return s.cronOcc(sl), true
}

// count is the number of occurrences in (a, b] (ms). Its work is one step
// per civil day and per zone transition in the interval for cron
// expressions (constant for those that match every day), constant
// otherwise — never one step per occurrence.
func (s *Schedule) count(a, b int64) int64 {
	if b <= a {
		return 0
	}
	switch s.kind {
	case kindOnce:
		if a < s.onceMs && s.onceMs <= b {
			return 1
		}
		return 0
	case kindEvery:
		d := s.every * 1000
		return floorDiv(b, d) - floorDiv(a, d)
	}
	as, bs := floorDiv(a, 1000), floorDiv(b, 1000)
	if bs <= as {
		return 0
	}
	if s.cadence {
		return s.countCadence(as, bs)
	}
	n := s.spec.count(s.z.wallHigh(as)+1, s.z.wallHigh(bs)+1)
	s.z.gaps(as, bs, func(g gap) { n -= s.absorbed(g) })
	return n
}

// absorbed is the number of slots of gap g that do not run on their own
// (they are represented by gapRep).
func (s *Schedule) absorbed(g gap) int64 {
	k := s.spec.count(g.from, g.to)
	if k == 0 || s.spec.isSlot(g.to) || s.cadence { // cadence: none of them runs
		return k
	}
	return k - 1
}

// DSTCadence: the occurrences are the instants at which the zone's clock
// shows a slot. On a zone period (constant offset) the wall reading grows
// with the instant, so each search is a slot search per period, one step
// per transition, bounded.

// nextCadence is the first instant after t (seconds) whose wall reading
// is a slot.
func (s *Schedule) nextCadence(t int64) (int64, bool) {
	x := t + 1
	for i := 0; i < maxZoneSteps; i++ {
		off := s.z.offset(x)
		sl, ok := s.spec.nextSlot(x + off)
		if !ok {
			return 0, false
		}
		c := sl - off
		en, changed := s.z.nextChange(x, c)
		if !changed {
			return c, true // the offset holds on [x, c]
		}
		x = en // no slot on [x, en): go on in the next period
	}
	return 0, false
}

// prevCadence is the last instant at or before t (seconds) whose wall
// reading is a slot.
func (s *Schedule) prevCadence(t int64) (int64, bool) {
	y := t
	for i := 0; i < maxZoneSteps; i++ {
		off := s.z.offset(y)
		sl, ok := s.spec.prevSlot(y + off)
		if !ok {
			return 0, false
		}
		c := sl - off
		st, changed := s.z.prevChange(y)
		if !changed || c >= st {
			return c, true // the offset holds on [c, y]
		}
		y = st - 1
	}
	return 0, false
}

// countCadence is the number of instants in (a, b] (seconds) whose wall
// reading is a slot: the slots of each zone period's wall interval.
func (s *Schedule) countCadence(a, b int64) int64 {
	var n int64
	for lo := a + 1; lo <= b; {
		hi := b + 1
		if en, ok := s.z.nextChange(lo, b); ok && en > lo {
			hi = en
		}
		off := s.z.offset(lo)
		n += s.spec.count(lo+off, hi+off)
		lo = hi
	}
	return n
}
