package main

import (
	"strings"
	"testing"
)

// TestReportMatchesStepsToTheirEntry: each step counts from the start of
// the entry it follows, AppendEntries and answers once per follower (the
// first two), any other step once; steps before the first entry are not
// counted.
func TestReportMatchesStepsToTheirEntry(t *testing.T) {
	us := func(n int64) int64 { return n * 1000 }
	var steps []step
	steps = append(steps, step{us(1), "5 committed, to the FSM"}) // before any entry: ignored
	for i, d := range []int64{100, 200, 300} {
		base := us(int64(10_000 * (i + 1)))
		steps = append(steps,
			step{base, "0 raft.Apply"},
			step{base + us(d), "2 AppendEntries written"},
			step{base + us(2*d), "2 AppendEntries written"},
			step{base + us(3*d), "2 AppendEntries written"}, // a third: not a follower of a 3-node cluster
			step{base + us(4*d), "5 committed, to the FSM"},
			step{base + us(5*d), "5 committed, to the FSM"}, // the next entry's, were it in flight: once only
		)
	}
	var b strings.Builder
	report(&b, steps)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n")[1:] {
		f := strings.Fields(line)
		got[strings.Join(f[:len(f)-4], " ")] = strings.Join(f[len(f)-4:], " ")
	}
	want := map[string]string{
		// n, p25, p50, p75 over the three entries (100, 200, 300 µs apart).
		"2 AppendEntries written #1": "3 100 200 300",
		"2 AppendEntries written #2": "3 200 400 600",
		"5 committed, to the FSM":    "3 400 800 1200",
	}
	if len(got) != len(want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q\n%s", k, got[k], v, b.String())
		}
	}
}
