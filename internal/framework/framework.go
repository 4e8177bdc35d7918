// Package framework is the one interface of coordd's test clusters, after
// etcd's tests/framework: a test written against Cluster runs on in-process
// nodes (internal/testcluster: fast, with the node's internals at hand)
// and on coordd processes (internal/proccluster: real binaries, signals,
// kill -9) alike. Both harnesses bind port 0 and learn the addresses they
// got, so no test picks a port.
//
// A cluster is closed through t.Cleanup by the constructor that made it;
// a test never closes one itself.
package framework

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Member is one node of a cluster: *testcluster.Node or *proccluster.Node.
type Member interface {
	comparable
	// Name is the node's id (node1, node2, …).
	Name() string
	// Endpoint is the node's gRPC address.
	Endpoint() string
	// Running reports whether the node is up.
	Running() bool
}

// Cluster is a running test cluster of members M. Its methods fail the
// test instead of returning errors.
type Cluster[M Member] interface {
	// Members are all nodes, running or not, node1 first.
	Members() []M
	// Endpoints are the members' gRPC addresses, running or not.
	Endpoints() []string
	// Leader is the running member that leads, or the zero M.
	Leader() M
	// WaitLeader waits until a member leads and returns it.
	WaitLeader() M
	// Stop shuts a member down cleanly; its data dir stays.
	Stop(M)
	// Kill stops a member abruptly: SIGKILL for a process. An in-process
	// node cannot die without its test: there Kill is Stop.
	Kill(M)
	// Restart starts a stopped member again on its data dir and
	// addresses.
	Restart(M)
	// Conn is a shared connection to a member's gRPC address (as the
	// member itself, with TLS).
	Conn(M) *grpc.ClientConn
	// WaitConverged waits until the running members applied the same
	// index with equal FSM digests and returns the digest.
	WaitConverged() string
}

// Coord is a Coordinator client on a member.
func Coord[M Member](c Cluster[M], m M) coordv1.CoordinatorClient {
	return coordv1.NewCoordinatorClient(c.Conn(m))
}

// Client is an SDK client on all of the cluster's endpoints, closed at
// cleanup. opts come after the harness's (TLS files, an owner, …).
func Client[M Member](t testing.TB, c Cluster[M], opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := client.New(ctx, c.Endpoints(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
