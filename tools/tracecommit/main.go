// Command tracecommit reads a runtime trace of a coordd node taken at one
// client (GET /debug/pprof/trace?seconds=2 with --enable-pprof, while one
// caller acquires and releases in a loop) and prints how long after the
// start of each Raft entry each later step of its commit happened, as
// percentiles over all entries: docs/benchmarks.md, "Where a commit's time
// and CPU go". Steps are recognised by the stacks of goroutine state
// changes (hashicorp/raft's and coordd's function names), and matched to
// an entry by order, which holds while one entry is in flight.
//
//	go run . -role leader leader.trace
//	go run . -role follower follower.trace
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// step is a named moment of one entry's commit.
type step struct {
	at   int64 // ns since the trace's first event
	name string
}

func main() {
	role := flag.String("role", "leader", "the traced node's role: leader or follower")
	flag.Parse()
	if flag.NArg() != 1 || (*role != "leader" && *role != "follower") {
		fmt.Fprintln(os.Stderr, "usage: tracecommit -role leader|follower FILE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fail(err)
	}
	defer f.Close()
	var steps []step
	if *role == "leader" {
		steps, err = leaderSteps(f)
	} else {
		steps, err = followerSteps(f)
	}
	if err != nil {
		fail(err)
	}
	report(os.Stdout, steps)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tracecommit:", err)
	os.Exit(1)
}

// has reports whether a frame of st names one of subs.
func has(st trace.Stack, subs ...string) bool {
	for fr := range st.Frames() {
		for _, s := range subs {
			if strings.Contains(fr.Func, s) {
				return true
			}
		}
	}
	return false
}

// transitions calls f for every goroutine state change of the trace.
func transitions(r io.Reader, f func(at int64, e trace.Event, st trace.StateTransition)) error {
	tr, err := trace.NewReader(r)
	if err != nil {
		return err
	}
	var t0 trace.Time
	for {
		e, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if t0 == 0 {
			t0 = e.Time()
		}
		if e.Kind() != trace.EventStateTransition {
			continue
		}
		if st := e.StateTransition(); st.Resource.Kind == trace.ResourceGoroutine {
			f(int64(e.Time()-t0), e, st)
		}
	}
}

// leaderSteps: an entry starts when the proposer's raft.Apply wakes the
// leader loop ("0 ..."); a step is a goroutine woken from the named place,
// or a syscall of the named goroutine ending.
func leaderSteps(r io.Reader) ([]step, error) {
	var out []step
	inSend := map[trace.GoID]bool{}
	err := transitions(r, func(at int64, e trace.Event, st trace.StateTransition) {
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		woken := from == trace.GoWaiting && to == trace.GoRunnable
		by := e.Stack()
		add := func(name string) { out = append(out, step{at, name}) }
		switch {
		case woken && has(by, "raft.(*Raft).ApplyLog"):
			add("0 raft.Apply")
		case woken && has(by, "raft.(*Raft).dispatchLogs"):
			add("1 leader loop dispatches")
		case to == trace.GoSyscall && has(st.Stack, "pipelineSend"):
			inSend[g] = true
		case from == trace.GoSyscall && inSend[g]:
			delete(inSend, g)
			add("2 AppendEntries written")
		case woken && has(by, "leaderWriter).writePending"):
			add("3 own write done")
		case woken && has(by, "decodeResponses"):
			add("4 follower's answer read")
		case woken && has(by, "raft.(*Raft).processLogs"):
			add("5 committed, to the FSM")
		case woken && has(by, "runFSM"):
			add("6 applied, future answered")
		case woken && has(by, "node.(*Node).answer"):
			add("7 RPC handler woken")
		}
	})
	return out, err
}

// followerSteps: an entry starts when the connection's goroutine hands a
// decoded AppendEntries to the main loop.
func followerSteps(r io.Reader) ([]step, error) {
	var out []step
	mainG, connG := trace.NoGoroutine, trace.NoGoroutine
	inFsync, inWrite := false, false
	err := transitions(r, func(at int64, e trace.Event, st trace.StateTransition) {
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		woken := from == trace.GoWaiting && to == trace.GoRunnable
		add := func(name string) { out = append(out, step{at, name}) }
		switch {
		case woken && has(e.Stack(), "NetworkTransport).handleCommand"):
			mainG, connG = g, e.Goroutine()
			add("0 request decoded, to the main loop")
		case g == mainG && from == trace.GoRunnable && to == trace.GoRunning:
			add("1 main loop runs")
		case g == mainG && to == trace.GoSyscall && has(st.Stack, "Fsync"):
			inFsync = true
			add("2 fsync starts")
		case g == mainG && from == trace.GoSyscall && inFsync:
			inFsync = false
			add("3 fsync done")
		case woken && has(e.Stack(), "RPC).Respond"):
			add("4 answer to the connection's goroutine")
		case g == connG && to == trace.GoSyscall && has(st.Stack, "syscall.write", "syscall.Write"):
			inWrite = true
		case g == connG && from == trace.GoSyscall && inWrite:
			inWrite = false
			add("5 answer written")
		}
	})
	return out, err
}

// report prints, for each step, the time from its entry's start ("0 ...")
// to its first occurrence (its first two for AppendEntries and answers,
// one per follower) before the next entry starts.
func report(w io.Writer, steps []step) {
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].at < steps[j].at })
	since := map[string][]int64{}
	start := int64(-1)
	var seen map[string]int
	for _, s := range steps {
		if strings.HasPrefix(s.name, "0 ") {
			start, seen = s.at, map[string]int{}
			continue
		}
		if start < 0 {
			continue
		}
		seen[s.name]++
		name, n := s.name, seen[s.name]
		perFollower := strings.Contains(name, "AppendEntries written") || strings.Contains(name, "answer read")
		switch {
		case perFollower && n <= 2:
			name = fmt.Sprintf("%s #%d", name, n)
		case n > 1:
			continue
		}
		since[name] = append(since[name], s.at-start)
	}
	names := make([]string, 0, len(since))
	for n := range since {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "%-42s %6s %6s %6s %6s  (µs after the entry's start)\n", "step", "n", "p25", "p50", "p75")
	for _, n := range names {
		d := since[n]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		q := func(p int) int64 { return d[len(d)*p/100] / 1000 }
		fmt.Fprintf(w, "%-42s %6d %6d %6d %6d\n", n, len(d), q(25), q(50), q(75))
	}
}
