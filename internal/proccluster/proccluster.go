// Package proccluster runs coordd clusters of real processes for tests:
// each node is a `coordd` process on loopback with its own data dir,
// started with a static initial cluster, stopped by PID at cleanup.
package proccluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Build compiles a main package of this module into dir and returns the path.
func Build(dir, pkg, name string) (string, error) {
	out := filepath.Join(dir, name)
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Node is one coordd process.
type Node struct {
	ID, GRPCAddr, RaftAddr, HTTPAddr, DataDir, LogPath string
	// Netns, when set, runs the process in that network namespace
	// (ip netns exec); its addresses are the namespace's.
	Netns     string
	Cmd       *exec.Cmd
	Conn      *grpc.ClientConn
	ExtraArgs []string
	// TLS, when set, are the node's certificate files (its identity is its
	// id): the node runs mutual TLS and the harness connects as the node.
	TLS tlsutil.Files
}

// Running reports whether the process is up.
func (n *Node) Running() bool { return n.Cmd != nil }

// Cluster is a set of coordd processes.
type Cluster struct {
	t     testing.TB
	bin   string
	Dir   string
	Nodes []*Node
	peers string
}

// freePort picks a free loopback port below the kernel's ephemeral range:
// a port from ":0" would be free now but could be handed to an outgoing
// connection before the node binds it (seen: a raft port taken by a client).
func freePort(t testing.TB) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				low = v
			}
		}
	}
	for i := 0; i < 100; i++ {
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return l.Addr().String()
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

// Start starts n nodes from bin on loopback; every process is killed at
// cleanup.
func Start(t testing.TB, bin string, n int, extraArgs ...string) *Cluster {
	t.Helper()
	var nodes []*Node
	for i := 1; i <= n; i++ {
		nodes = append(nodes, &Node{ID: fmt.Sprintf("node%d", i), GRPCAddr: freePort(t), RaftAddr: freePort(t),
			HTTPAddr: freePort(t), ExtraArgs: extraArgs})
	}
	return StartNodes(t, bin, nodes)
}

// StartTLS is Start with mutual TLS: files gives each node's certificate
// files (identity = node id).
func StartTLS(t testing.TB, bin string, n int, files func(id string) tlsutil.Files, extraArgs ...string) *Cluster {
	t.Helper()
	var nodes []*Node
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("node%d", i)
		f := files(id)
		args := append([]string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}, extraArgs...)
		nodes = append(nodes, &Node{ID: id, GRPCAddr: freePort(t), RaftAddr: freePort(t),
			HTTPAddr: freePort(t), ExtraArgs: args, TLS: f})
	}
	return StartNodes(t, bin, nodes)
}

// StartNodes starts the given nodes (ids and addresses set, optionally a
// network namespace each).
func StartNodes(t testing.TB, bin string, nodes []*Node) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: bin, Dir: t.TempDir()}
	var peers []string
	for _, nd := range nodes {
		nd.DataDir = filepath.Join(c.Dir, nd.ID)
		nd.LogPath = filepath.Join(c.Dir, nd.ID+".log")
		creds, err := tlsutil.Credentials(nd.TLS)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(nd.GRPCAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		nd.Conn = cc
		peers = append(peers, nd.ID+"="+nd.RaftAddr)
		c.Nodes = append(c.Nodes, nd)
	}
	c.peers = strings.Join(peers, ",")
	t.Cleanup(func() {
		for _, nd := range c.Nodes {
			c.Signal(nd, syscall.SIGCONT)
			c.Stop(nd, syscall.SIGKILL)
			nd.Conn.Close()
		}
	})
	for _, nd := range c.Nodes {
		c.Restart(nd)
	}
	return c
}

// Restart starts a stopped node with the same data dir and addresses.
func (c *Cluster) Restart(nd *Node) {
	c.t.Helper()
	logf, err := os.OpenFile(nd.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	args := append([]string{"--id", nd.ID, "--data-dir", nd.DataDir, "--grpc-addr", nd.GRPCAddr, "--raft-addr", nd.RaftAddr,
		"--http-addr", nd.HTTPAddr, "--peers", c.peers}, nd.ExtraArgs...)
	if nd.Netns != "" {
		args = append([]string{"netns", "exec", nd.Netns, c.bin}, args...)
		nd.Cmd = exec.Command("ip", args...)
	} else {
		nd.Cmd = exec.Command(c.bin, args...)
	}
	nd.Cmd.Stdout, nd.Cmd.Stderr = logf, logf
	// If the test process dies without its cleanups (killed, timed out),
	// the nodes die with it.
	nd.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := nd.Cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
}

// Signal sends sig to a running node by its PID.
func (c *Cluster) Signal(nd *Node, sig syscall.Signal) {
	if nd.Cmd != nil && nd.Cmd.Process != nil {
		_ = nd.Cmd.Process.Signal(sig)
	}
}

// Stop sends sig (SIGTERM, SIGKILL) and reaps the process.
func (c *Cluster) Stop(nd *Node, sig syscall.Signal) {
	if nd.Cmd == nil || nd.Cmd.Process == nil {
		return
	}
	_ = nd.Cmd.Process.Signal(sig)
	_ = nd.Cmd.Wait()
	nd.Cmd = nil
}

// Endpoints are the gRPC addresses of all nodes.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, nd := range c.Nodes {
		out = append(out, nd.GRPCAddr)
	}
	return out
}

// Status asks one node for its status.
func (c *Cluster) Status(nd *Node, timeout time.Duration) (*coordv1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return coordv1.NewClusterClient(nd.Conn).Status(ctx, &coordv1.StatusRequest{})
}

// Leader returns the running node that reports itself leader, or nil.
func (c *Cluster) Leader() *Node {
	for _, nd := range c.Nodes {
		if nd.Cmd == nil {
			continue
		}
		if st, err := c.Status(nd, 300*time.Millisecond); err == nil && st.GetState() == "Leader" {
			return nd
		}
	}
	return nil
}

// WaitLeader polls until a leader answers.
func (c *Cluster) WaitLeader(timeout time.Duration) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %s (logs in %s)", timeout, c.Dir)
	return nil
}

// WaitConverged waits until every running node applied the same index and
// returns their digests (equal, or the test fails).
func (c *Cluster) WaitConverged(timeout time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	for time.Now().Before(deadline) {
		var idx []uint64
		var digests []string
		ok := true
		for _, nd := range c.Nodes {
			if nd.Cmd == nil {
				continue
			}
			st, err := c.Status(nd, time.Second)
			if err != nil {
				ok = false
				break
			}
			idx = append(idx, st.GetAppliedIndex())
			digests = append(digests, st.GetFsmDigest())
		}
		if ok && len(idx) > 0 {
			same := true
			for i := range idx {
				if idx[i] != idx[0] || digests[i] != digests[0] {
					same = false
				}
			}
			if same {
				return digests[0]
			}
			last = digests
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("nodes did not converge within %s: digests %v (logs in %s)", timeout, last, c.Dir)
	return ""
}

// WaitCaughtUp waits until nd applied everything the leader had committed
// when the wait began (works under load, unlike WaitConverged).
func (c *Cluster) WaitCaughtUp(nd *Node, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var target uint64
	for {
		// A loaded leader may answer a status late (it hashes its whole
		// state for the digest); ask again rather than fail the test.
		st, err := c.Status(c.WaitLeader(timeout), time.Second)
		if err == nil {
			target = st.GetCommitIndex()
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("status of the leader: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		if s, err := c.Status(nd, time.Second); err == nil && s.GetAppliedIndex() >= target {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("%s did not catch up to index %d within %s (logs in %s)", nd.ID, target, timeout, c.Dir)
}

// AcquireAnywhere tries a fresh Acquire of name on every running node in
// turn (250 ms per try) until one grants it, and returns how long that took:
// the time until the cluster serves writes again after a fault.
func (c *Cluster) AcquireAnywhere(name string, budget time.Duration) (time.Duration, error) {
	start := time.Now()
	var last error
	for time.Since(start) < budget {
		for _, nd := range c.Nodes {
			if !nd.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			r, err := coordv1.NewCoordinatorClient(nd.Conn).Acquire(ctx, &coordv1.AcquireRequest{Name: name, Owner: "probe", TtlMs: 5000})
			cancel()
			if err == nil && r.GetAcquired() {
				return time.Since(start), nil
			}
			last = err
		}
		time.Sleep(10 * time.Millisecond) // retry pacing, as a client would
	}
	return 0, fmt.Errorf("no acquire within %s: %v", budget, last)
}
