package proccluster

import (
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/internal/tlsutil"
)

// TB is the part of testing.TB the test adapter needs; *testing.T and
// *testing.B satisfy it. (An interface, so that this package does not
// import testing and coordbench can use it.)
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// TestCluster is a Cluster for tests, and a framework.Cluster (the
// interface it shares with the in-process testcluster): its methods fail
// the test instead of returning an error, its processes are killed at
// cleanup, and its data dirs and logs live in the test's temporary
// directory.
type TestCluster struct {
	*Cluster
	t TB
}

// Name is the node's id (framework.Member).
func (n *Node) Name() string { return n.ID }

// Endpoint is the node's gRPC address (framework.Member).
func (n *Node) Endpoint() string { return n.GRPCAddr }

// Start starts n nodes from bin on loopback port 0 (with HTTP), each with
// extraArgs, and returns once they form one cluster.
func Start(t TB, bin string, n int, extraArgs ...string) *TestCluster {
	t.Helper()
	return StartNodes(t, bin, LoopbackNodes(n, true, extraArgs...))
}

// StartTLS is Start with mutual TLS: files gives each node's certificate
// files (identity = node id).
func StartTLS(t TB, bin string, n int, files func(id string) tlsutil.Files, extraArgs ...string) *TestCluster {
	t.Helper()
	nodes := LoopbackNodes(n, true)
	for _, nd := range nodes {
		f := files(nd.ID)
		nd.TLS = f
		nd.ExtraArgs = append([]string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}, extraArgs...)
	}
	return StartNodes(t, bin, nodes)
}

// StartNodes starts the given nodes (ids and addresses set, optionally a
// network namespace each): Launch.
func StartNodes(t TB, bin string, nodes []*Node) *TestCluster {
	t.Helper()
	c, err := Launch(bin, nodes, Options{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &TestCluster{Cluster: c, t: t}
}

// Members are all nodes, running or not.
func (c *TestCluster) Members() []*Node { return c.Nodes }

// Conn is the node's connection (Node.Conn).
func (c *TestCluster) Conn(nd *Node) *grpc.ClientConn { return nd.Conn }

// Stop stops a node with SIGTERM (a clean shutdown) and reaps it.
func (c *TestCluster) Stop(nd *Node) { c.Cluster.Stop(nd, syscall.SIGTERM) }

// Kill stops a node with SIGKILL and reaps it.
func (c *TestCluster) Kill(nd *Node) { c.Cluster.Stop(nd, syscall.SIGKILL) }

// Restart starts a stopped node with the same data dir and addresses and
// returns once it serves (as testcluster's Restart does).
func (c *TestCluster) Restart(nd *Node) {
	c.t.Helper()
	err := c.Cluster.Restart(nd)
	if err == nil {
		err = c.Cluster.WaitServing(nd, 20*time.Second)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// WaitLeader polls until a leader answers (20 s at most).
func (c *TestCluster) WaitLeader() *Node {
	c.t.Helper()
	l, err := c.Cluster.WaitLeader(20 * time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// WaitConverged waits (30 s at most) until every running node applied the
// same index and returns their digest (equal, or the test fails).
func (c *TestCluster) WaitConverged() string {
	c.t.Helper()
	d, err := c.Cluster.WaitConverged(30 * time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	return d
}

// WaitCaughtUp waits until nd applied everything the leader had committed
// when the wait began.
func (c *TestCluster) WaitCaughtUp(nd *Node, timeout time.Duration) {
	c.t.Helper()
	if err := c.Cluster.WaitCaughtUp(nd, timeout); err != nil {
		c.t.Fatal(err)
	}
}
