//go:build faults

// Package faults is the fault-injection suite: real coordd processes, real
// faults (kill -9, SIGSTOP, whole-cluster crashes), clients as separate
// processes that record every call, histories checked offline (generations,
// porcupine against a model of the fencing authority, windows, durability,
// digests). Run it with
//
//	go test -tags faults ./integration/faults -v                       # short profile
//	COORDD_FAULTS_PROFILE=full go test -tags faults ./integration/faults -v -timeout 60m
//
// On failure the histories, node logs and data dirs are kept and their path
// printed.
package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proccluster"
	"github.com/coordd/coordd/internal/testutil"
)

var coorddBin, clientBin, coordctlBin string

// logStore is the Raft log store every node of the suite runs with:
// COORDD_FAULTS_LOG_STORE=wal|bolt, wal by default (and so in CI). The
// nodes get it as COORDD_RAFT_LOG_STORE, and each run checks their logs.
var logStore = "wal"

func TestMain(m *testing.M) {
	if v := os.Getenv("COORDD_FAULTS_LOG_STORE"); v != "" {
		logStore = v
	}
	if logStore != "wal" && logStore != "bolt" {
		fmt.Fprintf(os.Stderr, "COORDD_FAULTS_LOG_STORE=%q: want wal or bolt\n", logStore)
		os.Exit(2)
	}
	os.Setenv("COORDD_RAFT_LOG_STORE", logStore)
	fmt.Fprintf(os.Stderr, "fault suite: Raft log store %s\n", logStore)
	dir, err := os.MkdirTemp("", "coordd-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// With the test failpoints (internal/logstore/failpoint.go): inert
	// unless a scenario sets COORDD_TEST_FAILPOINTS.
	bins, err := proccluster.BuildAll(dir, []string{"-tags", "failpoints"}, "./cmd/coordd", "./integration/faults/faultclient", "./cmd/coordctl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	coorddBin, clientBin, coordctlBin = bins[0], bins[1], bins[2]
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// full reports whether the full profile runs.
func full() bool { return os.Getenv("COORDD_FAULTS_PROFILE") == "full" }

// cycles picks the short or full count.
func cycles(short, long int) int {
	if full() {
		return long
	}
	return short
}

// run is one scenario: a cluster, client processes and their histories.
type run struct {
	t       *testing.T
	dir     string
	c       *proccluster.TestCluster
	clients map[string]*exec.Cmd
}

func newRun(t *testing.T) *run {
	return newRunOn(t, func() *proccluster.TestCluster { return proccluster.Start(t, coorddBin, 3) })
}

// newRunOn is newRun on a cluster that start builds (e.g. in namespaces).
func newRunOn(t *testing.T, start func() *proccluster.TestCluster) *run {
	dir, err := os.MkdirTemp("", "coordd-faults-"+strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, dir: dir, clients: map[string]*exec.Cmd{}}
	r.c = start()
	t.Cleanup(func() {
		for _, cmd := range r.clients {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			keep := filepath.Join(dir, "cluster")
			_ = exec.Command("cp", "-r", r.c.Dir, keep).Run()
			t.Logf("histories, node logs and data dirs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	r.c.WaitLeader()
	for _, nd := range r.c.Nodes {
		r.await(nd.ID+" runs the "+logStore+" log store", 10*time.Second, func() bool {
			logs, _ := os.ReadFile(nd.LogPath)
			return strings.Contains(string(logs), "store="+logStore)
		})
	}
	return r
}

// client starts a faultclient process recording into dir/name.jsonl.
func (r *run) client(name, mode string, args ...string) *exec.Cmd {
	r.t.Helper()
	return r.clientVia(name, strings.Join(r.c.Endpoints(), ","), mode, args...)
}

// workers starts n work clients w1…wn (lease TTL 2 s, an acquire every
// interval).
func (r *run) workers(n int, interval string) {
	r.t.Helper()
	for i := 1; i <= n; i++ {
		r.client(fmt.Sprintf("w%d", i), "work", "--ttl", "2s", "--interval", interval)
	}
}

// failover kills the leader with kill -9, waits (10 s at most) until a
// fresh Acquire of probe is granted somewhere and restarts the old leader;
// it returns the old leader and how long the cluster took to serve again.
func (r *run) failover(probe string) (*proccluster.Node, time.Duration) {
	r.t.Helper()
	leader := r.c.WaitLeader()
	r.c.Kill(leader)
	took, err := r.c.AcquireAnywhere(probe, 10*time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	r.c.Restart(leader)
	return leader, took
}

// clientVia starts a client that reaches the cluster through endpoints
// (proxies the test can cut).
func (r *run) clientVia(name, endpoints, mode string, args ...string) *exec.Cmd {
	r.t.Helper()
	return r.clientIn("", name, endpoints, mode, args...)
}

// clientIn starts a client in a network namespace ("" for the test's own).
func (r *run) clientIn(netns, name, endpoints, mode string, args ...string) *exec.Cmd {
	r.t.Helper()
	logf, err := os.Create(filepath.Join(r.dir, name+".log"))
	if err != nil {
		r.t.Fatal(err)
	}
	defer logf.Close()
	argv := append([]string{clientBin, "--mode", mode, "--name", name, "--endpoints",
		endpoints, "--history", filepath.Join(r.dir, name+".jsonl")}, args...)
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test process
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.clients[name] = cmd
	return cmd
}

// stopClients ends every client gracefully (SIGTERM) and waits.
func (r *run) stopClients() {
	for name, cmd := range r.clients {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		delete(r.clients, name)
	}
}

// check runs every checker over the recorded histories.
func (r *run) check() history {
	r.t.Helper()
	h := loadHistory(r.t, r.dir)
	for lease, lh := range h.byLease() {
		if lease == "" {
			continue
		}
		r.t.Logf("lease %s:", lease)
		checkGenerations(r.t, lh)
		checkFencing(r.t, lh)
		checkWindows(r.t, lh)
		checkDurable(r.t, r.c.Endpoints(), lh, lease)
	}
	d := r.c.WaitConverged()
	r.t.Logf("checker 5: all nodes at digest %s", d[:12])
	for _, name := range []string{"acquire", "commit", "release", "claim", "complete"} {
		ok, failed, unknown := h.count(name)
		r.t.Logf("%-8s ok %d, refused %d, unknown %d", name, ok, failed, unknown)
	}
	return h
}

// await polls cond until it holds.
func (r *run) await(what string, timeout time.Duration, cond func() bool) {
	r.t.Helper()
	testutil.Poll(r.t, what, timeout, 20*time.Millisecond, cond)
}
