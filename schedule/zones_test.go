package schedule

import (
	"archive/zip"
	"io/fs"
	"math/rand"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// callLimit bounds one call of the calendar in these tests: a hang fails
// the test instead of stalling it (a loop over calendar time that waits
// for a library answer to move forward).
const callLimit = 5 * time.Second

// within runs f, failing t when it does not return within callLimit.
func within(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	timer := time.NewTimer(callLimit)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s did not return within %s", what, callLimit)
	}
}

// On 31 December of leap years in the range of a zone's POSIX rule, Go's
// ZoneBounds answers an end before the instant asked; the transition walk
// (zone.gaps, used by Count and Due) set t = end and never ended. Every
// zone with DST rules hung there; the answers are now those of any other
// day.
func TestZoneBoundsLeapYearEnd(t *testing.T) {
	for _, tz := range []string{"Europe/Berlin", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Pacific/Chatham"} {
		for _, year := range []string{"2040", "2044", "2096"} {
			c := mustCal(t, "0 * * * *", tz, Window{})
			what := tz + " " + year
			within(t, what+" Count", func() {
				if n := c.Count(utc(year+"-12-31T06:00:00Z"), utc(year+"-12-31T09:00:00Z")); n != 3 {
					t.Errorf("%s: Count = %d, want 3", what, n)
				}
			})
			within(t, what+" Due", func() {
				d, err := c.Due(utc(year+"-12-31T10:00:00Z"), utc(year+"-12-31T11:00:00Z"), 72*time.Hour, 0, 1000)
				if err != nil || len(d.Create) != 1 || len(d.Skipped) != 0 || d.Through != utc(year+"-12-31T11:00:00Z") {
					t.Errorf("%s: Due = %+v, %v", what, d, err)
				}
			})
			for _, at := range []string{"-12-31T00:00:00Z", "-12-31T12:00:00Z", "-12-31T23:30:00Z"} {
				checkAround(t, c, utc(year+at))
			}
		}
	}
}

var (
	zoneNamesOnce sync.Once
	zoneNames     []string
)

// allZones lists the zones Go ships (GOROOT/lib/time/zoneinfo.zip), or
// the system's (/usr/share/zoneinfo) when that is missing.
func allZones(t testing.TB) []string {
	zoneNamesOnce.Do(func() {
		if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
			if r, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(out)), "lib", "time", "zoneinfo.zip")); err == nil {
				for _, f := range r.File {
					if !strings.HasSuffix(f.Name, "/") {
						zoneNames = append(zoneNames, f.Name)
					}
				}
				r.Close()
			}
		}
		if len(zoneNames) > 0 {
			return
		}
		root := "/usr/share/zoneinfo"
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.Contains(p, ".") {
				name, _ := filepath.Rel(root, p)
				if _, err := time.LoadLocation(name); err == nil && !strings.HasPrefix(name, "posix") && !strings.HasPrefix(name, "right") {
					zoneNames = append(zoneNames, name)
				}
			}
			return nil
		})
	})
	if len(zoneNames) < 300 {
		t.Skipf("found %d zones; no zone list here", len(zoneNames))
	}
	return zoneNames
}

// fuzzSpecs are the schedules the all-zones checks use: a wildcard hourly
// and quarter-hourly (DSTCadence under the default policy), a fixed time
// (DSTWallTime), each under the other policy too, and @every.
var fuzzSpecs = []Spec{{Expr: "0 * * * *"}, {Expr: "*/15 * * * *"}, {Expr: "30 2 * * *"}, {Expr: "@every 1h"},
	{Expr: "0 * * * *", DST: DSTWallTime}, {Expr: "30 2 * * *", DST: DSTCadence}, {Expr: "*/20 1-3 * * *", DST: DSTWallTime}}

func fuzzCal(t testing.TB, i int, tz string) *Calendar {
	sp := fuzzSpecs[i]
	sp.TimeZone = tz
	c, err := Compile(sp)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var (
	minFuzz = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	maxFuzz = time.Date(2100, 12, 31, 23, 59, 59, 0, time.UTC).UnixMilli()
)

// checkAround checks Next, Prev, Count and Due of c around instant x
// against each other, each call within callLimit.
func checkAround(t testing.TB, c *Calendar, x int64) {
	t.Helper()
	what := c.s.String() + " (" + c.s.DST().String() + ") in " + c.s.Location().String() + " at " + fmtMs(x)
	var next, prev, after []Occurrence
	var n1, n2, n3 int64
	var d Due
	var err error
	within(t, what, func() {
		next, prev = c.Next(x, 4), c.Prev(x, 4)
		if len(prev) > 0 {
			after = c.Next(prev[0].At, 1)
			n2 = c.Count(prev[len(prev)-1].At-1, x-1)
		}
		if len(next) > 0 {
			n1 = c.Count(x, next[len(next)-1].At)
		}
		d, err = c.Due(x-3*3600_000, x, 24*time.Hour, 0, 1000)
		n3 = c.Count(x-3*3600_000, x)
	})
	for i, o := range next {
		if o.At <= x || (i > 0 && o.At <= next[i-1].At) {
			t.Fatalf("%s: Next = %+v", what, next)
		}
		if c.s.kind == kindCron && c.s.cadence && !c.s.spec.isSlot(c.s.z.wall(o.At/1000)) {
			t.Fatalf("%s: cadence occurrence %+v: the clock does not show a slot", what, o)
		}
	}
	for i, o := range prev {
		if o.At >= x || (i > 0 && o.At >= prev[i-1].At) {
			t.Fatalf("%s: Prev = %+v", what, prev)
		}
	}
	if len(next) > 0 && n1 != int64(len(next)) {
		t.Fatalf("%s: Count up to the 4th next = %d (%+v)", what, n1, next)
	}
	if len(prev) > 0 && n2 != int64(len(prev)) {
		t.Fatalf("%s: Count from the 4th previous = %d (%+v)", what, n2, prev)
	}
	if len(prev) > 0 && (len(after) != 1 || after[0].At < x || (after[0].At > x && (len(next) == 0 || after[0] != next[0]))) {
		t.Fatalf("%s: Next after the previous %+v = %+v, Next = %+v", what, prev[0], after, next)
	}
	if err != nil || d.More || d.Through != x {
		t.Fatalf("%s: Due = %+v, %v", what, d, err)
	}
	made := int64(len(d.Create))
	for i, o := range d.Create {
		if o.At <= x-3*3600_000 || o.At > x || (i > 0 && o.At <= d.Create[i-1].At) {
			t.Fatalf("%s: Due created %+v", what, d.Create)
		}
	}
	for _, k := range d.Skipped {
		if k.Reason != SkipDSTGap {
			made += k.Count
		}
	}
	if made != n3 {
		t.Fatalf("%s: Due over 3 h made or skipped %d, Count says %d (%+v)", what, made, n3, d)
	}
}

// TestCalendarAllZones samples every zone Go knows, 1970–2100: random
// instants, 31 December 2040 (Go's ZoneBounds bug), and instants around
// one transition of a random year. FuzzCalendarZones explores further.
func TestCalendarAllZones(t *testing.T) {
	zones := allZones(t)
	rng := rand.New(rand.NewSource(23))
	for _, tz := range zones {
		cals := make([]*Calendar, len(fuzzSpecs))
		for i := range fuzzSpecs {
			cals[i] = fuzzCal(t, i, tz)
		}
		xs := []int64{utc("2040-12-31T12:00:00Z"), minFuzz + rng.Int63n(maxFuzz-minFuzz)}
		y := minFuzz + rng.Int63n(maxFuzz-minFuzz)
		var tr int64
		within(t, tz+" transition", func() {
			if e, ok := cals[0].s.z.nextChange(y/1000, y/1000+366*daySecs); ok {
				tr = e * 1000
			}
		})
		if tr != 0 {
			xs = append(xs, tr-1000, tr, tr+1800_000)
		}
		for _, x := range xs {
			for _, c := range cals {
				checkAround(t, c, x)
			}
		}
	}
}

// FuzzCalendarZones checks Next, Prev, Count and Due against each other
// at any instant of 1970–2100 in any zone Go knows, each call within
// callLimit (scripts/test.sh runs it with COORDD_FUZZTIME).
func FuzzCalendarZones(f *testing.F) {
	zones := allZones(f)
	f.Add(uint16(0), utc("2040-12-31T06:00:00Z"), uint8(0))
	f.Add(uint16(1), utc("2044-12-31T23:00:00Z"), uint8(1))
	cache := map[[2]int]*Calendar{}
	var mu sync.Mutex
	f.Fuzz(func(t *testing.T, zi uint16, at int64, ei uint8) {
		z, e := int(zi)%len(zones), int(ei)%len(fuzzSpecs)
		mu.Lock()
		c, ok := cache[[2]int{z, e}]
		mu.Unlock()
		if !ok {
			c = fuzzCal(t, e, zones[z])
			mu.Lock()
			cache[[2]int{z, e}] = c
			mu.Unlock()
		}
		x := minFuzz + floorMod(at, maxFuzz-minFuzz)
		checkAround(t, c, x)
	})
}
