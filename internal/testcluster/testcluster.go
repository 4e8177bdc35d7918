// Package testcluster starts in-process coordd clusters for tests: N real
// nodes (real gRPC, real Raft over TCP on loopback port 0, temp data dirs),
// each a node.Node served by an api.Server, torn down through t.Cleanup,
// with Raft and server logs routed to t.Log. A Cluster is a
// framework.Cluster, like proccluster's clusters of processes.
package testcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/internal/framework"
	"github.com/coordd/coordd/internal/testutil"
	"github.com/coordd/coordd/internal/tlsutil"
	"github.com/coordd/coordd/node"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Config is one member's configuration: its node's and its API's.
type Config struct {
	Node node.Config
	API  api.Config
}

// Node is one member of a test cluster.
type Node struct {
	ID   string
	Dir  string
	Node *node.Node  // nil while stopped
	API  *api.Server // nil while stopped
	cfg  Config
}

// Running reports whether the node is up.
func (n *Node) Running() bool { return n.Node != nil }

// Name is the node's id (framework.Member).
func (n *Node) Name() string { return n.ID }

// Endpoint is the node's gRPC address, running or not (framework.Member).
func (n *Node) Endpoint() string { return n.cfg.API.GRPCAddr }

// A Cluster is a framework.Cluster: tests written against the interface
// run on it and on proccluster's processes.
var _ framework.Cluster[*Node] = (*Cluster)(nil)

// Cluster is a set of in-process nodes.
type Cluster struct {
	t     testing.TB
	Nodes []*Node
	log   *testLog
	conns map[string]*grpc.ClientConn
	mu    sync.Mutex
}

// Option changes the configuration of every node (or one, by id).
type Option func(id string, cfg *Config)

// WithConfig applies f to every node's config.
func WithConfig(f func(cfg *Config)) Option {
	return func(_ string, cfg *Config) { f(cfg) }
}

// WithNodeConfig applies f to one node's config.
func WithNodeConfig(id string, f func(cfg *Config)) Option {
	return func(nid string, cfg *Config) {
		if nid == id {
			f(cfg)
		}
	}
}

// New starts an n-node cluster: node1 bootstraps, the others join through
// it. It returns once every node is a member, knows every gRPC address,
// and a leader serves. At cleanup it checks that all running nodes reached
// the same FSM digest (G8), then stops them.
func New(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := &Cluster{t: t, log: newTestLog(t), conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(c.cleanup)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("node%d", i)
		cfg := Config{
			Node: node.Config{ID: id, DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", PruneInterval: time.Minute,
				// The same variable coordd reads: run the suite on either store.
				RaftLogStore: os.Getenv("COORDD_RAFT_LOG_STORE")},
			API: api.Config{GRPCAddr: "127.0.0.1:0"},
		}
		if i > 1 {
			cfg.Node.Join = c.Nodes[0].API.GRPCAddr()
		}
		for _, o := range opts {
			o(id, &cfg)
		}
		member := &Node{ID: id, Dir: cfg.Node.DataDir, cfg: cfg}
		c.Nodes = append(c.Nodes, member)
		c.start(member)
		if i == 1 {
			c.WaitLeader()
		}
	}
	c.Eventually("all members registered", 20*time.Second, func() bool {
		for _, node := range c.Nodes {
			st, err := c.Client(node).Status(context.Background(), &coordv1.StatusRequest{})
			if err != nil || st.GetLeaderAddress() == "" {
				return false
			}
			ms, err := coordv1.NewClusterClient(c.Conn(node)).Members(context.Background(), &coordv1.MembersRequest{})
			if err != nil || len(ms.GetMembers()) != n {
				return false
			}
			for _, m := range ms.GetMembers() {
				if m.GetGrpcAddress() == "" {
					return false
				}
			}
		}
		return true
	})
	return c
}

// start composes a member as coordd does: a node, served by the API,
// sharing a logger and a metrics registry.
func (c *Cluster) start(n *Node) {
	c.t.Helper()
	log := slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: logLevel()}))
	reg := prometheus.NewRegistry()
	ncfg, acfg := n.cfg.Node, n.cfg.API
	ncfg.Logger, ncfg.Metrics = log, reg
	acfg.Logger, acfg.Metrics = log, reg
	nd, err := node.New(ncfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", n.ID, err)
	}
	srv, err := api.Serve(acfg, nd)
	if err != nil {
		nd.Close()
		c.t.Fatalf("serve %s: %v", n.ID, err)
	}
	n.Node, n.API = nd, srv
	// Restarts reuse the addresses the first start picked.
	n.cfg.API.GRPCAddr, n.cfg.Node.RaftAddr = srv.GRPCAddr(), nd.RaftAddr()
}

// Stop shuts a node down (its data dir stays, so it can Restart): the
// node first, then its API.
func (c *Cluster) Stop(n *Node) {
	c.t.Helper()
	if n.Node == nil {
		return
	}
	if err := n.Node.Close(); err != nil {
		c.t.Logf("stop %s: %v", n.ID, err)
	}
	n.API.Close()
	n.Node, n.API = nil, nil
}

// Kill is Stop: a node in the test's process cannot die abruptly
// (framework.Cluster; proccluster's Kill is SIGKILL).
func (c *Cluster) Kill(n *Node) { c.Stop(n) }

// Members are all nodes, running or not.
func (c *Cluster) Members() []*Node { return c.Nodes }

// Restart starts a stopped node again on the same data dir and addresses.
// It joins nothing: its state says which cluster it belongs to.
func (c *Cluster) Restart(n *Node) {
	c.t.Helper()
	n.cfg.Node.Join = ""
	c.start(n)
}

// Running returns the nodes that are up.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// Leader returns the node that leads and serves, or nil.
func (c *Cluster) Leader() *Node {
	for _, n := range c.Running() {
		if n.Node.IsLeader() {
			return n
		}
	}
	return nil
}

// WaitLeader waits until a leader serves and returns it.
func (c *Cluster) WaitLeader() *Node {
	c.t.Helper()
	var l *Node
	c.Eventually("a leader", 20*time.Second, func() bool {
		l = c.Leader()
		return l != nil
	})
	return l
}

// Followers returns the running nodes that are not the leader.
func (c *Cluster) Followers() []*Node {
	var out []*Node
	for _, n := range c.Running() {
		if !n.Node.IsLeader() {
			out = append(out, n)
		}
	}
	return out
}

// Endpoints are the gRPC addresses of all nodes, running or not.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Endpoint()
	}
	return out
}

// Conn returns a shared client connection to a node's gRPC address.
func (c *Cluster) Conn(n *Node) *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := n.Endpoint()
	if cc, ok := c.conns[addr]; ok {
		return cc
	}
	// With TLS, the harness connects as the node itself (a member: not
	// subject to the ACL).
	creds, err := tlsutil.Credentials(n.cfg.API.TLS)
	if err != nil {
		c.t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		c.t.Fatalf("dial %s: %v", addr, err)
	}
	c.conns[addr] = cc
	return cc
}

// Coord returns a Coordinator client for a node.
func (c *Cluster) Coord(n *Node) coordv1.CoordinatorClient {
	return coordv1.NewCoordinatorClient(c.Conn(n))
}

// Client returns a Cluster-service client for a node.
func (c *Cluster) Client(n *Node) coordv1.ClusterClient { return coordv1.NewClusterClient(c.Conn(n)) }

// Eventually polls cond every 10 ms until it holds or timeout passes.
func (c *Cluster) Eventually(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	testutil.Poll(c.t, what, timeout, 10*time.Millisecond, cond)
}

// WaitConverged waits until all running nodes applied the same index with
// equal FSM digests and returns the digest.
func (c *Cluster) WaitConverged() string {
	c.t.Helper()
	var digests map[string]string
	c.Eventually("nodes to converge", 20*time.Second, func() bool {
		digests = map[string]string{}
		seen := map[string]bool{}
		var idx uint64
		for i, n := range c.Running() {
			a := n.Node.AppliedIndex()
			if i > 0 && a != idx {
				return false
			}
			idx = a
			d := n.Node.Digest()
			digests[n.ID] = d
			seen[d] = true
		}
		return len(seen) <= 1
	})
	ids := make([]string, 0, len(digests))
	for id := range digests {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return ""
	}
	c.t.Logf("converged: %d nodes, digest %s", len(ids), digests[ids[0]])
	return digests[ids[0]]
}

func (c *Cluster) cleanup() {
	if !c.t.Failed() && len(c.Running()) > 0 && c.Leader() != nil {
		c.WaitConverged()
	}
	c.mu.Lock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.mu.Unlock()
	for _, n := range c.Nodes {
		c.Stop(n)
	}
	c.log.close()
}

func logLevel() slog.Level {
	switch os.Getenv("COORDD_TEST_LOG") {
	case "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	default:
		return slog.LevelWarn
	}
}

// testLog writes to t.Log until the cluster is cleaned up, then drops
// lines (late goroutines must not log into a finished test).
type testLog struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func newTestLog(t testing.TB) *testLog { return &testLog{t: t} }

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Log(string(trim(p)))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

func trim(p []byte) []byte {
	for len(p) > 0 && p[len(p)-1] == '\n' {
		p = p[:len(p)-1]
	}
	return p
}

var _ io.Writer = (*testLog)(nil)
