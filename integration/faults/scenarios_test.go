//go:build faults

package faults

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// seen reports whether a client's history has a returned op of a client that satisfies match.
func (r *run) seen(client string, match func(record) bool) bool {
	h := loadHistory(r.t, r.dir)
	for _, o := range h.ops {
		if o.client == client && match(o.ret) {
			return true
		}
	}
	return false
}

// Scenario 1: the paused holder. A holds L and commits in a loop; A is
// frozen (SIGSTOP) for 2 x TTL; B acquires. (a) B commits, then A wakes and
// commits; (b) A wakes before B's first commit and commits at once. A is
// refused in both, A's SDK reports the lease lost, and A's local deadline
// fell before B's grant.
func TestPausedHolder(t *testing.T) {
	for _, successorFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("successor_commits_first=%v", successorFirst), func(t *testing.T) {
			r := newRun(t)
			const ttl = 2 * time.Second
			a := r.client("A", "hold", "--ttl", ttl.String(), "--interval", "50ms")
			r.await("A holds L and commits", 15*time.Second, func() bool {
				return r.seen("A", func(x record) bool { return x.Op == "commit" && x.Accepted })
			})
			_ = a.Process.Signal(syscall.SIGSTOP)
			stopped := time.Now()
			delay := "0s"
			if !successorFirst {
				delay = "3s"
			}
			r.client("B", "work", "--ttl", ttl.String(), "--first-commit-delay", delay, "--interval", "50ms")
			r.await("B acquires", 20*time.Second, func() bool {
				return r.seen("B", func(x record) bool { return x.Op == "acquire" && x.Accepted })
			})
			if successorFirst {
				r.await("B commits", 10*time.Second, func() bool {
					return r.seen("B", func(x record) bool { return x.Op == "commit" && x.Accepted })
				})
			}
			if d := time.Since(stopped); d < 2*ttl {
				time.Sleep(2*ttl - d) // A stays frozen for 2 x TTL
			}
			_ = a.Process.Signal(syscall.SIGCONT)
			r.await("A's lease lost", 10*time.Second, func() bool {
				h := loadHistory(t, r.dir)
				for _, e := range h.events {
					if e.Client == "A" && e.Op == "lost" {
						return true
					}
				}
				return false
			})
			time.Sleep(500 * time.Millisecond) // A keeps committing after waking
			r.stopClients()
			h := r.check()
			var bGrant int64
			for _, o := range h.ops {
				if o.client == "B" && o.call.Op == "acquire" && o.ok() && o.ret.Accepted {
					bGrant = o.callNs
					break
				}
			}
			refused := 0
			for _, o := range h.ops {
				if o.client == "A" && o.call.Op == "commit" && o.callNs > bGrant {
					if o.ok() && o.ret.Accepted && !o.ret.Duplicate {
						t.Errorf("A's commit %s after B's grant was accepted", o.call.Key)
					}
					if !o.ok() {
						refused++
					}
				}
			}
			if refused == 0 {
				t.Error("A made no refused commit after waking")
			}
			for _, e := range h.events {
				if e.Client == "A" && e.Op == "lost" && e.DeadlineNs >= bGrant {
					t.Errorf("A's local deadline %d is not before B's grant call %d", e.DeadlineNs, bGrant)
				}
			}
		})
	}
}

// Scenario 3: leader crash loop. kill -9 the leader, restart it a little
// later; a fresh Acquire succeeds within 2 s of each kill; a holder whose
// keepalive runs loses no lease; the workload's histories check out.
func TestLeaderCrashLoop(t *testing.T) {
	r := newRun(t)
	r.client("holder", "hold", "--lease", "H", "--resource", "HR", "--ttl", "5s", "--interval", "200ms")
	for i := 1; i <= 3; i++ {
		r.client(fmt.Sprintf("w%d", i), "work", "--ttl", "2s", "--interval", "20ms")
	}
	for cycle := 0; cycle < cycles(3, 10); cycle++ {
		time.Sleep(time.Duration(cycles(2, 7)) * time.Second)
		leader := r.c.WaitLeader(20 * time.Second)
		killed := time.Now()
		r.c.Stop(leader, syscall.SIGKILL)
		took := r.probeAcquire(fmt.Sprintf("probe-%d", cycle), 10*time.Second)
		t.Logf("cycle %d: kill -9 %s -> acquire after %s", cycle, leader.ID, took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Errorf("cycle %d: acquire %s after the kill", cycle, took)
		}
		time.Sleep(3*time.Second - time.Since(killed))
		r.c.Restart(leader)
	}
	r.stopClients()
	h := r.check()
	for _, e := range h.events {
		if e.Client == "holder" && e.Op == "lost" {
			t.Errorf("the kept-alive holder lost its lease: %s", e.Reason)
		}
	}
}

// probeAcquire tries every node until one grants a fresh lease.
func (r *run) probeAcquire(name string, budget time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < budget {
		for _, nd := range r.c.Nodes {
			if !nd.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			resp, err := coordv1.NewCoordinatorClient(nd.Conn).Acquire(ctx, &coordv1.AcquireRequest{Name: name, Owner: "probe", TtlMs: 5000})
			cancel()
			if err == nil && resp.GetAcquired() {
				return time.Since(start)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("no acquire within %s", budget)
	return 0
}

// Scenario 5: the paused leader. SIGSTOP the leader for 3 x the election
// timeout; the resumed old leader acknowledges nothing from its old term
// (porcupine would see a stale grant or commit) and expires no lease on its
// own (the generations checker would see a double grant).
func TestPausedLeader(t *testing.T) {
	r := newRun(t)
	for i := 1; i <= 3; i++ {
		r.client(fmt.Sprintf("w%d", i), "work", "--ttl", "2s", "--interval", "20ms")
	}
	for cycle := 0; cycle < cycles(2, 5); cycle++ {
		time.Sleep(2 * time.Second)
		leader := r.c.WaitLeader(20 * time.Second)
		r.c.Signal(leader, syscall.SIGSTOP)
		r.await("a new leader", 10*time.Second, func() bool {
			l := r.c.Leader()
			return l != nil && l != leader
		})
		time.Sleep(1500 * time.Millisecond) // 3 x the election timeout in all
		r.c.Signal(leader, syscall.SIGCONT)
		t.Logf("cycle %d: paused %s", cycle, leader.ID)
	}
	time.Sleep(2 * time.Second)
	r.stopClients()
	r.check()
}

// Scenario 6: whole-cluster kill -9 during load, then restart; then rolling
// restarts. Every acknowledged write survives; the first generation
// granted after a restart is above every one granted before.
func TestWholeClusterKill(t *testing.T) {
	r := newRun(t)
	for i := 1; i <= 3; i++ {
		r.client(fmt.Sprintf("w%d", i), "work", "--ttl", "2s", "--interval", "20ms")
	}
	for cycle := 0; cycle < cycles(2, 5); cycle++ {
		time.Sleep(2 * time.Second)
		for _, nd := range r.c.Nodes {
			r.c.Stop(nd, syscall.SIGKILL)
		}
		for _, nd := range r.c.Nodes {
			r.c.Restart(nd)
		}
		r.c.WaitLeader(20 * time.Second)
		t.Logf("cycle %d: every node killed and restarted", cycle)
	}
	for i := 0; i < cycles(3, 10); i++ {
		nd := r.c.Nodes[i%3]
		r.c.Stop(nd, syscall.SIGTERM)
		r.c.Restart(nd)
		r.c.WaitCaughtUp(nd, 30*time.Second)
	}
	time.Sleep(time.Second)
	r.stopClients()
	h := r.check()
	if ok, _, _ := h.count("commit"); ok == 0 {
		t.Fatal("no commit was acknowledged: the workload did not run")
	}
}
