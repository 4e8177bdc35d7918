//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/proccluster"
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
			r.await("A's lease lost", 10*time.Second, func() bool { return lostEvents(loadHistory(t, r.dir), "A") > 0 })
			time.Sleep(500 * time.Millisecond) // A keeps committing after waking
			r.stopClients()
			h := r.check()
			bGrant, _ := h.firstGrant("B")
			if _, refused := h.commitsAfter(t, "A", bGrant); refused == 0 {
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
	r.workers(3, "20ms")
	for cycle := 0; cycle < cycles(3, 10); cycle++ {
		time.Sleep(time.Duration(cycles(2, 7)) * time.Second)
		leader := r.c.WaitLeader()
		killed := time.Now()
		r.c.Kill(leader)
		took, err := r.c.AcquireAnywhere(fmt.Sprintf("probe-%d", cycle), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cycle %d: kill -9 %s -> acquire after %s", cycle, leader.ID, took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Errorf("cycle %d: acquire %s after the kill", cycle, took)
		}
		time.Sleep(3*time.Second - time.Since(killed))
		r.c.Restart(leader)
	}
	r.stopClients()
	if n := lostEvents(r.check(), "holder"); n != 0 {
		t.Errorf("the kept-alive holder lost its lease (%d times)", n)
	}
}

// Scenario 5: the paused leader. SIGSTOP the leader for 3 x the election
// timeout; the resumed old leader acknowledges nothing from its old term
// (porcupine would see a stale grant or commit) and expires no lease on its
// own (the generations checker would see a double grant).
func TestPausedLeader(t *testing.T) {
	r := newRun(t)
	r.workers(3, "20ms")
	for cycle := 0; cycle < cycles(2, 5); cycle++ {
		time.Sleep(2 * time.Second)
		leader := r.c.WaitLeader()
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
	r.workers(3, "20ms")
	for cycle := 0; cycle < cycles(2, 5); cycle++ {
		time.Sleep(2 * time.Second)
		for _, nd := range r.c.Nodes {
			r.c.Kill(nd)
		}
		for _, nd := range r.c.Nodes {
			r.c.Restart(nd)
		}
		r.c.WaitLeader()
		t.Logf("cycle %d: every node killed and restarted", cycle)
	}
	for i := 0; i < cycles(3, 10); i++ {
		nd := r.c.Nodes[i%3]
		r.c.Stop(nd)
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

// Scenario 9: clock faults through coordd's test hook. The leader's wall
// clock is set 5 minutes ahead, then 5 minutes behind, and it takes over
// leadership while the workload runs: no outcome changes (the checkers),
// the kept-alive holder loses nothing, and the leader change shortens no
// lease.
func TestClockSkew(t *testing.T) {
	r := newRun(t)
	r.client("holder", "hold", "--lease", "H", "--resource", "HR", "--ttl", "5s", "--interval", "200ms")
	r.workers(2, "30ms")
	for i, skew := range []time.Duration{5 * time.Minute, -5 * time.Minute} {
		time.Sleep(time.Second)
		nd := r.c.Nodes[i]
		r.c.Stop(nd)
		nd.ExtraArgs = append(nd.ExtraArgs, "--test-clock-offset", skew.String())
		r.c.Restart(nd)
		r.c.WaitCaughtUp(nd, 30*time.Second)

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		leader := r.c.WaitLeader()
		if leader == nd { // the change under test is *to* the skewed node
			other := r.c.Nodes[(i+1)%3]
			if _, err := coordv1.NewClusterClient(leader.Conn).TransferLeadership(ctx, &coordv1.TransferLeadershipRequest{Id: other.ID}); err != nil {
				t.Fatalf("transfer to %s: %v", other.ID, err)
			}
			r.await(other.ID+" leads", 10*time.Second, func() bool { return r.c.Leader() == other })
			leader = other
		}
		cc := coordv1.NewCoordinatorClient(leader.Conn)
		probe := fmt.Sprintf("skew-probe-%d", i)
		if _, err := cc.Acquire(ctx, &coordv1.AcquireRequest{Name: probe, Owner: "probe", Ttl: pbtime.Dur(20000)}); err != nil {
			t.Fatal(err)
		}
		before, err := cc.GetLease(ctx, &coordv1.GetLeaseRequest{Name: probe})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if _, err := coordv1.NewClusterClient(leader.Conn).TransferLeadership(ctx, &coordv1.TransferLeadershipRequest{Id: nd.ID}); err != nil {
			t.Fatalf("transfer to %s: %v", nd.ID, err)
		}
		r.await(nd.ID+" leads", 10*time.Second, func() bool { return r.c.Leader() == nd })
		after, err := coordv1.NewCoordinatorClient(nd.Conn).GetLease(ctx, &coordv1.GetLeaseRequest{Name: probe})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		elapsed := time.Since(t0).Milliseconds()
		b, a := before.GetLease(), after.GetLease()
		if a.GetExpired() || a.GetExpiresInMs()+elapsed+50 < b.GetExpiresInMs() || a.GetExpiresInMs() > b.GetExpiresInMs()+1000 {
			t.Errorf("skew %s: %d ms left before the leader change, %d ms left %d ms later", skew, b.GetExpiresInMs(), a.GetExpiresInMs(), elapsed)
		}
		t.Logf("skew %s: leadership %s -> %s; probe lease %d ms left -> %d ms left %d ms later", skew, leader.ID, nd.ID,
			b.GetExpiresInMs(), a.GetExpiresInMs(), elapsed)
		time.Sleep(2 * time.Second) // the workload runs under the skewed leader
	}
	r.stopClients()
	if n := lostEvents(r.check(), "holder"); n != 0 {
		t.Errorf("the kept-alive holder lost its lease (%d times)", n)
	}
}

// freeze puts a process into a cgroup (v1 freezer) and freezes it: unlike
// SIGSTOP, the process gets no signal and cannot tell. (A 1 % CPU quota is
// not enough here: a Go client still renews its lease at 1 %.) The returned
// function thaws it and removes the group.
func freeze(t *testing.T, pid int) func() {
	t.Helper()
	dir := fmt.Sprintf("/sys/fs/cgroup/freezer/coordd-faults-%d", pid)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("no cgroup v1 freezer here: %v", err)
	}
	write := func(file, v string) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644); err != nil {
			t.Fatalf("cgroup %s: %v", file, err)
		}
	}
	write("cgroup.procs", fmt.Sprint(pid))
	write("freezer.state", "FROZEN")
	done := false
	thaw := func() {
		if done {
			return
		}
		done = true
		write("freezer.state", "THAWED")
		_ = os.WriteFile("/sys/fs/cgroup/freezer/cgroup.procs", []byte(fmt.Sprint(pid)), 0o644)
		_ = os.Remove(dir)
	}
	t.Cleanup(thaw)
	return thaw
}

// Scenario 2: the starved holder. A renews and commits in a loop; it is
// frozen by the cgroup freezer for TTL + 1 s; B acquires meanwhile. No
// commit of A that started after B's grant is accepted.
func TestStarvedHolder(t *testing.T) {
	r := newRun(t)
	const ttl = 2 * time.Second
	a := r.client("A", "hold", "--ttl", ttl.String(), "--interval", "20ms")
	r.await("A holds L and commits", 15*time.Second, func() bool {
		return r.seen("A", func(x record) bool { return x.Op == "commit" && x.Accepted })
	})
	lift := freeze(t, a.Process.Pid)
	starved := time.Now()
	r.client("B", "work", "--ttl", ttl.String(), "--interval", "50ms")
	r.await("B acquires", 20*time.Second, func() bool {
		return r.seen("B", func(x record) bool { return x.Op == "acquire" && x.Accepted })
	})
	if d := time.Since(starved); d < ttl+time.Second {
		time.Sleep(ttl + time.Second - d)
	}
	lift()
	time.Sleep(time.Second) // A runs at full speed again and keeps committing
	r.stopClients()
	h := r.check()
	_, bGrant := h.firstGrant("B")
	after, _ := h.commitsAfter(t, "A", bGrant)
	t.Logf("A made %d commits after B's grant, none accepted", after)
}

// Scenario 8 (the keepalive part): a holder in its own network namespace
// has its connections to the cluster cut (iptables resets them) for
// 0.5 x TTL — the lease is kept — and then for 1.5 x TTL — the lease is
// lost: the SDK signals it before the server grants the lease to the
// waiting B, and the holder's writes after healing are refused.
func TestKeepAliveCutOff(t *testing.T) {
	lab := newNetlab(t)
	r := newRunOn(t, func() *proccluster.TestCluster { return netCluster(t, lab) })
	const ttl = 6 * time.Second
	kNS, _ := lab.host()
	var nodeIPs []string
	for _, nd := range r.c.Nodes {
		nodeIPs = append(nodeIPs, strings.Split(nd.GRPCAddr, ":")[0])
	}
	cutFor := func(d time.Duration) {
		lab.reject(kNS, nodeIPs...)
		time.Sleep(d)
		lab.heal(kNS)
	}
	eps := strings.Join(r.c.Endpoints(), ",")
	r.clientIn(kNS, "K", eps, "hold", "--ttl", ttl.String(), "--interval", "100ms")
	r.await("K holds L and commits", 15*time.Second, func() bool {
		return r.seen("K", func(x record) bool { return x.Op == "commit" && x.Accepted })
	})
	cutFor(ttl / 2)
	time.Sleep(ttl) // renewals resume; a lease lost here would show as an event
	if lostEvents(loadHistory(t, r.dir), "K") != 0 {
		t.Fatal("K lost its lease over a cut of 0.5 x TTL")
	}
	r.clientVia("B", eps, "work", "--ttl", ttl.String(), "--interval", "50ms")
	cutFor(3 * ttl / 2)
	r.await("B acquires", 20*time.Second, func() bool {
		return r.seen("B", func(x record) bool { return x.Op == "acquire" && x.Accepted })
	})
	time.Sleep(time.Second) // K, healed, keeps committing with its old token
	r.stopClients()
	h := r.check()
	bGrant, _ := h.firstGrant("B")
	var lostAt int64
	for _, e := range h.events {
		if e.Client == "K" && e.Op == "lost" {
			lostAt = e.AtNs
		}
	}
	if lostAt == 0 || lostAt >= bGrant {
		t.Fatalf("K's SDK signalled the loss at %d, B's granting call started at %d", lostAt, bGrant)
	}
	h.commitsAfter(t, "K", bGrant)
	t.Logf("K signalled the loss %s before B's granting call", time.Duration(bGrant-lostAt).Round(time.Millisecond))
}

// netCluster starts three nodes, each in its own namespace of lab.
func netCluster(t *testing.T, lab *netlab) *proccluster.TestCluster {
	var nodes []*proccluster.Node
	for i := 1; i <= 3; i++ {
		ns, ip := lab.host()
		// The namespace addresses are not loopback: plaintext needs --insecure.
		nodes = append(nodes, &proccluster.Node{ID: fmt.Sprintf("node%d", i), Netns: ns, GRPCAddr: ip + ":7400",
			HTTPAddr: ip + ":7401", RaftAddr: ip + ":7402", ExtraArgs: []string{"--insecure"}})
	}
	return proccluster.StartNodes(t, coorddBin, nodes)
}

func lostEvents(h history, client string) int {
	n := 0
	for _, e := range h.events {
		if e.Client == client && e.Op == "lost" {
			n++
		}
	}
	return n
}

// Scenario 7: the disk fills up. One node's data dir moves to a small tmpfs
// (first the leader's, then a follower's); a filler file takes the rest of
// the space while the workload runs, and large entries make the node need
// new space (bbolt grows its file; the wal store runs through its
// preallocated segment, here 4 MiB, and cannot create the next one). (A
// read-only remount is refused while the store holds its files open for
// writing, so "read-only" is not simulated.) The node fails its writes with
// a clear log line and a leader steps down; the others make progress;
// nothing acknowledged is lost; once space returns, the node catches up
// without a restart.
func TestDiskFull(t *testing.T) {
	r := newRunOn(t, func() *proccluster.TestCluster {
		return proccluster.Start(t, coorddBin, 3, "--raft-wal-segment-size", "4MiB")
	})
	r.workers(2, "30ms")
	for round, onLeader := range []bool{true, false} {
		time.Sleep(time.Second)
		leader := r.c.WaitLeader()
		nd := leader
		if !onLeader {
			for _, x := range r.c.Nodes {
				if x != leader {
					nd = x
					break
				}
			}
		}
		mnt := filepath.Join(r.dir, fmt.Sprintf("tmpfs-%d", round))
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
		r.c.Stop(nd)
		data := filepath.Join(mnt, "data")
		// Not sparse: the wal segment keeps the space preallocated for it.
		if out, err := exec.Command("cp", "-a", "--sparse=never", nd.DataDir, data).CombinedOutput(); err != nil {
			t.Fatalf("copy data dir: %v %s", err, out)
		}
		nd.DataDir = data
		r.c.Restart(nd)
		r.c.WaitCaughtUp(nd, 30*time.Second)
		if onLeader {
			if l := r.c.WaitLeader(); l != nd {
				if _, err := coordv1.NewClusterClient(l.Conn).TransferLeadership(context.Background(),
					&coordv1.TransferLeadershipRequest{Id: nd.ID}); err != nil {
					t.Fatal(err)
				}
				r.await(nd.ID+" leads", 10*time.Second, func() bool { return r.c.Leader() == nd })
			}
		}
		filler := filepath.Join(mnt, "filler")
		fullLines := func() int { // the node's log is the same file in both rounds
			logs, _ := os.ReadFile(nd.LogPath)
			return strings.Count(strings.ToLower(string(logs)), "no space left on device")
		}
		seen := fullLines()
		_ = exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1M", "count=64").Run()
		full := func() bool { return fullLines() > seen }
		// The small workload may fit in space the store already has (bbolt's
		// free pages, the rest of the wal segment); large entries use it up.
		if n := r.bigWritesUntil(fmt.Sprintf("big-%d", round), 400, full); !full() {
			t.Fatalf("%s's log does not report the full disk after %d large writes", nd.ID, n)
		}
		r.await("another node leads", 20*time.Second, func() bool {
			l := r.c.Leader()
			return l != nil && l != nd
		})
		before := r.commitsAccepted()
		r.await("progress without the faulty node", 20*time.Second, func() bool { return r.commitsAccepted() > before+5 })
		os.Remove(filler)
		r.c.WaitCaughtUp(nd, 30*time.Second)
		t.Logf("round %d: %s (leader=%v) ran out of space, the others went on, it caught up", round, nd.ID, onLeader)
	}
	r.stopClients()
	r.check()
}

// bigWritesUntil commits payloads of 60 KiB under a lease of its own
// (through the SDK, so the commits need a majority, not every node) until
// done holds or n were acknowledged; it returns how many were. A failed
// write (the leader stepping down) is retried with the same key.
func (r *run) bigWritesUntil(lease string, n int, done func() bool) int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c, err := client.New(ctx, r.c.Endpoints(), client.WithOwner("big-writer"))
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, lease, 30*time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	payload := make([]byte, 60<<10)
	acked := 0
	for acked < n && !done() {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := l.FencedCommit(wctx, lease+"-res", fmt.Sprintf("%s-%d", lease, acked), payload)
		wcancel()
		if err != nil {
			if ctx.Err() != nil {
				r.t.Fatalf("big write %d: %v", acked, err)
			}
			r.t.Logf("big write %d: %v (retrying)", acked, err)
			time.Sleep(50 * time.Millisecond) // retry pacing, as a client would
			continue
		}
		acked++
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = l.Release(rctx)
	rcancel()
	return acked
}

// commitsAccepted counts accepted commits in the histories so far.
func (r *run) commitsAccepted() int {
	n := 0
	for _, o := range loadHistory(r.t, r.dir).ops {
		if o.call.Op == "commit" && o.ok() && o.ret.Accepted {
			n++
		}
	}
	return n
}

// Scenario 4: the leader is isolated by iptables in its network namespace,
// with one client stuck on its side. The old leader acknowledges nothing
// after the majority elects a new one (the stuck client gets no success),
// the majority side goes on, and everything converges after healing.
func TestLeaderIsolated(t *testing.T) {
	lab := newNetlab(t)
	r := newRunOn(t, func() *proccluster.TestCluster { return netCluster(t, lab) })
	ips := map[string]string{}
	nss := map[string]string{}
	for _, nd := range r.c.Nodes {
		ips[nd.ID], nss[nd.ID] = strings.Split(nd.GRPCAddr, ":")[0], nd.Netns
	}
	stuckNS, _ := lab.host()
	eps := strings.Join(r.c.Endpoints(), ",")
	for i := 1; i <= 2; i++ {
		r.clientVia(fmt.Sprintf("w%d", i), eps, "work", "--ttl", "2s", "--interval", "30ms")
	}
	time.Sleep(2 * time.Second)
	old := r.c.WaitLeader()
	r.clientIn(stuckNS, "stuck", old.GRPCAddr, "work", "--ttl", "2s", "--interval", "30ms")
	time.Sleep(time.Second)
	// Partition: the old leader talks only to the stuck client.
	var others []string
	for id, ip := range ips {
		if id != old.ID {
			others = append(others, ip)
		}
	}
	lab.drop(nss[old.ID], append(others, lab.RootIP())...)
	lab.drop(stuckNS, others...)
	partitioned := time.Now()
	r.await("a new leader on the majority side", 15*time.Second, func() bool {
		l := r.c.Leader()
		return l != nil && l != old
	})
	newLeaderAt := time.Now()
	time.Sleep(3 * time.Second) // the majority works; the stuck client tries the old leader
	healedAt := time.Now()
	for ns := range map[string]bool{nss[old.ID]: true, stuckNS: true} {
		lab.heal(ns)
	}
	r.c.WaitCaughtUp(old, 30*time.Second)
	time.Sleep(time.Second)
	r.stopClients()
	h := r.check()
	successes, tried := 0, 0
	for _, o := range h.ops {
		if o.client != "stuck" || o.callNs < newLeaderAt.UnixNano() || o.callNs > newLeaderAt.Add(3*time.Second).UnixNano() {
			continue
		}
		tried++
		// A call that ended after the heal may rightly succeed.
		if o.retNs < healedAt.UnixNano() && o.ok() && (o.ret.Accepted || o.ret.Claimed) {
			successes++
			t.Errorf("the isolated old leader acknowledged %s %s at +%s", o.call.Op, o.call.Key,
				time.Duration(o.retNs-partitioned.UnixNano()).Round(time.Millisecond))
		}
	}
	if tried == 0 {
		t.Error("the stuck client made no call while it was cut off")
	}
	majority, _, _ := h.count("commit")
	t.Logf("partitioned %s for %s; the stuck client tried %d calls while cut, %d succeeded; commits overall: %d", old.ID,
		time.Since(partitioned).Round(100*time.Millisecond), tried, successes, majority)
}

// Scenario 8 (the unknown-outcome part): a third of the answers to K's
// Acquire, ClaimWindow, CompleteWindow, FencedCommit and Release calls are
// lost after the server applied them (the client sees a reset connection);
// the SDK retries with the same request id or idempotency key. A second
// grant would show as a generation jump to porcupine, a second effect as a
// commit accepted twice; neither happens.
func TestLostReplies(t *testing.T) {
	r := newRun(t)
	r.client("K", "work", "--ttl", "3s", "--interval", "10ms", "--lose-replies", "0.3")
	r.client("w", "work", "--ttl", "3s", "--interval", "30ms")
	time.Sleep(time.Duration(cycles(6, 30)) * time.Second)
	r.stopClients()
	h := r.check()
	lost := map[string]int{}
	for _, e := range h.events {
		if e.Op == "reply-lost" {
			lost[e.Reason[strings.LastIndexByte(e.Reason, '/')+1:]]++
		}
	}
	for _, m := range []string{"Acquire", "ClaimWindow", "FencedCommit", "Release"} {
		if lost[m] == 0 {
			t.Errorf("no %s reply was lost: the fault did not bite", m)
		}
	}
	t.Logf("replies lost and retried: %v", lost)
}

// Scenario 10: crash consistency of the Raft log store. Heavy appends
// (four workers with no pause between calls, two writers of 4 KiB fenced
// commits that fill the wal store's 512 KiB segments every few seconds, so
// kills also land around segment rotations; the payloads stay in the state,
// whose digest every status call computes, so not larger); kill -9 a node during them
// (the leader on even iterations, a follower on odd ones) and restart it
// at once: it must come back and catch up every time. 5 iterations (full:
// 50). Then every acknowledged write must be there (checker 4), every node
// at the same digest (checker 5), and the other checkers hold.
func TestLogStoreCrashLoop(t *testing.T) {
	r := newRunOn(t, func() *proccluster.TestCluster {
		return proccluster.Start(t, coorddBin, 3, "--raft-wal-segment-size", "512KiB")
	})
	for i := 1; i <= 4; i++ {
		r.client(fmt.Sprintf("w%d", i), "work", "--lease", fmt.Sprintf("L%d", i), "--resource", fmt.Sprintf("R%d", i),
			"--ttl", "5s", "--interval", "0s")
	}
	for i := 1; i <= 2; i++ {
		r.client(fmt.Sprintf("bulk%d", i), "hold", "--lease", fmt.Sprintf("B%d", i), "--resource", fmt.Sprintf("BR%d", i),
			"--ttl", "10s", "--interval", "0s", "--payload-bytes", "4096")
	}
	r.await("the bulk writers commit", 20*time.Second, func() bool { return r.commitsAccepted() > 20 })
	n := cycles(5, 50)
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond) // appends go on
		leader := r.c.WaitLeader()
		victim := leader
		if i%2 == 1 {
			for victim == leader {
				victim = r.c.Nodes[rand.IntN(len(r.c.Nodes))]
			}
		}
		r.c.Kill(victim)
		r.c.Restart(victim)
		r.c.WaitCaughtUp(victim, 30*time.Second)
		t.Logf("iteration %d: kill -9 %s (leader=%v), restarted, caught up", i, victim.ID, victim == leader)
	}
	time.Sleep(time.Second)
	r.stopClients()
	h := r.check()
	if ok, _, _ := h.count("commit"); ok < 100 {
		t.Fatalf("only %d commits acknowledged: the appends were not heavy", ok)
	}
	if logStore == "wal" {
		segments := 0
		for _, nd := range r.c.Nodes {
			files, _ := filepath.Glob(filepath.Join(nd.DataDir, "wal", "*.wal"))
			segments = max(segments, len(files))
		}
		if segments < 2 {
			t.Errorf("the log never rotated to a second segment (%d files): rotations were not exercised", segments)
		}
		t.Logf("wal segment files on the fullest node: %d", segments)
	}
}
