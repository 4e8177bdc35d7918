// Package proccluster runs coordd clusters of real processes: each node is
// a `coordd` process with its own data dir and log file, on port 0 (the
// addresses it bound are read from its data dir's address file) or on
// fixed addresses, and stopped by PID. The fault suite, the process
// tests and coordbench use it.
//
// The API returns errors and logs through Options.Logf; it does not import
// testing. Tests use the adapter in testing.go (Start, StartTLS,
// StartNodes), which fails the test on an error and stops the cluster at
// cleanup.
package proccluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/internal/addrfile"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Build compiles a main package of this module (e.g. "./cmd/coordd") into
// dir and returns the path; flags go to go build (e.g. "-tags",
// "failpoints"). The working directory must be inside the module.
func Build(dir, pkg, name string, flags ...string) (string, error) {
	out := filepath.Join(dir, name)
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// BuildAll compiles several main packages of this module into dir in one
// go build (the packages they share are compiled and linked once, in
// parallel) and returns their paths in the order of pkgs; each binary is
// named for its package's last path element (e.g. "./cmd/coordd" →
// dir/coordd). flags go to go build.
func BuildAll(dir string, flags []string, pkgs ...string) ([]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	args := append(append([]string{"build", "-o", dir + string(filepath.Separator)}, flags...), pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %v\n%s", strings.Join(pkgs, " "), err, b)
	}
	paths := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		paths[i] = filepath.Join(dir, filepath.Base(pkg))
	}
	return paths, nil
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
	exited    chan struct{} // closed when Cmd has exited and been reaped
	Conn      *grpc.ClientConn
	ExtraArgs []string
	// TLS, when set, are the node's certificate files (its identity is its
	// id): the node runs mutual TLS and the harness connects as the node.
	TLS tlsutil.Files
	// Bin, when set, is the coordd binary this node runs from its next
	// start instead of the cluster's (a rolling upgrade swaps it).
	Bin string
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
	// StartTimeout bounds how long nodes on port 0 may take to form their
	// cluster (default a minute).
	StartTimeout time.Duration
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

// LoopbackNodes describes n nodes (node1…nodeN) on loopback port 0, each
// started with extraArgs: every node binds what the kernel gives it and
// writes the addresses to its data dir (internal/addrfile), which Launch
// reads. No port is chosen in advance, so none can be taken in between.
// withHTTP gives each an HTTP address too.
func LoopbackNodes(n int, withHTTP bool, extraArgs ...string) []*Node {
	var nodes []*Node
	for i := 1; i <= n; i++ {
		nd := &Node{ID: fmt.Sprintf("node%d", i), GRPCAddr: anyPort, RaftAddr: anyPort, ExtraArgs: extraArgs}
		if withHTTP {
			nd.HTTPAddr = anyPort
		}
		nodes = append(nodes, nd)
	}
	return nodes
}

// anyPort is a loopback address on port 0.
const anyPort = "127.0.0.1:0"

// portZero reports whether addr asks for the kernel's pick.
func portZero(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// Launch starts the given nodes (ids and addresses set, optionally a
// network namespace each) from bin and returns once they form one cluster.
//
// Nodes whose Raft addresses are all fixed (a namespace's, say) start
// together with a static initial cluster (--peers) of all of them; Launch
// does not wait for a leader then (WaitLeader does). When a Raft address
// has port 0 (LoopbackNodes), no peer list can name it: the first node
// starts alone and bootstraps a cluster of one, the others join through
// it (--join), every node's addresses are read from its address file, and
// Launch waits until every node sees all of them as members. On an error
// the nodes already started are stopped.
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
	static := true
	for _, nd := range nodes {
		nd.DataDir = filepath.Join(c.Dir, nd.ID)
		nd.LogPath = filepath.Join(c.Dir, nd.ID+".log")
		c.Nodes = append(c.Nodes, nd)
		peers = append(peers, nd.ID+"="+nd.RaftAddr)
		static = static && !portZero(nd.RaftAddr)
	}
	var err error
	if static {
		c.peers = strings.Join(peers, ",")
		err = c.launchStatic()
	} else {
		err = c.launchJoined(cmp.Or(o.StartTimeout, time.Minute))
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// launchStatic starts every node with the static initial cluster.
func (c *Cluster) launchStatic() error {
	for _, nd := range c.Nodes {
		if err := c.dial(nd); err != nil {
			return err
		}
	}
	for _, nd := range c.Nodes {
		if err := c.start(nd, ""); err != nil {
			return err
		}
	}
	return nil
}

// launchJoined starts the first node alone, then the others joining
// through it, and waits until they are all members.
func (c *Cluster) launchJoined(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	first := c.Nodes[0]
	if err := c.startAndRead(first, "", deadline); err != nil {
		return err
	}
	for _, nd := range c.Nodes[1:] {
		if err := c.start(nd, first.GRPCAddr); err != nil {
			return err
		}
	}
	for _, nd := range c.Nodes[1:] {
		if err := c.readAddrs(nd, deadline); err != nil {
			return err
		}
	}
	return c.waitMembers(deadline)
}

// startAndRead starts a node and reads the addresses it bound.
func (c *Cluster) startAndRead(nd *Node, join string, deadline time.Time) error {
	if err := c.start(nd, join); err != nil {
		return err
	}
	return c.readAddrs(nd, deadline)
}

// readAddrs waits for a started node's address file, takes the addresses
// it bound and connects to its gRPC address.
func (c *Cluster) readAddrs(nd *Node, deadline time.Time) error {
	for {
		a, err := addrfile.Read(nd.DataDir)
		if err == nil {
			nd.GRPCAddr, nd.HTTPAddr, nd.RaftAddr = a.GRPC, a.HTTP, a.Raft
			c.logf("%s listens on gRPC %s, HTTP %q, Raft %s", nd.ID, a.GRPC, a.HTTP, a.Raft)
			return c.dial(nd)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", nd.ID, err)
		}
		select {
		case <-nd.exited:
			return fmt.Errorf("%s exited before it listened (log %s):\n%s", nd.ID, nd.LogPath, logTail(nd.LogPath))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s wrote no %s in time (log %s):\n%s", nd.ID, addrfile.Name, nd.LogPath, logTail(nd.LogPath))
		}
	}
}

// logTail is the end of a log file, for an error message.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitMembers waits until every node lists every node as a member with a
// gRPC address (so each was admitted and the member table replicated).
func (c *Cluster) waitMembers(deadline time.Time) error {
	var last error
	for time.Now().Before(deadline) {
		last = nil
		for _, nd := range c.Nodes {
			if err := c.sees(nd); err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the nodes did not form one cluster in time: %v (logs in %s)", last, c.Dir)
}

// sees reports (as nil) whether nd lists every node of c as a member with
// a gRPC address.
func (c *Cluster) sees(nd *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ms, err := coordv1.NewClusterClient(nd.Conn).Members(ctx, &coordv1.MembersRequest{})
	if err != nil {
		return fmt.Errorf("%s: %w", nd.ID, err)
	}
	registered := 0
	for _, m := range ms.GetMembers() {
		if m.GetGrpcAddress() != "" {
			registered++
		}
	}
	if registered != len(c.Nodes) {
		return fmt.Errorf("%s sees %d registered members of %d", nd.ID, registered, len(c.Nodes))
	}
	return nil
}

// dial connects to a node's gRPC address (as the node, with TLS).
func (c *Cluster) dial(nd *Node) error {
	creds, err := tlsutil.Credentials(nd.TLS)
	if err == nil {
		nd.Conn, err = grpc.NewClient(nd.GRPCAddr, grpc.WithTransportCredentials(creds))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", nd.ID, err)
	}
	return nil
}

// Restart starts a stopped node with the same data dir and the addresses
// it had (those it bound, for a node started on port 0: its peers know it
// there, as testcluster's restarted nodes reuse theirs); its output is
// appended to its log file. It joins nothing: its state says which cluster
// it belongs to. (While the node is down an outgoing connection could in
// principle take one of its ports; Linux gives bind(port 0) and connect()
// ports of opposite parity while the range has both, so it does not in
// practice.)
func (c *Cluster) Restart(nd *Node) error { return c.start(nd, "") }

// start starts a node's process, joining through the member at the gRPC
// address join unless it is empty. The process gets SIGKILL if the
// process that started it dies (Pdeathsig), so no node outlives a crashed
// test or tool.
func (c *Cluster) start(nd *Node, join string) error {
	logf, err := os.OpenFile(nd.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"--id", nd.ID, "--data-dir", nd.DataDir, "--grpc-addr", nd.GRPCAddr, "--raft-addr", nd.RaftAddr,
		"--http-addr", nd.HTTPAddr}
	if c.peers != "" {
		args = append(args, "--peers", c.peers)
	}
	if join != "" {
		args = append(args, "--join", join)
	}
	args = append(args, nd.ExtraArgs...)
	bin := cmp.Or(nd.Bin, c.bin)
	var cmd *exec.Cmd
	if nd.Netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", nd.Netns, bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", nd.ID, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	nd.Cmd, nd.exited = cmd, exited
	c.logf("%s started, pid %d, gRPC %s, log %s", nd.ID, cmd.Process.Pid, nd.GRPCAddr, nd.LogPath)
	return nil
}

// WaitServing waits until a started node answers a status call on its
// gRPC address (it need not know a leader), and fails at once if its
// process exits.
func (c *Cluster) WaitServing(nd *Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if nd.Cmd == nil {
			return fmt.Errorf("%s is not running", nd.ID)
		}
		_, err := c.Status(nd, time.Second)
		if err == nil {
			return nil
		}
		select {
		case <-nd.exited:
			return fmt.Errorf("%s exited (log %s):\n%s", nd.ID, nd.LogPath, logTail(nd.LogPath))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not serve within %s: %v (log %s)", nd.ID, timeout, err, nd.LogPath)
		}
	}
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
	<-nd.exited
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
			r, err := coordv1.NewCoordinatorClient(nd.Conn).Acquire(ctx, &coordv1.AcquireRequest{Name: name, Owner: "probe", Ttl: pbtime.Dur(5000), RequestId: "probe-" + name})
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
