package schedule

import (
	"fmt"
	"testing"
	"time"

	_ "time/tzdata" // the same zone data wherever the tests run
)

func mustCal(t *testing.T, expr, tz string, w Window) *Calendar {
	t.Helper()
	c, err := Compile(Spec{Expr: expr, TimeZone: tz, Window: w})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustCalDST(t *testing.T, expr, tz string, w Window, dst DSTPolicy) *Calendar {
	t.Helper()
	c, err := Compile(Spec{Expr: expr, TimeZone: tz, Window: w, DST: dst})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func utc(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

type want struct {
	at     string // UTC instant
	window string
	gap    bool
}

func checkOccurrences(t *testing.T, c *Calendar, from string, ws []want) {
	t.Helper()
	got := c.Next(utc(from), len(ws))
	if len(got) != len(ws) {
		t.Fatalf("%s: %d occurrences, want %d", c.s, len(got), len(ws))
	}
	for i, w := range ws {
		if fmtMs(got[i].At) != w.at || got[i].Window != w.window || got[i].DSTGap != w.gap {
			t.Errorf("%s #%d: got %s %s gap=%v, want %s %s gap=%v", c.s, i, fmtMs(got[i].At), got[i].Window, got[i].DSTGap, w.at, w.window, w.gap)
		}
	}
	// Prev walks the same occurrences back.
	back := c.Prev(got[len(got)-1].At+1, len(ws))
	for i := range back {
		if back[i] != got[len(got)-1-i] {
			t.Errorf("%s: Prev #%d = %+v, Next gave %+v", c.s, i, back[i], got[len(got)-1-i])
		}
	}
}

// A daily 02:30 job in Europe/Berlin (clocks jump 02:00→03:00 on
// 2026-03-29 and 03:00→02:00 on 2026-10-25): on the spring-forward day
// 02:30 never happens, so the occurrence runs when the gap ends (03:00
// CEST, 01:00Z), flagged DSTGap, still in the business day 2026-03-29; on
// the fall-back day 02:30 happens twice and runs once, at the first
// (CEST). Kubernetes CronJob and Temporal (both) skip the first and run the
// second twice.
func TestDSTBerlinDaily0230(t *testing.T) {
	for _, layout := range []string{"", "2006-01-02T15:04"} {
		c := mustCal(t, "30 2 * * *", "Europe/Berlin", Window{Layout: layout})
		day := func(s string) string {
			if layout == "" {
				return s[:10]
			}
			return s
		}
		checkOccurrences(t, c, "2026-03-27T12:00:00Z", []want{
			{"2026-03-28T01:30:00Z", day("2026-03-28T02:30"), false}, // 02:30 CET
			{"2026-03-29T01:00:00Z", day("2026-03-29T02:30"), true},  // 03:00 CEST: the gap's end
			{"2026-03-30T00:30:00Z", day("2026-03-30T02:30"), false}, // 02:30 CEST
		})
		checkOccurrences(t, c, "2026-10-23T12:00:00Z", []want{
			{"2026-10-24T00:30:00Z", day("2026-10-24T02:30"), false}, // 02:30 CEST
			{"2026-10-25T00:30:00Z", day("2026-10-25T02:30"), false}, // the first 02:30 (CEST); not again at 01:30Z (CET)
			{"2026-10-26T01:30:00Z", day("2026-10-26T02:30"), false}, // 02:30 CET
		})
	}
}

// America/Sao_Paulo has had no DST since 2019; in 2018/19 it jumped at
// midnight (2018-11-04 00:00→01:00, 2019-02-17 00:00→2019-02-16 23:00), so
// a 02:30 job is untouched — one run a day at the new offset — while a
// midnight job (@daily) falls in the gap and one at 23:30 in the repeat.
func TestDSTSaoPaulo(t *testing.T) {
	c := mustCal(t, "30 2 * * *", "America/Sao_Paulo", Window{})
	checkOccurrences(t, c, "2018-11-02T12:00:00Z", []want{
		{"2018-11-03T05:30:00Z", "2018-11-03", false}, // 02:30 -03
		{"2018-11-04T04:30:00Z", "2018-11-04", false}, // 02:30 -02: the day lost its first hour, not 02:30
		{"2018-11-05T04:30:00Z", "2018-11-05", false},
	})
	checkOccurrences(t, c, "2019-02-15T12:00:00Z", []want{
		{"2019-02-16T04:30:00Z", "2019-02-16", false}, // 02:30 -02
		{"2019-02-17T05:30:00Z", "2019-02-17", false}, // 02:30 -03, once
		{"2019-02-18T05:30:00Z", "2019-02-18", false},
	})
	daily := mustCal(t, "@daily", "America/Sao_Paulo", Window{})
	checkOccurrences(t, daily, "2018-11-02T12:00:00Z", []want{
		{"2018-11-03T03:00:00Z", "2018-11-03", false},
		{"2018-11-04T03:00:00Z", "2018-11-04", true}, // midnight never happened: runs at 01:00 -02
		{"2018-11-05T02:00:00Z", "2018-11-05", false},
	})
	late := mustCal(t, "30 23 * * *", "America/Sao_Paulo", Window{})
	checkOccurrences(t, late, "2019-02-15T12:00:00Z", []want{
		{"2019-02-16T01:30:00Z", "2019-02-15", false}, // 23:30 -02
		{"2019-02-17T01:30:00Z", "2019-02-16", false}, // the first 23:30 (-02); not again at 02:30Z (-03)
		{"2019-02-18T02:30:00Z", "2019-02-17", false}, // 23:30 -03
	})
	// The 00:05 close of the previous business day across the gap night.
	closer := mustCal(t, "5 0 * * *", "America/Sao_Paulo", Window{ShiftDays: -1})
	checkOccurrences(t, closer, "2018-11-02T12:00:00Z", []want{
		{"2018-11-03T03:05:00Z", "2018-11-02", false},
		{"2018-11-04T03:00:00Z", "2018-11-03", true}, // 00:05 never happened: 01:00 -02 closes Nov 3
		{"2018-11-05T02:05:00Z", "2018-11-04", false},
	})
}

// Due across both Berlin transitions for the daily 02:30 job: the
// leader's view (a tick every hour for two days around each change) makes
// exactly one occurrence per day, nothing skipped.
func TestDSTDueDaily(t *testing.T) {
	for _, tc := range []struct{ zone, from string }{
		{"Europe/Berlin", "2026-03-27T12:00:00Z"}, {"Europe/Berlin", "2026-10-23T12:00:00Z"},
		{"America/Sao_Paulo", "2018-11-02T12:00:00Z"}, {"America/Sao_Paulo", "2019-02-15T12:00:00Z"},
	} {
		c := mustCal(t, "30 2 * * *", tc.zone, Window{})
		last := utc(tc.from)
		days := map[string]int{}
		for now := last + 3600_000; now <= utc(tc.from)+4*86400_000; now += 3600_000 {
			d, err := c.Due(last, now, time.Hour, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Skipped) != 0 || d.More || d.Through != now {
				t.Fatalf("%s at %s: %+v", tc.zone, fmtMs(now), d)
			}
			for _, o := range d.Create {
				days[o.Window]++
			}
			last = d.Through
		}
		if len(days) != 4 {
			t.Fatalf("%s from %s: windows %v", tc.zone, tc.from, days)
		}
		for k, n := range days {
			if n != 1 {
				t.Fatalf("%s: window %s created %d times", tc.zone, k, n)
			}
		}
	}
}

// An every-minute expression across Berlin's spring-forward: the 60 wall
// minutes 02:00–02:59 do not exist; 03:00 CEST runs once (not 61 times)
// and the 60 skipped minutes are one DST_GAP record.
func TestDSTGapCollapsesAndReports(t *testing.T) {
	c := mustCal(t, "* * * * *", "Europe/Berlin", Window{})
	d, err := c.Due(utc("2026-03-29T00:50:00Z"), utc("2026-03-29T01:10:00Z"), time.Hour, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Create) != 20 { // 01:51–01:59 CET, 03:00–03:10 CEST
		t.Fatalf("created %d: %+v", len(d.Create), d.Create)
	}
	if o := d.Create[9]; fmtMs(o.At) != "2026-03-29T01:00:00Z" || o.Window != "2026-03-29T03:00" || o.DSTGap {
		t.Fatalf("at the gap's end: %+v", o)
	}
	want := Skipped{Reason: SkipDSTGap, First: utc("2026-03-29T01:00:00Z"), Last: utc("2026-03-29T01:00:00Z"), Count: 60,
		FirstWindow: "2026-03-29T02:00", LastWindow: "2026-03-29T02:59"}
	if len(d.Skipped) != 1 || d.Skipped[0] != want {
		t.Fatalf("skipped %+v", d.Skipped)
	}
	if n := c.Count(utc("2026-03-29T00:50:00Z"), utc("2026-03-29T01:10:00Z")); n != 20 {
		t.Fatalf("count %d", n)
	}
	// Two slots in the gap and none at its end: the last runs at 03:00,
	// the other is reported.
	two := mustCal(t, "0,30 2 * * *", "Europe/Berlin", Window{})
	d, _ = two.Due(utc("2026-03-28T12:00:00Z"), utc("2026-03-29T12:00:00Z"), 24*time.Hour, 0, 10)
	if len(d.Create) != 1 || d.Create[0].Window != "2026-03-29T02:30" || !d.Create[0].DSTGap ||
		len(d.Skipped) != 1 || d.Skipped[0].FirstWindow != "2026-03-29T02:00" || d.Skipped[0].Count != 1 {
		t.Fatalf("two slots in the gap: %+v", d)
	}
}

// @every is real time: it keeps its cadence through the repeated hour, but
// with a layout that has no offset the second pass's window keys are the
// first pass's, so those occurrences are reported DST_REPEAT instead of
// silently colliding on the job's unique key. With the offset in the
// layout they are distinct windows and are created.
func TestDSTEveryRepeat(t *testing.T) {
	last, now := utc("2026-10-25T00:50:00Z"), utc("2026-10-25T02:10:00Z") // 02:50 CEST → 03:10 CET
	c := mustCal(t, "@every 1m", "Europe/Berlin", Window{})
	d, err := c.Due(last, now, 2*time.Hour, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := Skipped{Reason: SkipDSTRepeat, First: utc("2026-10-25T01:00:00Z"), Last: utc("2026-10-25T01:59:00Z"), Count: 60,
		FirstWindow: "2026-10-25T02:00", LastWindow: "2026-10-25T02:59"}
	if len(d.Create) != 20 || len(d.Skipped) != 1 || d.Skipped[0] != want {
		t.Fatalf("created %d, skipped %+v", len(d.Create), d.Skipped)
	}
	seen := map[string]bool{}
	for _, o := range d.Create {
		if seen[o.Window] {
			t.Fatalf("window %s twice", o.Window)
		}
		seen[o.Window] = true
	}
	off := mustCal(t, "@every 1m", "Europe/Berlin", Window{Layout: "2006-01-02T15:04Z07:00"})
	if d, _ := off.Due(last, now, 2*time.Hour, 0, 1000); len(d.Create) != 80 || len(d.Skipped) != 0 {
		t.Fatalf("offset layout: created %d, skipped %+v", len(d.Create), d.Skipped)
	}
	// A cron expression under DSTWallTime has no second pass: its wall
	// times run once. Under DSTCadence (the default for "* * * * *") it
	// runs in both passes, the second's windows with the offset.
	cr := mustCalDST(t, "* * * * *", "Europe/Berlin", Window{}, DSTWallTime)
	if d, _ := cr.Due(last, now, 2*time.Hour, 0, 1000); len(d.Create) != 20 || len(d.Skipped) != 0 {
		t.Fatalf("cron in the repeat: created %d, skipped %+v", len(d.Create), d.Skipped)
	}
	cr = mustCal(t, "* * * * *", "Europe/Berlin", Window{})
	d, _ = cr.Due(last, now, 2*time.Hour, 0, 1000)
	keys := map[string]bool{}
	for _, o := range d.Create {
		keys[o.Window] = true
	}
	if len(d.Create) != 80 || len(keys) != 80 || len(d.Skipped) != 0 || !keys["2026-10-25T02:55+01:00"] || !keys["2026-10-25T02:55"] {
		t.Fatalf("cadence cron in the repeat: created %d (%d keys), skipped %+v", len(d.Create), len(keys), d.Skipped)
	}
}

// The DST policy table of docs/jobs.md, one case per row: fixed-time and
// wildcard expressions, spring and fall, the default (cronie's rule) and
// each explicit policy, in Berlin (an hour) and Lord Howe (30 minutes).
func TestDSTPolicyTable(t *testing.T) {
	type occ struct{ at, window string }
	g := func(at, window string) occ { return occ{at, window + " gap"} }
	for _, tc := range []struct {
		row, expr, tz string
		dst           DSTPolicy
		from, to      string
		want          []occ
		gapSkipped    int64
	}{
		{"fixed, spring", "30 2 * * *", "Europe/Berlin", DSTAuto, "2026-03-28T12:00:00Z", "2026-03-29T12:00:00Z",
			[]occ{g("2026-03-29T01:00:00Z", "2026-03-29")}, 0},
		{"fixed, fall", "30 2 * * *", "Europe/Berlin", DSTAuto, "2026-10-24T12:00:00Z", "2026-10-25T12:00:00Z",
			[]occ{{"2026-10-25T00:30:00Z", "2026-10-25"}}, 0},
		{"wildcard, spring", "*/15 * * * *", "Europe/Berlin", DSTAuto, "2026-03-29T00:30:00Z", "2026-03-29T01:20:00Z",
			[]occ{{"2026-03-29T00:45:00Z", "2026-03-29T01:45"}, {"2026-03-29T01:00:00Z", "2026-03-29T03:00"},
				{"2026-03-29T01:15:00Z", "2026-03-29T03:15"}}, 4},
		{"wildcard, spring, no slot at the gap's end", "30 * * * *", "Europe/Berlin", DSTAuto, "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z",
			[]occ{{"2026-03-29T00:30:00Z", "2026-03-29T01"}, {"2026-03-29T01:30:00Z", "2026-03-29T03"}}, 1},
		{"wildcard, fall", "*/15 * * * *", "Europe/Berlin", DSTAuto, "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z",
			[]occ{{"2026-10-25T00:45:00Z", "2026-10-25T02:45"}, {"2026-10-25T01:00:00Z", "2026-10-25T02:00+01:00"},
				{"2026-10-25T01:15:00Z", "2026-10-25T02:15+01:00"}, {"2026-10-25T01:30:00Z", "2026-10-25T02:30+01:00"},
				{"2026-10-25T01:45:00Z", "2026-10-25T02:45+01:00"}, {"2026-10-25T02:00:00Z", "2026-10-25T03:00"}}, 0},
		{"wildcard hourly, fall", "0 * * * *", "Europe/Berlin", DSTAuto, "2026-10-24T23:30:00Z", "2026-10-25T02:00:00Z",
			[]occ{{"2026-10-25T00:00:00Z", "2026-10-25T02"}, {"2026-10-25T01:00:00Z", "2026-10-25T02+01:00"},
				{"2026-10-25T02:00:00Z", "2026-10-25T03"}}, 0},
		{"wildcard :30, fall", "30 * * * *", "Europe/Berlin", DSTAuto, "2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z",
			[]occ{{"2026-10-25T00:30:00Z", "2026-10-25T02"}, {"2026-10-25T01:30:00Z", "2026-10-25T02+01:00"}}, 0},
		{"wildcard hourly, spring", "0 * * * *", "Europe/Berlin", DSTAuto, "2026-03-28T23:30:00Z", "2026-03-29T01:00:00Z",
			[]occ{{"2026-03-29T00:00:00Z", "2026-03-29T01"}, {"2026-03-29T01:00:00Z", "2026-03-29T03"}}, 1},
		{"WALL_TIME quarter-hourly, spring", "*/15 * * * *", "Europe/Berlin", DSTWallTime, "2026-03-29T00:30:00Z", "2026-03-29T01:20:00Z",
			[]occ{{"2026-03-29T00:45:00Z", "2026-03-29T01:45"}, {"2026-03-29T01:00:00Z", "2026-03-29T03:00"},
				{"2026-03-29T01:15:00Z", "2026-03-29T03:15"}}, 4},
		{"WALL_TIME hourly, spring", "0 * * * *", "Europe/Berlin", DSTWallTime, "2026-03-28T23:30:00Z", "2026-03-29T01:00:00Z",
			[]occ{{"2026-03-29T00:00:00Z", "2026-03-29T01"}, {"2026-03-29T01:00:00Z", "2026-03-29T03"}}, 1},
		{"WALL_TIME wildcard, spring", "30 * * * *", "Europe/Berlin", DSTWallTime, "2026-03-29T00:00:00Z", "2026-03-29T02:00:00Z",
			[]occ{{"2026-03-29T00:30:00Z", "2026-03-29T01"}, g("2026-03-29T01:00:00Z", "2026-03-29T02"), {"2026-03-29T01:30:00Z", "2026-03-29T03"}}, 0},
		{"WALL_TIME wildcard, fall", "*/15 * * * *", "Europe/Berlin", DSTWallTime, "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z",
			[]occ{{"2026-10-25T00:45:00Z", "2026-10-25T02:45"}, {"2026-10-25T02:00:00Z", "2026-10-25T03:00"}}, 0},
		{"WALL_TIME hourly, fall", "0 * * * *", "Europe/Berlin", DSTWallTime, "2026-10-24T23:30:00Z", "2026-10-25T02:00:00Z",
			[]occ{{"2026-10-25T00:00:00Z", "2026-10-25T02"}, {"2026-10-25T02:00:00Z", "2026-10-25T03"}}, 0},
		{"CADENCE fixed, spring", "30 2 * * *", "Europe/Berlin", DSTCadence, "2026-03-28T12:00:00Z", "2026-03-29T12:00:00Z",
			nil, 1},
		{"CADENCE fixed, fall", "30 2 * * *", "Europe/Berlin", DSTCadence, "2026-10-24T12:00:00Z", "2026-10-25T12:00:00Z",
			[]occ{{"2026-10-25T00:30:00Z", "2026-10-25"}, {"2026-10-25T01:30:00Z", "2026-10-25+01:00"}}, 0},
		{"Lord Howe wildcard, fall (30 min back)", "*/15 * * * *", "Australia/Lord_Howe", DSTAuto, "2026-04-04T14:40:00Z", "2026-04-04T15:30:00Z",
			[]occ{{"2026-04-04T14:45:00Z", "2026-04-05T01:45"}, {"2026-04-04T15:00:00Z", "2026-04-05T01:30+10:30"},
				{"2026-04-04T15:15:00Z", "2026-04-05T01:45+10:30"}, {"2026-04-04T15:30:00Z", "2026-04-05T02:00"}}, 0},
		{"Lord Howe fixed, fall", "30 1 * * *", "Australia/Lord_Howe", DSTAuto, "2026-04-04T12:00:00Z", "2026-04-05T12:00:00Z",
			[]occ{{"2026-04-04T14:30:00Z", "2026-04-05"}}, 0},
		{"Lord Howe wildcard, spring (30 min forward)", "0 * * * *", "Australia/Lord_Howe", DSTAuto, "2026-10-03T14:00:00Z", "2026-10-03T16:00:00Z",
			[]occ{{"2026-10-03T14:30:00Z", "2026-10-04T01"}, {"2026-10-03T16:00:00Z", "2026-10-04T03"}}, 1},
		{"Lord Howe WALL_TIME hourly, spring", "0 * * * *", "Australia/Lord_Howe", DSTWallTime, "2026-10-03T14:00:00Z", "2026-10-03T16:00:00Z",
			[]occ{{"2026-10-03T14:30:00Z", "2026-10-04T01"}, g("2026-10-03T15:30:00Z", "2026-10-04T02"), {"2026-10-03T16:00:00Z", "2026-10-04T03"}}, 0},
		{"Lord Howe fixed, spring", "0 2 * * *", "Australia/Lord_Howe", DSTAuto, "2026-10-03T00:00:00Z", "2026-10-04T00:00:00Z",
			[]occ{g("2026-10-03T15:30:00Z", "2026-10-04")}, 0},
	} {
		c := mustCalDST(t, tc.expr, tc.tz, Window{}, tc.dst)
		d, err := c.Due(utc(tc.from), utc(tc.to), 48*time.Hour, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []occ
		for _, o := range d.Create {
			w := o.Window
			if o.DSTGap {
				w += " gap"
			}
			got = append(got, occ{fmtMs(o.At), w})
		}
		var gaps int64
		for _, k := range d.Skipped {
			if k.Reason != SkipDSTGap {
				t.Fatalf("%s: skipped %+v", tc.row, k)
			}
			gaps += k.Count
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || gaps != tc.gapSkipped {
			t.Errorf("%s (%s, %s): created %v, DST_GAP %d; want %v, %d", tc.row, tc.expr, tc.dst, got, gaps, tc.want, tc.gapSkipped)
		}
		// Next lists the same, and Count counts it.
		if n := c.Count(utc(tc.from), utc(tc.to)); n != int64(len(tc.want)) {
			t.Errorf("%s: Count %d", tc.row, n)
		}
		if nx := c.Next(utc(tc.from), len(tc.want)+1); len(nx) < len(tc.want) || (len(tc.want) > 0 && nx[len(tc.want)-1] != d.Create[len(d.Create)-1]) {
			t.Errorf("%s: Next %+v", tc.row, nx)
		}
	}
}
