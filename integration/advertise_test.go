package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/internal/devca"
	"github.com/coordd/coordd/internal/pbtime"
	"github.com/coordd/coordd/internal/proccluster"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// advertisedNodes are n nodes n1…nN that bind localhost:port (127.0.0.1)
// and advertise localhost:port, Raft and gRPC: Launch gives them
// --peers n1=localhost:P1,…, the same names. Ports come from textPorts:
// a static cluster needs them before it starts. spare more Raft ports
// follow, for restarts on a new address.
func advertisedNodes(t *testing.T, n, spare int) ([]*proccluster.Node, []string) {
	base := textPorts(t, 2*n+spare)
	var nodes []*proccluster.Node
	for i := range n {
		nd := &proccluster.Node{ID: fmt.Sprintf("n%d", i+1),
			RaftAddr: fmt.Sprintf("localhost:%d", base+i), GRPCAddr: fmt.Sprintf("localhost:%d", base+n+i)}
		nd.ExtraArgs = advertiseArgs(nd)
		nodes = append(nodes, nd)
	}
	var extra []string
	for i := range spare {
		extra = append(extra, fmt.Sprintf("localhost:%d", base+2*n+i))
	}
	return nodes, extra
}

func advertiseArgs(nd *proccluster.Node) []string {
	return []string{"--raft-advertise-addr", nd.RaftAddr, "--grpc-advertise-addr", nd.GRPCAddr}
}

// awaitMembers waits until nd lists every node of nodes as a member with
// its gRPC address registered, then fails unless each has the advertised
// addresses (registration writes both in one call, Raft's first: once the
// gRPC address is there the Raft one is final).
func awaitMembers(t *testing.T, nd *proccluster.Node, nodes []*proccluster.Node, timeout time.Duration) []*coordv1.Member {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := coordv1.NewClusterClient(nd.Conn).Members(ctx, &coordv1.MembersRequest{})
		cancel()
		registered := 0
		for _, m := range resp.GetMembers() {
			if m.GetGrpcAddress() != "" {
				registered++
			}
		}
		if err == nil && registered == len(nodes) && len(resp.GetMembers()) == len(nodes) {
			byID := map[string]*coordv1.Member{}
			for _, m := range resp.GetMembers() {
				byID[m.GetId()] = m
			}
			settled := true
			for _, want := range nodes {
				m := byID[want.ID]
				if m == nil || m.GetRaftAddress() != want.RaftAddr || m.GetGrpcAddress() != want.GRPCAddr {
					settled = false
				}
			}
			if settled {
				return resp.GetMembers()
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s lists members %v, want every node at its advertised Raft and gRPC address", nd.ID, resp.GetMembers())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: members not registered in %s: %v %v", nd.ID, timeout, resp.GetMembers(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantMembersListed checks coordctl members names every node at its
// advertised addresses.
func wantMembersListed(t *testing.T, c ctl, nodes []*proccluster.Node) {
	t.Helper()
	out := c.ok("members")
	for _, nd := range nodes {
		found := false
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == nd.ID && strings.Contains(line, nd.RaftAddr) && strings.Contains(line, nd.GRPCAddr) {
				found = true
			}
		}
		if !found {
			t.Fatalf("coordctl members does not list %s at %s / %s:\n%s", nd.ID, nd.RaftAddr, nd.GRPCAddr, out)
		}
	}
	if strings.Contains(out, "127.0.0.1") {
		t.Fatalf("coordctl members lists a bound IP:\n%s", out)
	}
}

// A cluster bootstrapped with --peers by name keeps the names: every
// node advertises localhost:port (it binds 127.0.0.1:port), and after
// every node registered, the configuration and the member table hold the
// names, not the bound IPs (before --raft-advertise-addr, a follower's
// registration replaced its name with 127.0.0.1:port). Then a node
// restarted with a new advertise address (a new port, as a pod that comes
// back under a new name would) is re-admitted: it asks the members it
// knows to update its own entry, the leader dials it at the new address,
// and it follows again (before, it stayed a candidate for good).
func TestProcessAdvertisedNames(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	nodes, spare := advertisedNodes(t, 3, 1)
	pc := proccluster.StartNodes(t, coorddBin, nodes)
	leader := pc.WaitLeader()
	awaitMembers(t, leader, nodes, 30*time.Second)
	c := ctl{t: t, endpoints: strings.Join(pc.Endpoints(), ",")}
	wantMembersListed(t, c, nodes)

	moved := moveFollower(t, pc, leader, nodes, spare[0])
	// It serves: a write through it is forwarded to the leader and
	// replicated back to it.
	acquire(t, coordv1.NewCoordinatorClient(moved.Conn), "advertise/moved", "o", 10*time.Second)
	pc.WaitConverged()
	wantMembersListed(t, c, nodes)
}

// moveFollower stops a follower and restarts it with a new Raft
// advertise (and bound) address, then waits until it follows the leader
// again, caught up, with every node listed at its advertised addresses.
func moveFollower(t *testing.T, pc *proccluster.TestCluster, leader *proccluster.Node, nodes []*proccluster.Node, to string) *proccluster.Node {
	t.Helper()
	// A follower comes back with a new Raft advertise address.
	var moved *proccluster.Node
	for _, nd := range nodes {
		if nd != leader {
			moved = nd
			break
		}
	}
	pc.Stop(moved)
	old := moved.RaftAddr
	moved.RaftAddr = to
	// advertisedNodes put the advertise flags first; the rest (TLS) stays.
	moved.ExtraArgs = append(advertiseArgs(moved), moved.ExtraArgs[len(advertiseArgs(moved)):]...)
	pc.Restart(moved)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := pc.Status(moved, time.Second)
		if err == nil && st.GetState() == "Follower" && st.GetLeaderId() == leader.ID && st.GetRaftAddress() == moved.RaftAddr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s restarted at %s (was %s) does not follow %s: %v %v\n%s log:\n%s\n%s log:\n%s", moved.ID, moved.RaftAddr, old, leader.ID, st, err,
				moved.ID, logTail(t, moved.LogPath), leader.ID, logTail(t, leader.LogPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
	awaitMembers(t, leader, nodes, 30*time.Second)
	pc.WaitCaughtUp(moved, 30*time.Second)
	awaitMembers(t, moved, nodes, 30*time.Second)
	return moved
}

// logTail is the end of a node's log, for a failure message.
func logTail(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "pre-vote") && !strings.Contains(line, "failed to heartbeat") && !strings.Contains(line, "failed to appendEntries") &&
			!strings.Contains(line, "lection timeout") && !strings.Contains(line, "candidate state") {
			keep = append(keep, line)
		}
	}
	if len(keep) > 60 {
		keep = keep[len(keep)-60:]
	}
	return strings.Join(keep, "\n")
}

// dnsOnlyCerts issues node certificates whose only name is the DNS name
// localhost (no IP SAN: 127.0.0.1 is not covered) and returns their files.
func dnsOnlyCerts(t *testing.T, ids ...string) map[string]tlsutil.Files {
	ca, err := devca.New("advertise-test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	out := map[string]tlsutil.Files{}
	for _, id := range ids {
		leaf, err := ca.IssueNodeOnly(id, []string{"localhost"})
		if err != nil {
			t.Fatal(err)
		}
		f := tlsutil.Files{Cert: filepath.Join(dir, id+".pem"), Key: filepath.Join(dir, id+"-key.pem"), CA: filepath.Join(dir, devca.CACert)}
		if err := os.WriteFile(f.Cert, leaf.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.Key, leaf.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		out[id] = f
	}
	return out
}

// With TLS, peers and forwarding dial the advertised names and verify
// certificates against them: certificates for the DNS name localhost only
// (as a pod's certificate names its stable DNS name, not its IP) form a
// cluster, keep it, and a follower forwards calls to the leader. Had any
// node dialled 127.0.0.1, its handshake would fail on the certificate.
func TestProcessTLSAdvertisedNames(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	nodes, spare := advertisedNodes(t, 3, 1)
	certs := dnsOnlyCerts(t, "n1", "n2", "n3")
	for _, nd := range nodes {
		f := certs[nd.ID]
		nd.TLS = f
		nd.ExtraArgs = append(nd.ExtraArgs, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)
	}
	pc := proccluster.StartNodes(t, coorddBin, nodes)
	leader := pc.WaitLeader()
	awaitMembers(t, leader, nodes, 30*time.Second)
	for _, nd := range nodes {
		if nd == leader {
			continue
		}
		var header metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		resp, err := coordv1.NewCoordinatorClient(nd.Conn).Acquire(ctx, &coordv1.AcquireRequest{
			Name: "advertise/tls-" + nd.ID, Owner: "o", Ttl: pbtime.Dur(10_000)}, grpc.Header(&header))
		cancel()
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("acquire through follower %s: %v %v", nd.ID, resp, err)
		}
		if got := header.Get(api.LeaderAddressHeader); len(got) != 1 || got[0] != leader.GRPCAddr {
			t.Fatalf("follower %s forwarded with leader address %v, want the leader's advertised %s", nd.ID, got, leader.GRPCAddr)
		}
	}
	pc.WaitConverged()
	// A follower back on a new address is re-admitted over TLS too: the
	// leader dials the new name and checks the node id there.
	moved := moveFollower(t, pc, leader, nodes, spare[0])
	acquire(t, coordv1.NewCoordinatorClient(moved.Conn), "advertise/tls-moved", "o", 10*time.Second)
	pc.WaitConverged()
	f := certs[leader.ID]
	wantMembersListed(t, ctl{t: t, endpoints: strings.Join(pc.Endpoints(), ","),
		extra: []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}}, nodes)
}

// A node whose --peers entry is not the address it advertises replaces
// its entry with the advertised one once it registers, the leader its own
// too: bootstrapped with --peers n1=127.0.0.1:P1,… (the bound addresses)
// and advertising localhost:P, the configuration ends with the names.
func TestProcessAdvertisedNamesReplacePeers(t *testing.T) {
	nodes, _ := advertisedNodes(t, 3, 0)
	for _, nd := range nodes {
		nd.RaftAddr = strings.Replace(nd.RaftAddr, "localhost:", "127.0.0.1:", 1)
		nd.ExtraArgs = []string{"--raft-advertise-addr", strings.Replace(nd.RaftAddr, "127.0.0.1:", "localhost:", 1),
			"--grpc-advertise-addr", nd.GRPCAddr}
	}
	pc := proccluster.StartNodes(t, coorddBin, nodes) // --peers with the IPs
	leader := pc.WaitLeader()
	for _, nd := range nodes {
		nd.RaftAddr = strings.Replace(nd.RaftAddr, "127.0.0.1:", "localhost:", 1)
	}
	awaitMembers(t, leader, nodes, 30*time.Second)
	acquire(t, coordv1.NewCoordinatorClient(leader.Conn), "advertise/replaced", "o", 10*time.Second)
	pc.WaitConverged()
}
