package proccluster

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

func TestLoopbackNodes(t *testing.T) {
	nodes, err := LoopbackNodes(3, false, "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, nd := range nodes {
		if nd.HTTPAddr != "" {
			t.Errorf("%s has HTTP %s without withHTTP", nd.ID, nd.HTTPAddr)
		}
		for _, a := range []string{nd.GRPCAddr, nd.RaftAddr} {
			if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
				t.Errorf("address %q (duplicate: %v)", a, seen[a])
			}
			seen[a] = true
		}
	}
	if nodes[2].ID != "node3" || strings.Join(nodes[0].ExtraArgs, " ") != "--log-level warn" {
		t.Fatalf("%+v", nodes[0])
	}
}

// Launch starts every node with the static cluster and its own data dir;
// Stop and Restart act by PID; Close kills the rest and removes the
// directory it created.
func TestLaunchStopRestartClose(t *testing.T) {
	bin := fakeNode(t)
	nodes, err := LoopbackNodes(3, false, "--extra")
	if err != nil {
		t.Fatal(err)
	}
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
	nodes, err := LoopbackNodes(2, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Launch(filepath.Join(t.TempDir(), "missing"), nodes, Options{}); err == nil || !strings.Contains(err.Error(), "node1") {
		t.Fatalf("err = %v", err)
	}
}

// freePort never hands out a port twice in a process: ports are only
// checked free until their node binds them, so a repeat would make two
// nodes of one cluster share a port. 500 picks from the ~22,000 ports
// below the ephemeral range would repeat about 5 times by chance.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 500 {
		a, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("freePort returned %s twice", a)
		}
		seen[a] = true
	}
}

// Ranges do not overlap each other or single ports handed out before.
func TestFreePortRangesDoNotOverlap(t *testing.T) {
	seen := map[int]bool{}
	for i := range 60 {
		n := 1 + 22*(i%2)
		base, err := FreePorts(n)
		if err != nil {
			t.Fatal(err)
		}
		for p := base; p < base+n; p++ {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}
