// Package probe holds the checks behind coordd's /livez and /readyz and
// writes them as Kubernetes' own /livez and /readyz do: "ok" (200) when
// every check passes, else 503 with the failed checks; ?verbose lists every
// check ("[+]name ok", "[-]name failed: reason"), ?exclude=name skips one,
// and Accept: application/json (or ?format=json) answers a JSON document.
package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coordd/coordd/clock"
)

// Check is one named check's verdict.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Reason says why it failed ("" when it passed).
	Reason string `json:"reason,omitempty"`
}

// Pass is a passed check.
func Pass(name string) Check { return Check{Name: name, OK: true} }

// Fail is a failed check with its reason.
func Fail(name, format string, args ...any) Check {
	return Check{Name: name, Reason: fmt.Sprintf(format, args...)}
}

// Failed returns the checks that failed.
func Failed(checks []Check) []Check {
	var out []Check
	for _, c := range checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Document is the JSON answer of a probe.
type Document struct {
	// Status is "ok" or "failed".
	Status string  `json:"status"`
	Checks []Check `json:"checks"`
}

// Write answers a probe named kind ("livez", "readyz") with checks, after
// the request's ?exclude= names are taken out.
func Write(w http.ResponseWriter, r *http.Request, kind string, checks []Check) {
	q := r.URL.Query()
	if ex := q["exclude"]; len(ex) > 0 {
		checks = slices.DeleteFunc(slices.Clone(checks), func(c Check) bool { return slices.Contains(ex, c.Name) })
	}
	failed := Failed(checks)
	code := http.StatusOK
	if len(failed) > 0 {
		code = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	if q.Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
		doc := Document{Status: "ok", Checks: checks}
		if doc.Checks == nil {
			doc.Checks = []Check{}
		}
		if len(failed) > 0 {
			doc.Status = "failed"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(doc)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, verbose := q["verbose"]
	if !verbose && len(failed) == 0 {
		_, _ = fmt.Fprintln(w, "ok")
		return
	}
	var b strings.Builder
	list := checks
	if !verbose {
		list = failed
	}
	for _, c := range list {
		if c.OK {
			fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
		} else {
			fmt.Fprintf(&b, "[-]%s failed: %s\n", c.Name, c.Reason)
		}
	}
	if len(failed) == 0 {
		fmt.Fprintf(&b, "%s check passed\n", kind)
	} else {
		fmt.Fprintf(&b, "%s check failed\n", kind)
	}
	_, _ = w.Write([]byte(b.String()))
}

// Tracker is the liveness of a process's loops, judged on its clock
// (virtual in tests): each loop receives pings on an unbuffered channel
// in the select it waits in, so a ping is taken only when the loop turns.
// A loop that took a ping within the bound passes (one slow answer is not
// a failure); one that took none for longer fails. Progress checks a
// pipeline (the Raft apply loop) that must move while it has work.
type Tracker struct {
	clk   clock.Clock
	bound time.Duration
	wait  time.Duration

	mu       sync.Mutex
	loops    []*loop
	progress map[string]progressMark
}

type loop struct {
	name string
	ping chan<- struct{}
	last time.Time
}

type progressMark struct {
	at    uint64
	since time.Time
}

// NewTracker judges loops stuck when they took no ping for bound; a ping
// waits at most wait (real time: the probe's own deadline) to be taken.
func NewTracker(clk clock.Clock, bound, wait time.Duration) *Tracker {
	return &Tracker{clk: clk, bound: bound, wait: wait, progress: map[string]progressMark{}}
}

// Bound is the time after which a loop that does not turn fails.
func (t *Tracker) Bound() time.Duration { return t.bound }

// Add registers a loop, counted as having turned now, and returns the
// channel it must receive from in the select it waits in.
func (t *Tracker) Add(name string) <-chan struct{} {
	ch := make(chan struct{})
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loops = append(t.loops, &loop{name: name, ping: ch, last: t.clk.Now()})
	return ch
}

// Loops pings every loop at once (each ping waits at most the tracker's
// wait) and returns one check per loop, in the order they were added.
func (t *Tracker) Loops() []Check {
	t.mu.Lock()
	loops := slices.Clone(t.loops)
	t.mu.Unlock()
	taken := make([]bool, len(loops))
	ctx, cancel := context.WithTimeout(context.Background(), t.wait)
	defer cancel()
	var wg sync.WaitGroup
	for i, l := range loops {
		wg.Go(func() {
			select {
			case l.ping <- struct{}{}:
				taken[i] = true
			case <-ctx.Done():
			}
		})
	}
	wg.Wait()
	now := t.clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Check, 0, len(loops))
	for i, l := range loops {
		if taken[i] {
			l.last = now
		}
		if age := now.Sub(l.last); age > t.bound {
			out = append(out, Fail(l.name, "the loop has not turned for %s (bound %s)", age.Round(time.Millisecond), t.bound))
		} else {
			out = append(out, Pass(l.name))
		}
	}
	return out
}

// Progress checks a pipeline that must move while it has work: at is how
// far it got, target how far it must get. It fails when at stayed below
// target, unchanged, for longer than the bound. Each call is one look: a
// stall is seen from the second look on.
func (t *Tracker) Progress(name string, at, target uint64) Check {
	now := t.clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.progress[name]
	if !ok || m.at != at || at >= target {
		t.progress[name] = progressMark{at: at, since: now}
		return Pass(name)
	}
	if age := now.Sub(m.since); age > t.bound {
		return Fail(name, "stuck at index %d below %d for %s (bound %s)", at, target, age.Round(time.Millisecond), t.bound)
	}
	return Pass(name)
}
