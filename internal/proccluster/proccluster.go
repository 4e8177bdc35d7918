// Package proccluster runs coordd clusters of real processes: each node is
// a `coordd` process with its own data dir and log file, started with a
// static initial cluster and stopped by PID. The fault suite, the process
// tests and coordbench use it.
//
// The API returns errors and logs through Options.Logf; it does not import
// testing. Tests use the adapter in testing.go (Start, StartTLS,
// StartNodes), which fails the test on an error and stops the cluster at
// cleanup.
package proccluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Build compiles a main package of this module (e.g. "./cmd/coordd") into
// dir and returns the path. The working directory must be inside the
// module.
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
	// HTTPAddr empty: the node serves no HTTP (metrics, health, API).
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

// Options tune Launch.
type Options struct {
	// Dir holds the nodes' data dirs and logs. Empty: a new temporary
	// directory, removed by Close.
	Dir string
	// Logf, when set, gets a line for every process started and stopped.
	Logf func(format string, args ...any)
}

// Cluster is a set of coordd processes.
type Cluster struct {
	bin    string
	Dir    string
	Nodes  []*Node
	peers  string
	logf   func(format string, args ...any)
	ownDir bool
	closed bool
}

// handedOut are the ports FreePorts returned in this process: a port is
// only checked free, not held, until a process binds it, so without this
// two picks could name the same port (seen: a node's HTTP port was the next
// node's Raft port, which then failed to bind).
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePorts finds n consecutive free loopback ports below the kernel's
// ephemeral range, none of which it returned before in this process, and
// returns the first. (A port from ":0" would be free now but could be
// handed to an outgoing connection before the process binds it; seen: a
// raft port taken by a client.)
func FreePorts(n int) (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				low = v
			}
		}
	}
	handedOut.Lock()
	defer handedOut.Unlock()
	// A candidate that overlaps a port handed out before costs map lookups,
	// so many may be tried; only the others are checked by listening.
	for try, listened := 0, 0; try < 10_000 && listened < 100; try++ {
		base := 10000 + rand.IntN(low-10000-n)
		if handedOutIn(base, n) {
			continue
		}
		listened++
		var ls []net.Listener
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if ok = err == nil; ok {
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			for p := base; p < base+n; p++ {
				handedOut.ports[p] = true
			}
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d free consecutive loopback ports below the ephemeral range", n)
}

// handedOutIn reports whether a port in [base, base+n) was handed out
// (handedOut held).
func handedOutIn(base, n int) bool {
	for p := base; p < base+n; p++ {
		if handedOut.ports[p] {
			return true
		}
	}
	return false
}

// freePort is one free loopback address (FreePorts).
func freePort() (string, error) {
	p, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}

// LoopbackNodes describes n nodes (node1…nodeN) on free loopback ports,
// each started with extraArgs. withHTTP gives each an HTTP address too.
func LoopbackNodes(n int, withHTTP bool, extraArgs ...string) ([]*Node, error) {
	var nodes []*Node
	for i := 1; i <= n; i++ {
		nd := &Node{ID: fmt.Sprintf("node%d", i), ExtraArgs: extraArgs}
		addrs := []*string{&nd.GRPCAddr, &nd.RaftAddr}
		if withHTTP {
			addrs = append(addrs, &nd.HTTPAddr)
		}
		for _, a := range addrs {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			*a = p
		}
		nodes = append(nodes, nd)
	}
	return nodes, nil
}

// Launch starts the given nodes (ids and addresses set, optionally a
// network namespace each) from bin, with a static initial cluster of all
// of them. It does not wait for a leader (WaitLeader does). On an error the
// nodes already started are stopped.
func Launch(bin string, nodes []*Node, o Options) (*Cluster, error) {
	c := &Cluster{bin: bin, Dir: o.Dir, logf: o.Logf}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "coordd-cluster-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.ownDir = dir, true
	}
	var peers []string
	for _, nd := range nodes {
		nd.DataDir = filepath.Join(c.Dir, nd.ID)
		nd.LogPath = filepath.Join(c.Dir, nd.ID+".log")
		c.Nodes = append(c.Nodes, nd)
		peers = append(peers, nd.ID+"="+nd.RaftAddr)
	}
	c.peers = strings.Join(peers, ",")
	for _, nd := range c.Nodes {
		creds, err := tlsutil.Credentials(nd.TLS)
		if err == nil {
			nd.Conn, err = grpc.NewClient(nd.GRPCAddr, grpc.WithTransportCredentials(creds))
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", nd.ID, err)
		}
	}
	for _, nd := range c.Nodes {
		if err := c.Restart(nd); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Restart starts a stopped node with the same data dir and addresses; its
// output is appended to its log file. The process gets SIGKILL if the
// process that started it dies (Pdeathsig), so no node outlives a crashed
// test or tool.
func (c *Cluster) Restart(nd *Node) error {
	logf, err := os.OpenFile(nd.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"--id", nd.ID, "--data-dir", nd.DataDir, "--grpc-addr", nd.GRPCAddr, "--raft-addr", nd.RaftAddr,
		"--http-addr", nd.HTTPAddr, "--peers", c.peers}, nd.ExtraArgs...)
	var cmd *exec.Cmd
	if nd.Netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", nd.Netns, c.bin}, args...)...)
	} else {
		cmd = exec.Command(c.bin, args...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", nd.ID, err)
	}
	nd.Cmd = cmd
	c.logf("%s started, pid %d, gRPC %s, log %s", nd.ID, cmd.Process.Pid, nd.GRPCAddr, nd.LogPath)
	return nil
}

// Signal sends sig to a running node by its PID.
func (c *Cluster) Signal(nd *Node, sig syscall.Signal) {
	if nd.Cmd != nil && nd.Cmd.Process != nil {
		_ = nd.Cmd.Process.Signal(sig)
	}
}

// Stop sends sig (SIGTERM, SIGKILL) to a node by its PID and reaps it.
func (c *Cluster) Stop(nd *Node, sig syscall.Signal) {
	if nd.Cmd == nil || nd.Cmd.Process == nil {
		return
	}
	pid := nd.Cmd.Process.Pid
	_ = nd.Cmd.Process.Signal(sig)
	_ = nd.Cmd.Wait()
	nd.Cmd = nil
	c.logf("%s stopped (%s), pid %d", nd.ID, sig, pid)
}

// Close kills every node by PID (resuming a stopped one first), closes the
// connections and removes the directory if Launch created it. Calling it
// again does nothing.
func (c *Cluster) Close() {
	if c.closed {
		return
	}
	c.closed = true
	for _, nd := range c.Nodes {
		c.Signal(nd, syscall.SIGCONT)
		c.Stop(nd, syscall.SIGKILL)
		if nd.Conn != nil {
			nd.Conn.Close()
		}
	}
	if c.ownDir {
		os.RemoveAll(c.Dir)
	}
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
	return c.status(nd, timeout, false)
}

// StatusDigest is Status with the node's FSM digest.
func (c *Cluster) StatusDigest(nd *Node, timeout time.Duration) (*coordv1.StatusResponse, error) {
	return c.status(nd, timeout, true)
}

func (c *Cluster) status(nd *Node, timeout time.Duration, digest bool) (*coordv1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return coordv1.NewClusterClient(nd.Conn).Status(ctx, &coordv1.StatusRequest{Digest: digest})
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
func (c *Cluster) WaitLeader(timeout time.Duration) (*Node, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			return l, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("no leader within %s (logs in %s)", timeout, c.Dir)
}

// WaitConverged waits until every running node applied the same index with
// the same FSM digest, and returns the digest.
func (c *Cluster) WaitConverged(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var last []string
	for time.Now().Before(deadline) {
		// All nodes at once: the leader appends a tick every 250 ms, and a
		// large state's digest takes a while, so nodes asked one after the
		// other would be read at different indexes.
		var running []*Node
		for _, nd := range c.Nodes {
			if nd.Cmd != nil {
				running = append(running, nd)
			}
		}
		idx := make([]uint64, len(running))
		digests := make([]string, len(running))
		errs := make([]error, len(running))
		var wg sync.WaitGroup
		for i, nd := range running {
			wg.Go(func() {
				st, err := c.StatusDigest(nd, 10*time.Second)
				idx[i], digests[i], errs[i] = st.GetAppliedIndex(), st.GetFsmDigest(), err
			})
		}
		wg.Wait()
		ok := errors.Join(errs...) == nil
		if ok && len(idx) > 0 {
			same := true
			for i := range idx {
				if idx[i] != idx[0] || digests[i] != digests[0] {
					same = false
				}
			}
			if same {
				return digests[0], nil
			}
			last = digests
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("nodes did not converge within %s: digests %v (logs in %s)", timeout, last, c.Dir)
}

// WaitCaughtUp waits until nd applied everything the leader had committed
// when the wait began (works under load, unlike WaitConverged).
func (c *Cluster) WaitCaughtUp(nd *Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var target uint64
	for {
		// A loaded leader may answer a status late (it hashes its whole
		// state for the digest); ask again rather than give up.
		leader, err := c.WaitLeader(time.Until(deadline))
		if err != nil {
			return err
		}
		st, err := c.Status(leader, time.Second)
		if err == nil {
			target = st.GetCommitIndex()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("status of the leader: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		if s, err := c.Status(nd, time.Second); err == nil && s.GetAppliedIndex() >= target {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not catch up to index %d within %s (logs in %s)", nd.ID, target, timeout, c.Dir)
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
			// One request id for every attempt, as a client retries: an
			// attempt that timed out here but committed later is returned
			// as this probe's grant, not seen as held by someone else.
			r, err := coordv1.NewCoordinatorClient(nd.Conn).Acquire(ctx, &coordv1.AcquireRequest{Name: name, Owner: "probe", TtlMs: 5000, RequestId: "probe-" + name})
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
