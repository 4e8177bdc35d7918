package console

import (
	"strings"
	"testing"
	"time"
)

// The ring keeps ChartPoints samples; the chart shows per-interval deltas,
// counting a counter that went down (a restart) from zero.
func TestRingSeries(t *testing.T) {
	r := newRing(4)
	t0 := time.Unix(1_700_000_000, 0)
	for i, c := range []map[string]Counters{
		{"a": {Succeeded: 10, Failures: 1}},
		{"a": {Succeeded: 15, Failures: 1}, "b": {Succeeded: 2}},
		{"a": {Succeeded: 3, Failures: 0}, "b": {Succeeded: 2, Failures: 4}}, // a restarted
		{"a": {Succeeded: 4}, "b": {Succeeded: 7, Failures: 4}},
		{"a": {Succeeded: 9}, "b": {Succeeded: 7, Failures: 6}},
	} {
		r.add(t0.Add(time.Duration(i)*time.Minute), c)
	}
	pts, sums := r.series()
	// The first sample fell off: 3 intervals from the last 4 samples.
	want := []point{{Succeeded: 3 + 0, Failures: 4}, {Succeeded: 1 + 5, Failures: 0}, {Succeeded: 5, Failures: 2}}
	if len(pts) != len(want) {
		t.Fatalf("%d points, want %d", len(pts), len(want))
	}
	for i, p := range pts {
		if p.Succeeded != want[i].Succeeded || p.Failures != want[i].Failures {
			t.Errorf("point %d: %+v, want %+v", i, p, want[i])
		}
	}
	if sums["a"] != (Counters{Succeeded: 3 + 1 + 5}) || sums["b"] != (Counters{Succeeded: 5, Failures: 6}) {
		t.Errorf("sums %+v", sums)
	}
	svg := string(chartSVG(pts, ChartPoints-1, time.Minute))
	if strings.Count(svg, `class="ok"`) != 3 || strings.Count(svg, `class="bad"`) != 2 || !strings.HasPrefix(svg, "<svg") {
		t.Errorf("chart: %s", svg)
	}
}

// A sample keeps at most maxChartQueues queues by name; the rest are
// summed under otherQueues.
func TestRingBoundsQueues(t *testing.T) {
	r := newRing(2)
	c := map[string]Counters{}
	for i := range maxChartQueues + 50 {
		c[strings.Repeat("q", 1)+time.Duration(i).String()] = Counters{Succeeded: 1}
	}
	r.add(time.Now(), c)
	if n := len(r.samples[0].queues); n != maxChartQueues+1 {
		t.Fatalf("%d queues kept", n)
	}
	if r.samples[0].queues[otherQueues].Succeeded != 50 {
		t.Fatalf("other: %+v", r.samples[0].queues[otherQueues])
	}
}
