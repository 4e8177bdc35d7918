package proccluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/framework"
)

// fakeNode is a stand-in for coordd that records its arguments and waits.
func fakeNode(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fake-coordd")
	script := "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args-$2\"\nexec sleep 60\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Loopback nodes ask for port 0 everywhere: nothing is picked in advance.
func TestLoopbackNodes(t *testing.T) {
	nodes := LoopbackNodes(3, false, "--log-level", "warn")
	for _, nd := range nodes {
		if nd.HTTPAddr != "" || nd.GRPCAddr != "127.0.0.1:0" || nd.RaftAddr != "127.0.0.1:0" {
			t.Errorf("%s: gRPC %q, Raft %q, HTTP %q; want port 0 and no HTTP", nd.ID, nd.GRPCAddr, nd.RaftAddr, nd.HTTPAddr)
		}
	}
	if nodes[2].ID != "node3" || strings.Join(nodes[0].ExtraArgs, " ") != "--log-level warn" {
		t.Fatalf("%+v", nodes[0])
	}
	if nd := LoopbackNodes(1, true)[0]; nd.HTTPAddr != "127.0.0.1:0" {
		t.Fatalf("HTTP %q with withHTTP", nd.HTTPAddr)
	}
}

// fixedNodes are n nodes on fixed addresses that nothing binds (for the
// stand-in, which listens on none).
func fixedNodes(n int, extraArgs ...string) []*Node {
	var nodes []*Node
	for i := 1; i <= n; i++ {
		nodes = append(nodes, &Node{ID: fmt.Sprintf("node%d", i), GRPCAddr: fmt.Sprintf("127.0.0.1:%d", 1000+10*i),
			RaftAddr: fmt.Sprintf("127.0.0.1:%d", 1002+10*i), ExtraArgs: extraArgs})
	}
	return nodes
}

// Launch starts every node with the static cluster and its own data dir;
// Stop and Restart act by PID; Close kills the rest and removes the
// directory it created.
func TestLaunchStopRestartClose(t *testing.T) {
	bin := fakeNode(t)
	nodes := fixedNodes(3, "--extra")
	var lines []string
	c, err := Launch(bin, nodes, Options{Logf: func(f string, args ...any) { lines = append(lines, f) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(lines) != 3 {
		t.Fatalf("log lines %v", lines)
	}
	var args []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if args, err = os.ReadFile(filepath.Join(filepath.Dir(bin), "args-node2")); err == nil && len(args) > 0 {
			break
		}
	}
	want := "--id node2 --data-dir " + filepath.Join(c.Dir, "node2") + " --grpc-addr " + nodes[1].GRPCAddr +
		" --raft-addr " + nodes[1].RaftAddr + " --http-addr  --peers " + c.peers + " --extra\n"
	if string(args) != want {
		t.Fatalf("node2 args\n%q, want\n%q", args, want)
	}
	if got := strings.Count(c.peers, "="); got != 3 {
		t.Fatalf("peers %q", c.peers)
	}
	nd := c.Nodes[0]
	pid := nd.Cmd.Process.Pid
	c.Stop(nd, syscall.SIGKILL)
	if nd.Running() || syscall.Kill(pid, 0) == nil {
		t.Fatalf("node1 (pid %d) still there after Stop", pid)
	}
	if err := c.Restart(nd); err != nil || !nd.Running() || nd.Cmd.Process.Pid == pid {
		t.Fatalf("restart: %v", err)
	}
	var pids []int
	for _, nd := range c.Nodes {
		pids = append(pids, nd.Cmd.Process.Pid)
	}
	c.Signal(c.Nodes[1], syscall.SIGSTOP) // Close resumes and kills a stopped node too
	c.Close()
	c.Close()
	for _, p := range pids {
		if syscall.Kill(p, 0) == nil {
			t.Errorf("pid %d alive after Close", p)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", c.Dir, err)
	}
}

// A binary that cannot start is an error, and nothing is left running.
func TestLaunchError(t *testing.T) {
	if _, err := Launch(filepath.Join(t.TempDir(), "missing"), fixedNodes(2), Options{}); err == nil || !strings.Contains(err.Error(), "node1") {
		t.Fatalf("err = %v", err)
	}
}

// On port 0 the first node starts alone: a node that exits before it
// writes its address file fails Launch with its log, and the others are
// never started.
func TestLaunchOnPortZeroNodeThatExits(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fake-coordd")
	script := "#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/args\"\necho 'coordd: listen tcp: no luck' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Launch(bin, LoopbackNodes(3, false), Options{})
	if err == nil || !strings.Contains(err.Error(), "node1 exited before it listened") || !strings.Contains(err.Error(), "no luck") {
		t.Fatalf("err = %v", err)
	}
	args, _ := os.ReadFile(filepath.Join(filepath.Dir(bin), "args"))
	if got := strings.Count(string(args), "\n"); got != 1 || strings.Contains(string(args), "--peers") || strings.Contains(string(args), "--join") {
		t.Fatalf("started %d node(s), want node1 alone without --peers or --join:\n%s", got, args)
	}
}

// Real coordd processes on port 0: node1 bootstraps alone, the others
// join through it; every node's addresses are the ones it bound (distinct,
// none 0) and every node lists all three; a node killed and restarted
// comes back on the same addresses (its peers know it there) and serves.
func TestLaunchOnPortZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds coordd")
	}
	bin, err := Build(t.TempDir(), "./cmd/coordd", "coordd")
	if err != nil {
		t.Fatal(err)
	}
	c := Start(t, bin, 3, "--log-level", "warn")
	seen := map[string]bool{}
	for _, nd := range c.Nodes {
		for _, a := range []string{nd.GRPCAddr, nd.RaftAddr, nd.HTTPAddr} {
			if portZero(a) || !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
				t.Errorf("%s: address %q (seen before: %v)", nd.ID, a, seen[a])
			}
			seen[a] = true
		}
		if err := c.sees(nd); err != nil {
			t.Error(err)
		}
	}
	l := c.WaitLeader()
	before := *l
	c.Kill(l)
	c.WaitLeader()
	c.Restart(l)
	if l.GRPCAddr != before.GRPCAddr || l.RaftAddr != before.RaftAddr || l.HTTPAddr != before.HTTPAddr {
		t.Fatalf("restarted %s on %s/%s/%s, before %s/%s/%s", l.ID, l.GRPCAddr, l.RaftAddr, l.HTTPAddr,
			before.GRPCAddr, before.RaftAddr, before.HTTPAddr)
	}
	c.WaitCaughtUp(l, 20*time.Second)
	if d := c.WaitConverged(); d == "" {
		t.Fatal("no digest")
	}
}

// TestCluster is a framework.Cluster.
var _ framework.Cluster[*Node] = (*TestCluster)(nil)

// BuildAll names each binary for its package and reports a failed build
// with the packages and go's output.
func TestBuildAll(t *testing.T) {
	dir := t.TempDir()
	bins, err := BuildAll(dir, nil, "./cmd/coordctl", "./examples/daily-close")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"coordctl", "daily-close"} {
		if bins[i] != filepath.Join(dir, want) {
			t.Errorf("bins[%d] = %s; want %s in %s", i, bins[i], want, dir)
		}
		if fi, err := os.Stat(bins[i]); err != nil {
			t.Error(err)
		} else if fi.Mode()&0o111 == 0 {
			t.Errorf("%s: mode %v; want an executable", bins[i], fi.Mode())
		}
	}
	if _, err := BuildAll(dir, nil, "./cmd/no-such-command"); err == nil || !strings.Contains(err.Error(), "./cmd/no-such-command") {
		t.Fatalf("err = %v; want a build error naming the package", err)
	}
}
