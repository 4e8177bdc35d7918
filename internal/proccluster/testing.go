package proccluster

import (
	"time"

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

// TestCluster is a Cluster for tests: its methods fail the test instead of
// returning an error, its processes are killed at cleanup, and its data
// dirs and logs live in the test's temporary directory.
type TestCluster struct {
	*Cluster
	t TB
}

// Start starts n nodes from bin on loopback (with HTTP), each with
// extraArgs.
func Start(t TB, bin string, n int, extraArgs ...string) *TestCluster {
	t.Helper()
	nodes, err := LoopbackNodes(n, true, extraArgs...)
	if err != nil {
		t.Fatal(err)
	}
	return StartNodes(t, bin, nodes)
}

// StartTLS is Start with mutual TLS: files gives each node's certificate
// files (identity = node id).
func StartTLS(t TB, bin string, n int, files func(id string) tlsutil.Files, extraArgs ...string) *TestCluster {
	t.Helper()
	nodes, err := LoopbackNodes(n, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		f := files(nd.ID)
		nd.TLS = f
		nd.ExtraArgs = append([]string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}, extraArgs...)
	}
	return StartNodes(t, bin, nodes)
}

// StartNodes starts the given nodes (ids and addresses set, optionally a
// network namespace each).
func StartNodes(t TB, bin string, nodes []*Node) *TestCluster {
	t.Helper()
	c, err := Launch(bin, nodes, Options{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &TestCluster{Cluster: c, t: t}
}

// Restart starts a stopped node with the same data dir and addresses.
func (c *TestCluster) Restart(nd *Node) {
	c.t.Helper()
	if err := c.Cluster.Restart(nd); err != nil {
		c.t.Fatal(err)
	}
}

// WaitLeader polls until a leader answers.
func (c *TestCluster) WaitLeader(timeout time.Duration) *Node {
	c.t.Helper()
	l, err := c.Cluster.WaitLeader(timeout)
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// WaitConverged waits until every running node applied the same index and
// returns their digest (equal, or the test fails).
func (c *TestCluster) WaitConverged(timeout time.Duration) string {
	c.t.Helper()
	d, err := c.Cluster.WaitConverged(timeout)
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
