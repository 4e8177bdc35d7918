package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func must(t *testing.T, expr, tz string) *Schedule {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseForms(t *testing.T) {
	for expr, interval := range map[string]time.Duration{
		"5 0 * * *":               24 * time.Hour,
		"*/15 * * * *":            15 * time.Minute,
		"@seconds 30 * * * * *":   time.Minute, // with seconds
		"@hourly":                 time.Hour,
		"@every 30s":              30 * time.Second,
		"0 0 * * MON":             7 * 24 * time.Hour,
		"@seconds */10 * * * * *": 10 * time.Second,
		"0 0 29 2 *":              (4*365 + 1) * 24 * time.Hour,
	} {
		s := must(t, expr, "America/Sao_Paulo")
		if s.Interval() != interval {
			t.Errorf("%s: interval %s, want %s", expr, s.Interval(), interval)
		}
	}
	// Months differ in length: a monthly interval is at least the shortest.
	for _, tz := range []string{"America/Sao_Paulo", "UTC"} {
		if s := must(t, "0 9 1 * *", tz); s.Interval() < 28*24*time.Hour {
			t.Errorf("0 9 1 * * in %s: interval %s", tz, s.Interval())
		}
	}
	for _, bad := range []string{"", "nonsense", "61 * * * *", "CRON_TZ=UTC 0 * * * *", "@once yesterday"} {
		if _, err := Parse(bad, "UTC"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := Parse("@daily", "Mars/Olympus"); err == nil {
		t.Error("bad zone accepted")
	}
}

// The window is the occurrence's business day in the job's zone, whatever
// the UTC date, and a late start does not move it.
func TestWindowFromOccurrence(t *testing.T) {
	s := must(t, "55 23 * * *", "America/Sao_Paulo")
	occ := s.Next(time.Date(2026, 9, 25, 12, 0, 0, 0, time.UTC))
	if got := occ.UTC().Format(time.RFC3339); got != "2026-09-26T02:55:00Z" {
		t.Fatalf("occurrence %s", got)
	}
	if k := s.Key(occ, Window{}); k != "2026-09-25" {
		t.Fatalf("window %s", k)
	}
	// The 00:05 run closes the previous business day.
	closer := must(t, "5 0 * * *", "America/Sao_Paulo")
	occ = closer.Next(time.Date(2026, 9, 26, 0, 0, 0, 0, closer.Location()))
	if k := closer.Key(occ, Window{ShiftDays: -1}); k != "2026-09-25" {
		t.Fatalf("previous-day window %s", k)
	}
}

// Daylight saving time in the job's zone: every calendar day has exactly
// one window and one occurrence, also on the days the clocks move. A wall
// time that happens twice (01:30 on the fall-back day) runs once, at the
// first; a wall time that never happens (02:30 on the spring-forward day)
// runs when the gap ends (03:00 EDT) and keeps its day (DESIGN.md).
func TestDSTTransitions(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	for _, expr := range []string{"30 2 * * *", "30 1 * * *", "0 0 * * *", "@daily"} {
		s := must(t, expr, "America/New_York")
		if s.Interval() != 24*time.Hour {
			t.Fatalf("%s: interval %s", expr, s.Interval())
		}
		occs := s.Between(time.Date(2026, 3, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 15, 0, 0, 0, 0, ny), 1000)
		seen := map[string]int{}
		prev := ""
		for _, o := range occs {
			k := s.Key(o, Window{})
			if k <= prev {
				t.Fatalf("%s: window %s after %s", expr, k, prev)
			}
			prev = k
			seen[k]++
		}
		for d := time.Date(2026, 3, 2, 12, 0, 0, 0, ny); d.Before(time.Date(2026, 11, 14, 0, 0, 0, 0, ny)); d = d.AddDate(0, 0, 1) {
			if k := d.Format("2006-01-02"); seen[k] != 1 {
				t.Fatalf("%s: %d windows for %s", expr, seen[k], k)
			}
		}
	}
	gap := must(t, "30 2 * * *", "America/New_York").Next(time.Date(2026, 3, 7, 12, 0, 0, 0, ny))
	if want := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC); !gap.Equal(want) {
		t.Fatalf("02:30 on 2026-03-08 ran at %s, want %s (03:00 EDT)", gap, want)
	}
	// Hourly under DSTWallTime: across the fall-back hour 01:00 runs once,
	// and a layout with the offset changes nothing. Under the default
	// (a wildcard hour: cadence) it runs at both 01:00s, an hour apart.
	for dst, n := range map[DSTPolicy]int{DSTWallTime: 3, DSTAuto: 4} {
		c, _ := Compile(Spec{Expr: "0 * * * *", TimeZone: "America/New_York", DST: dst})
		s := c.Schedule()
		occs := s.Between(time.Date(2026, 11, 1, 0, 30, 0, 0, ny), time.Date(2026, 11, 1, 3, 30, 0, 0, ny), 10)
		if len(occs) != n { // 01:00 EDT, (01:00 EST), 02:00 EST, 03:00 EST over four real hours
			t.Fatalf("%s: hourly across fall-back: %v", dst, occs)
		}
		for _, layout := range []string{"2006-01-02T15Z07", ""} {
			keys := map[string]int{}
			for _, o := range occs {
				keys[s.Key(o, Window{Layout: layout})]++
			}
			if len(keys) != n {
				t.Fatalf("%s %q: keys %v (%v)", dst, layout, keys, occs)
			}
		}
	}
}

// @every is aligned to the epoch: every replica computes the same
// occurrences, whenever it asks.
func TestEveryIsAligned(t *testing.T) {
	s := must(t, "@every 30s", "UTC")
	a := s.Next(time.Date(2026, 1, 1, 0, 0, 7, 123, time.UTC))
	b := s.Next(time.Date(2026, 1, 1, 0, 0, 29, 0, time.UTC))
	if !a.Equal(b) || !a.Equal(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)) {
		t.Fatalf("%v %v", a, b)
	}
	if n := s.Next(a); !n.Equal(a.Add(30 * time.Second)) {
		t.Fatalf("after an occurrence: %v", n)
	}
	for _, bad := range []string{"@every 1500ms", "@every 0s", "@every x"} {
		if _, err := Parse(bad, "UTC"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestBetweenAndOnce(t *testing.T) {
	s := must(t, "@every 1m", "UTC")
	from := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	got := s.Between(from, from.Add(10*time.Minute), 3)
	if len(got) != 3 || !got[2].Equal(time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)) {
		t.Fatalf("between: %v", got)
	}
	once := must(t, "@once 2026-09-25T10:00:00Z", "UTC")
	at := time.Date(2026, 9, 25, 10, 0, 0, 0, time.UTC)
	if !once.Next(at.Add(-time.Second)).Equal(at) || !once.Next(at).IsZero() || once.Key(at, Window{}) != OnceWindow {
		t.Fatal("one-shot")
	}
}

// Standard cron has five fields; a six-field expression is refused (it
// was read seconds first: the typo "5 0 * * * *" became hourly at
// :00:05), naming the form that gives a seconds field.
func TestSixFieldsNeedSecondsPrefix(t *testing.T) {
	_, err := Parse("5 0 * * * *", "UTC")
	if err == nil || !strings.Contains(err.Error(), `write "@seconds 5 0 * * * *"`) {
		t.Fatalf("six fields: %v", err)
	}
	s := must(t, "@seconds 5 0 * * * *", "UTC")
	if got := s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)) {
		t.Fatalf("@seconds 5 0 * * * *: %s", got)
	}
	if got := s.Next(time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)); !got.Equal(time.Date(2026, 1, 1, 1, 0, 5, 0, time.UTC)) {
		t.Fatalf("@seconds 5 0 * * * * second run: %s", got)
	}
	for _, bad := range []string{"@seconds 5 0 * * *", "1 2 3 4 5 6 7", "* * * *"} {
		if _, err := Parse(bad, "UTC"); err == nil || !strings.Contains(err.Error(), "fields") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Parse errors name the field and the bad token in plain words.
func TestCronErrorsNameFieldAndToken(t *testing.T) {
	for expr, want := range map[string]string{
		"0 9 * * mon-fry":      `day-of-week field: "fry" is not a day name (mon..sun) or a number 0-7`,
		"61 * * * *":           `minute field: "61" is not a number 0-59`,
		"0 24 * * *":           `hour field: "24" is not a number 0-23`,
		"0 0 0 * *":            `day-of-month field: "0" is not a number 1-31`,
		"0 0 1 foo *":          `month field: "foo" is not a month name (jan..dec) or a number 1-12`,
		"*/0 * * * *":          `minute field: "*/0": the step after '/' must be a whole number of at least 1`,
		"0 5-2 * * *":          `hour field: "5-2": the range ends before it starts`,
		"0 1,,2 * * *":         `hour field: empty element in "1,,2"`,
		"0 0 * * 1-":           `day-of-week field: a value is missing`,
		"@fortnightly":         `unknown descriptor "@fortnightly"`,
		"@seconds x * * * * *": `second field: "x" is not a number 0-59`,
	} {
		_, err := Parse(expr, "UTC")
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "schedule" || !strings.Contains(ie.Reason, want) {
			t.Errorf("%q: %v, want %q", expr, err, want)
		}
	}
	// Names in any case; 7 is Sunday, as 0.
	a, b := must(t, "0 9 * * MON-Fri,7", "UTC"), must(t, "0 9 * * 0-5", "UTC")
	for x := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); x.Before(time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC)); {
		na, nb := a.Next(x), b.Next(x)
		if !na.Equal(nb) {
			t.Fatalf("after %s: %s and %s", x, na, nb)
		}
		x = na
	}
}
