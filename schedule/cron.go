package schedule

import "math/bits"

// Wall-clock arithmetic for cron expressions. A wall time is the reading of
// the schedule zone's clock, counted in seconds since 1970-01-01T00:00:00 of
// that clock (as if it were UTC): every civil day is exactly 86,400 wall
// seconds, whatever the zone does. A cron expression is a set of wall times
// ("slots"); zone.go maps slots to instants. Everything here is pure integer
// work: no time.Time, no allocation.

const (
	daySecs = 86400
	// starBit marks a field written as "*" (or "?"), robfig/cron's way.
	starBit   = 1 << 63
	mask60    = 1<<60 - 1
	mask24    = 1<<24 - 1
	maskDom   = (1<<32 - 1) &^ 1 // days 1..31
	maskMonth = (1<<13 - 1) &^ 1 // months 1..12
	maskDow   = 1<<7 - 1         // Sunday = 0 .. Saturday = 6
	// searchDays bounds a search for the next or previous slot: 8 years
	// covers "29 February" across a century year that is not a leap year.
	searchDays = 8*366 + 1
)

// cronSpec is a parsed cron expression as bit sets (cronparse.go), with
// cron(5)'s day-matching rule: day of month and day of week are ANDed when
// either is written with "*", ORed otherwise.
type cronSpec struct {
	sec, min, hour, dom, month, dow uint64
	domStar, dowStar                bool
	allDays                         bool // every day matches
	// wildcard: the minute or hour field starts with "*" (cronie's
	// MIN_STAR/HR_STAR): a cadence, not a fixed time of day (DST policy).
	wildcard   bool
	perDay     int64
	nMin, nSec int64
}

// finish masks the fields to their ranges and derives the counts.
func (c *cronSpec) finish() {
	c.domStar, c.dowStar = c.dom&starBit != 0, c.dow&starBit != 0
	c.sec, c.min, c.hour = c.sec&mask60, c.min&mask60, c.hour&mask24
	c.dom, c.month, c.dow = c.dom&maskDom, c.month&maskMonth, c.dow&maskDow
	c.nSec = int64(bits.OnesCount64(c.sec))
	c.nMin = int64(bits.OnesCount64(c.min))
	c.perDay = int64(bits.OnesCount64(c.hour)) * c.nMin * c.nSec
	c.allDays = c.month == maskMonth && c.dom == maskDom && c.dow == maskDow
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// civil returns the date of a day number (days since 1970-01-01), after
// Howard Hinnant's civil_from_days.
func civil(days int64) (y int64, m, d int) {
	z := days + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// dayNumber is civil's inverse (days_from_civil); d may be 0 or past the
// month's end: it counts on from the month's first day.
func dayNumber(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mm := int64(m)
	if m > 2 {
		mm -= 3
	} else {
		mm += 9
	}
	doy := (153*mm+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func weekday(days int64) int { return int(floorMod(days+4, 7)) } // 1970-01-01 was a Thursday

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// dayMatches reports whether a day has slots; ok is false when the month
// does not match, so a search can skip to the next month.
func (c *cronSpec) dayMatches(days int64) (match, monthOK bool) {
	if c.allDays {
		return true, true
	}
	_, m, d := civil(days)
	if c.month&(1<<m) == 0 {
		return false, false
	}
	domOK := c.dom&(1<<d) != 0
	dowOK := c.dow&(1<<weekday(days)) != 0
	if c.domStar || c.dowStar {
		return domOK && dowOK, true
	}
	return domOK || dowOK, true
}

// nextBit is the lowest set bit of mask at or above from.
func nextBit(mask uint64, from int) (int, bool) {
	if from > 63 {
		return 0, false
	}
	m := mask &^ (1<<uint(from) - 1)
	if m == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(m), true
}

// prevBit is the highest set bit of mask at or below from.
func prevBit(mask uint64, from int) (int, bool) {
	if from < 0 {
		return 0, false
	}
	m := mask
	if from < 63 {
		m &= 1<<uint(from+1) - 1
	}
	if m == 0 {
		return 0, false
	}
	return 63 - bits.LeadingZeros64(m), true
}

// firstInDay is the first slot second-of-day at or after sod.
func (c *cronSpec) firstInDay(sod int) (int, bool) {
	h, m, s := sod/3600, sod/60%60, sod%60
	for h < 24 {
		hh, ok := nextBit(c.hour, h)
		if !ok {
			return 0, false
		}
		if hh > h {
			h, m, s = hh, 0, 0
		}
		for m < 60 {
			mm, ok := nextBit(c.min, m)
			if !ok {
				break
			}
			if mm > m {
				m, s = mm, 0
			}
			if ss, ok := nextBit(c.sec, s); ok {
				return h*3600 + m*60 + ss, true
			}
			m, s = m+1, 0
		}
		h, m, s = h+1, 0, 0
	}
	return 0, false
}

// lastInDay is the last slot second-of-day at or before sod.
func (c *cronSpec) lastInDay(sod int) (int, bool) {
	h, m, s := sod/3600, sod/60%60, sod%60
	for h >= 0 {
		hh, ok := prevBit(c.hour, h)
		if !ok {
			return 0, false
		}
		if hh < h {
			h, m, s = hh, 59, 59
		}
		for m >= 0 {
			mm, ok := prevBit(c.min, m)
			if !ok {
				break
			}
			if mm < m {
				m, s = mm, 59
			}
			if ss, ok := prevBit(c.sec, s); ok {
				return h*3600 + m*60 + ss, true
			}
			m, s = m-1, 59
		}
		h, m, s = h-1, 59, 59
	}
	return 0, false
}

// nextSlot is the first slot at or after wall time w.
func (c *cronSpec) nextSlot(w int64) (int64, bool) { return c.scan(w, 1, c.firstInDay) }

// prevSlot is the last slot at or before wall time w.
func (c *cronSpec) prevSlot(w int64) (int64, bool) { return c.scan(w, -1, c.lastInDay) }

// scan walks the days from wall time w, forward (dir 1) or back (dir -1),
// for at most searchDays, and returns the first slot it meets: inDay finds
// it within a matching day from a second of that day on (w's on w's day;
// the day's first going forward, its last going back, on the others). A
// day of a month the spec excludes moves the walk to the next month's
// first day, or the previous month's last.
func (c *cronSpec) scan(w, dir int64, inDay func(sod int) (int, bool)) (int64, bool) {
	day := floorDiv(w, daySecs)
	sod := int(w - day*daySecs)
	from := 0 // where the walk enters a day
	if dir < 0 {
		from = daySecs - 1
	}
	for i := 0; i < searchDays; {
		match, monthOK := c.dayMatches(day)
		if monthOK && match {
			if s, ok := inDay(sod); ok {
				return day*daySecs + int64(s), true
			}
		}
		next := day + dir
		if !monthOK {
			next = monthEdge(day, dir)
		}
		i += int((next - day) * dir)
		day, sod = next, from
	}
	return 0, false
}

// monthEdge is the first day of the month after day's (dir 1) or the last
// day of the month before it (dir -1).
func monthEdge(day, dir int64) int64 {
	y, m, _ := civil(day)
	switch {
	case dir < 0:
		return dayNumber(y, m, 1) - 1
	case m == 12:
		return dayNumber(y+1, 1, 1)
	default:
		return dayNumber(y, m+1, 1)
	}
}

// isSlot reports whether wall time w is a slot.
func (c *cronSpec) isSlot(w int64) bool {
	day := floorDiv(w, daySecs)
	if match, _ := c.dayMatches(day); !match {
		return false
	}
	sod := w - day*daySecs
	return c.hour&(1<<(sod/3600)) != 0 && c.min&(1<<(sod/60%60)) != 0 && c.sec&(1<<(sod%60)) != 0
}

// before counts the slots of a matching day whose second-of-day is below
// sod (0..86400).
func (c *cronSpec) before(sod int64) int64 {
	if sod >= daySecs {
		return c.perDay
	}
	h, m, s := sod/3600, sod/60%60, sod%60
	n := int64(bits.OnesCount64(c.hour&(1<<uint(h)-1))) * c.nMin * c.nSec
	if c.hour&(1<<uint(h)) != 0 {
		n += int64(bits.OnesCount64(c.min&(1<<uint(m)-1))) * c.nSec
		if c.min&(1<<uint(m)) != 0 {
			n += int64(bits.OnesCount64(c.sec & (1<<uint(s) - 1)))
		}
	}
	return n
}

// count is the number of slots in the wall interval [lo, hi). Its work is
// one step per civil day of the interval (constant for expressions that
// match every day).
func (c *cronSpec) count(lo, hi int64) int64 {
	if hi <= lo {
		return 0
	}
	dLo, dHi := floorDiv(lo, daySecs), floorDiv(hi, daySecs)
	sLo, sHi := lo-dLo*daySecs, hi-dHi*daySecs
	if dLo == dHi {
		if match, _ := c.dayMatches(dLo); match {
			return c.before(sHi) - c.before(sLo)
		}
		return 0
	}
	var n int64
	if match, _ := c.dayMatches(dLo); match {
		n += c.perDay - c.before(sLo)
	}
	if match, _ := c.dayMatches(dHi); match {
		n += c.before(sHi)
	}
	if c.allDays {
		return n + (dHi-dLo-1)*c.perDay
	}
	for d := dLo + 1; d < dHi; d++ {
		if match, _ := c.dayMatches(d); match {
			n += c.perDay
		}
	}
	return n
}
