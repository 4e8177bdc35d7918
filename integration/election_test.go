package integration

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/proccluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// campaigner is one process of examples/election and what it printed.
type campaigner struct {
	id   string
	cmd  *exec.Cmd
	mu   sync.Mutex
	line []string
	done chan struct{}
}

func (c *campaigner) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.line...)
}

var lineRE = regexp.MustCompile(`^(elected|lost|commit|resigned) id=(\w+) generation=(\d+)(?: seq=\w+)?(?: (accepted|refused reason=\w+) sent=(\d+))? at=(\d+)`)

// lateRE marks the writes a process sends after its term ended on purpose
// (--writes-after-loss: a leader that ignores its context).
var lateRE = regexp.MustCompile(` seq=late\d+ `)

// term is one leadership as its process reported it.
type term struct {
	id                string
	gen               uint64
	elected, ended    int64   // ms; ended: the context's cancellation
	accepted, refused []int64 // the writes' send times
	// lateAccepted: writes sent after the term's context ended and still
	// accepted: the cluster had not granted the next generation yet (the
	// SDK ends a term before the lease could pass to anyone, G10).
	lateAccepted []int64
}

// Three campaigner processes and an observer, through a SIGKILL of the
// coordd leader and a SIGSTOP of the elected process. Checked:
//   - at most one leader context is live at a time: the terms' live
//     intervals (election to the context's cancellation, or to the SIGSTOP
//     for the stopped one) do not overlap, and no write was accepted
//     outside its term;
//   - by the fence, in log order: every accepted write (a RESOURCE event)
//     carries the generation of the lease's live term at that point of the
//     log, and the stopped leader's writes after it woke were refused;
//   - the observer saw every term, in order, with its proclaimed value, and
//     the expiry of the stopped leader's lease.
func TestElectionThroughLeaderKillAndPause(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	bin, err := proccluster.Build(t.TempDir(), "./examples/election", "election")
	if err != nil {
		t.Fatal(err)
	}
	pc := proccluster.Start(t, coorddBin, 3)
	pc.WaitLeader()
	eps := pc.Endpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const name = "svc/leader"
	cl, err := client.New(ctx, eps, client.WithOwner("observer"), client.WithRetryBackoff(20*time.Millisecond, 250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The observer, and the log's own order of the lease and the ledger.
	var (
		mu       sync.Mutex
		observed []client.Leader
		logged   []*coordv1.WatchEvent
	)
	octx, stopObserving := context.WithCancel(ctx)
	var bg sync.WaitGroup
	obs := cl.Observe(octx, name)
	bg.Go(func() {
		for l := range obs {
			mu.Lock()
			observed = append(observed, l)
			mu.Unlock()
		}
	})
	w := cl.Watch(octx, name, 0, client.WatchFamilies(coordv1.WatchFamily_WATCH_FAMILY_LEASE, coordv1.WatchFamily_WATCH_FAMILY_RESOURCE))
	bg.Go(func() {
		for r := range w.Responses() {
			mu.Lock()
			logged = append(logged, r.Events...)
			mu.Unlock()
		}
	})
	// The watch is served from now: wait until it started.
	pollUntil(t, "the watch and the observer started", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(observed) > 0
	})
	time.Sleep(500 * time.Millisecond)

	var procs []*campaigner
	for _, id := range []string{"c1", "c2", "c3"} {
		cmd := exec.Command(bin, "--endpoints", strings.Join(eps, ","), "--name", name, "--id", id, "--ttl", "2s", "--interval", "50ms",
			"--writes-after-loss", "1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &campaigner{id: id, cmd: cmd, done: make(chan struct{})}
		procs = append(procs, p)
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				p.mu.Lock()
				p.line = append(p.line, sc.Text())
				p.mu.Unlock()
			}
			_ = cmd.Wait()
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-p.done
		})
	}
	// current is the process that printed the latest election.
	current := func() (*campaigner, uint64) {
		var best *campaigner
		var gen uint64
		for _, p := range procs {
			for _, l := range p.lines() {
				if m := lineRE.FindStringSubmatch(l); m != nil && m[1] == "elected" {
					if g, _ := strconv.ParseUint(m[3], 10, 64); g > gen {
						best, gen = p, g
					}
				}
			}
		}
		return best, gen
	}
	accepted := func(p *campaigner, gen uint64) int {
		n := 0
		for _, l := range p.lines() {
			if strings.HasPrefix(l, fmt.Sprintf("commit id=%s generation=%d ", p.id, gen)) && strings.Contains(l, " accepted ") {
				n++
			}
		}
		return n
	}
	var first *campaigner
	var gen1 uint64
	pollUntil(t, "a leader writing", 30*time.Second, func() bool {
		first, gen1 = current()
		return first != nil && accepted(first, gen1) >= 5
	})
	t.Logf("%s leads with generation %d", first.id, gen1)

	// SIGKILL the coordd leader: the elected process keeps its lease
	// through the failover when it is shorter than the TTL (or loses it,
	// and someone is elected: either way the checks below hold).
	l := pc.WaitLeader()
	pc.Kill(l)
	killedAt := time.Now()
	pc.WaitLeader()
	base := accepted(first, gen1)
	pollUntil(t, "writes after the coordd failover", 30*time.Second, func() bool {
		p, g := current()
		if p == first && g == gen1 {
			return accepted(p, g) >= base+5
		}
		return accepted(p, g) >= 5
	})
	pc.Restart(l)
	after, gen2 := current()
	t.Logf("coordd leader %s killed; %s leads with generation %d %s later", l.ID, after.id, gen2, time.Since(killedAt).Round(time.Millisecond))

	// SIGSTOP the elected process: its lease expires, another is elected;
	// then it wakes.
	paused, pgen := current()
	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now().UnixMilli()
	pollUntil(t, "a successor of the stopped leader", 30*time.Second, func() bool {
		p, g := current()
		return g > pgen && p != paused && accepted(p, g) >= 3
	})
	succ, sgen := current()
	time.Sleep(300 * time.Millisecond)
	resumedAt := time.Now().UnixMilli()
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped %s (generation %d); %s elected with generation %d; woke %s", paused.id, pgen, succ.id, sgen, paused.id)
	pollUntil(t, "the stopped leader to notice", 20*time.Second, func() bool {
		for _, l := range paused.lines() {
			if strings.HasPrefix(l, fmt.Sprintf("lost id=%s generation=%d ", paused.id, pgen)) {
				return true
			}
		}
		return false
	})
	time.Sleep(500 * time.Millisecond)
	// Stop the candidates that wait first, then the leader: its
	// resignation hands over to nobody. (Stopped the other way round, a
	// waiter may be elected by the resignation as it stops: Campaign then
	// releases that grant, a term nobody reported.)
	last, _ := current()
	for _, p := range append(slices.DeleteFunc(slices.Clone(procs), func(p *campaigner) bool { return p == last }), last) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not stop", p.id)
		}
	}
	// The last resignation reaches the observer and the log.
	pollUntil(t, "the observer to see the end", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		last := observed[len(observed)-1]
		return !last.Held && last.Generation > 0
	})
	stopObserving()
	bg.Wait()

	// The terms, from the processes' lines.
	terms := map[uint64]*term{}
	for _, p := range procs {
		for _, l := range p.lines() {
			m := lineRE.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			g, _ := strconv.ParseUint(m[3], 10, 64)
			at, _ := strconv.ParseInt(m[6], 10, 64)
			sent, _ := strconv.ParseInt(m[5], 10, 64)
			tm := terms[g]
			if tm == nil {
				tm = &term{id: m[2], gen: g}
				terms[g] = tm
			}
			if tm.id != m[2] {
				t.Fatalf("generation %d reported by %s and %s", g, tm.id, m[2])
			}
			switch {
			case m[1] == "elected":
				tm.elected = at
			case m[1] == "lost":
				tm.ended = at
			case m[1] == "commit" && m[4] == "accepted" && lateRE.MatchString(l):
				tm.lateAccepted = append(tm.lateAccepted, sent)
			case m[1] == "commit" && m[4] == "accepted":
				tm.accepted = append(tm.accepted, sent)
			case m[1] == "commit":
				tm.refused = append(tm.refused, sent)
			}
		}
	}
	// At most one live leader context at a time.
	live := func(tm *term) (int64, int64) {
		end := tm.ended
		if tm.gen == pgen {
			end = pausedAt // frozen: nothing it did could be live after this
		}
		return tm.elected, end
	}
	var gens []uint64
	for g, tm := range terms {
		if tm.elected == 0 || tm.ended == 0 {
			t.Fatalf("term %d of %s: elected at %d, ended at %d", g, tm.id, tm.elected, tm.ended)
		}
		gens = append(gens, g)
		s, e := live(tm)
		for _, a := range tm.accepted {
			// Sent while the term was live (the stopped one: before the stop).
			if a < s || a > e {
				t.Fatalf("term %d of %s: a write sent at %d and accepted, outside its live term [%d, %d]", g, tm.id, a, s, e)
			}
		}
	}
	for _, a := range gens {
		for _, b := range gens {
			if a >= b {
				continue
			}
			// A write sent after its term ended is accepted only while no
			// later term exists: sent before the next one was elected.
			for _, sent := range terms[a].lateAccepted {
				if sent >= terms[b].elected {
					t.Fatalf("term %d of %s: a write sent at %d (after the term ended) accepted, after term %d began at %d",
						a, terms[a].id, sent, b, terms[b].elected)
				}
			}
			as, ae := live(terms[a])
			bs, be := live(terms[b])
			if as < be && bs < ae {
				t.Fatalf("terms %d [%d, %d] and %d [%d, %d] overlap", a, as, ae, b, bs, be)
			}
			if bs < as {
				t.Fatalf("generation %d elected before %d", b, a)
			}
		}
	}
	if tm := terms[pgen]; tm.ended < resumedAt {
		t.Fatalf("the stopped leader's term ended at %d, before it woke at %d", tm.ended, resumedAt)
	}

	// By the fence, in the log's order.
	var liveGen uint64
	var lastMax uint64
	commits := map[uint64]int{}
	for _, e := range logged {
		switch {
		case e.GetLease() != nil && e.GetKey() == name:
			l := e.GetLease()
			if e.GetKind() == coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT && !l.GetReleased() {
				liveGen = l.GetGeneration()
			} else if l.GetGeneration() == liveGen {
				liveGen = 0 // released or expired
			}
		case e.GetResource() != nil:
			g := e.GetResource().GetMaxGeneration()
			if g != liveGen || g < lastMax {
				t.Fatalf("a write of generation %d accepted at index %d while the live term is %d (highest so far %d)",
					g, e.GetIndex(), liveGen, lastMax)
			}
			lastMax = g
			commits[g]++
		}
	}
	for g, tm := range terms {
		if commits[g] < len(tm.accepted) {
			t.Fatalf("term %d: %d writes reported accepted, %d in the log", g, len(tm.accepted), commits[g])
		}
	}

	// The observer saw every term, in order, with its proclaimed value, and
	// the stopped leader's expiry.
	var seen []uint64
	proclaimed := map[uint64]bool{}
	expired := false
	for _, o := range observed {
		if o.Held && (len(seen) == 0 || seen[len(seen)-1] != o.Generation) {
			seen = append(seen, o.Generation)
		}
		if o.Held && strings.Contains(string(o.Value), "serving since") {
			proclaimed[o.Generation] = true
		}
		if !o.Held && o.Generation == pgen {
			expired = true
		}
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("observed generations %v", seen)
		}
	}
	if len(seen) != len(terms) || !expired {
		for _, p := range procs {
			t.Logf("%s:\n%s", p.id, strings.Join(p.lines(), "\n"))
		}
		for _, o := range observed {
			t.Logf("observed %v (index %d)", o, o.Index)
		}
		t.Fatalf("observed terms %v (expiry of %d seen: %t), elected %d terms", seen, pgen, expired, len(terms))
	}
	for _, g := range seen {
		if !proclaimed[g] && terms[g].ended-terms[g].elected > 1000 {
			t.Fatalf("term %d's proclaimed value was not observed", g)
		}
	}
	t.Logf("%d terms %v, %d observations, %d ledger writes accepted in log order; the stopped leader's writes after waking: %d refused",
		len(terms), seen, len(observed), lastMaxCount(commits), len(terms[pgen].refused))
}

func lastMaxCount(m map[uint64]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func pollUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
