package integration

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/proccluster"
	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// raftDialer is a raft.StreamLayer that dials over TLS with a given
// certificate: hashicorp/raft's own transport, as an attacker holding a
// certificate of the cluster's CA would use it. Its listener only
// satisfies the interface (nothing calls this side).
type raftDialer struct {
	net.Listener
	cfg *tls.Config
}

func (d *raftDialer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(address), d.cfg)
}

func raftTransportAs(t *testing.T, f tlsutil.Files) *raft.NetworkTransport {
	t.Helper()
	cfg, err := tlsutil.ClientConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(&raftDialer{Listener: lis, cfg: cfg}, 1, 5*time.Second, io.Discard)
	t.Cleanup(func() { trans.Close() })
	return trans
}

// Issue 32, item 1: a certificate the CA signed is not enough to speak
// Raft. With TLS on and no separate peer CA (the default), a client
// certificate of the same CA, and a node certificate of a server that is
// not in the configuration, are refused at the handshake: AppendEntries
// with a higher term and an entry, TimeoutNow and RequestVote all fail, and
// no node changes its term or its leader. Once an admin adds the node to
// the configuration, its certificate is accepted; once removed, refused.
func TestRaftRefusesCertificatesOfNonMembers(t *testing.T) {
	certs := testcluster.NewCerts(t)
	pc := proccluster.StartTLS(t, coorddBin, 3, func(id string) tlsutil.Files { return certs.Files(id, true) })
	leader := pc.WaitLeader()
	pc.WaitConverged() // every node answers and follows
	var target *proccluster.Node
	for _, nd := range pc.Nodes {
		if nd != leader {
			target = nd
			break
		}
	}
	statuses := func() map[string]*coordv1.StatusResponse {
		out := map[string]*coordv1.StatusResponse{}
		for _, nd := range pc.Nodes {
			st, err := pc.Status(nd, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			out[nd.ID] = st
		}
		return out
	}
	before := statuses()
	term := before[target.ID].GetTerm()
	for _, attacker := range []struct {
		name  string
		files tlsutil.Files
	}{
		{"client certificate billing-svc", certs.Files("billing-svc", false)},
		{"node certificate of node9 (not in the configuration)", certs.Files("node9", true)},
	} {
		t.Run(attacker.name, func(t *testing.T) {
			trans := raftTransportAs(t, attacker.files)
			id, addr := raft.ServerID(target.ID), raft.ServerAddress(target.RaftAddr)
			hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leader.ID), Addr: []byte(leader.RaftAddr)}
			st := before[target.ID]
			var ae raft.AppendEntriesResponse
			err := trans.AppendEntries(id, addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term + 50,
				PrevLogEntry: st.GetCommitIndex(), PrevLogTerm: term, LeaderCommitIndex: st.GetCommitIndex() + 1,
				Entries: []*raft.Log{{Index: st.GetCommitIndex() + 1, Term: term + 50, Type: raft.LogCommand, Data: []byte("garbage")}}}, &ae)
			// TLS 1.3: the server judges the client's certificate after the
			// client's side of the handshake, so the refusal is the alert
			// the first read meets.
			if err == nil || ae.Success || !strings.Contains(err.Error(), "tls: bad certificate") {
				t.Fatalf("AppendEntries not refused at the handshake: %v %+v", err, ae)
			}
			var tn raft.TimeoutNowResponse
			if err := trans.TimeoutNow(id, addr, &raft.TimeoutNowRequest{RPCHeader: hdr}, &tn); err == nil {
				t.Fatalf("TimeoutNow accepted: %+v", tn)
			}
			var rv raft.RequestVoteResponse
			if err := trans.RequestVote(id, addr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term + 60,
				LastLogIndex: st.GetCommitIndex() + 1000, LastLogTerm: term + 50}, &rv); err == nil || rv.Granted {
				t.Fatalf("RequestVote accepted: %v %+v", err, rv)
			}
		})
	}
	// No term and no leader changed anywhere; the cluster still commits.
	after := statuses()
	for id, st := range after {
		if st.GetTerm() != before[id].GetTerm() || st.GetLeaderId() != leader.ID {
			t.Errorf("%s: term %d → %d, leader %s → %s", id, before[id].GetTerm(), st.GetTerm(), leader.ID, st.GetLeaderId())
		}
	}
	if _, err := pc.AcquireAnywhere("after/raft-attack", 10*time.Second); err != nil {
		t.Fatalf("the cluster does not commit after the attempts: %v", err)
	}

	// The join order: once an admin's AddVoter put node9 in the
	// configuration, node9's certificate is accepted (a stale AppendEntries
	// is answered, not refused); once it is removed, refused again.
	cluster := coordv1.NewClusterClient(leader.Conn)
	ctx := ctxT(t)
	if _, err := cluster.AddVoter(ctx, &coordv1.AddVoterRequest{Id: "node9", RaftAddress: deadRaftAddr(t)}); err != nil {
		t.Fatal(err)
	}
	inConfig := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ms, err := coordv1.NewClusterClient(target.Conn).Members(ctx, &coordv1.MembersRequest{})
			found := false
			for _, m := range ms.GetMembers() {
				found = found || m.GetId() == "node9"
			}
			if err == nil && found == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("node9 in %s's configuration: %v, want %v (%v)", target.ID, found, want, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	inConfig(true)
	trans := raftTransportAs(t, certs.Files("node9", true))
	stale := func() error {
		var resp raft.AppendEntriesResponse
		err := trans.AppendEntries(raft.ServerID(target.ID), raft.ServerAddress(target.RaftAddr), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("node9")}, Term: term - 1}, &resp)
		if err == nil && (resp.Success || resp.Term != term) {
			t.Fatalf("a stale AppendEntries: %+v", resp)
		}
		return err
	}
	if err := stale(); err != nil {
		t.Fatalf("node9's certificate refused once node9 is in the configuration: %v", err)
	}
	if _, err := cluster.RemoveServer(ctx, &coordv1.RemoveServerRequest{Id: "node9"}); err != nil {
		t.Fatal(err)
	}
	inConfig(false)
	trans.CloseStreams() // the check is per connection
	if err := stale(); err == nil || !strings.Contains(err.Error(), "tls: bad certificate") {
		t.Fatalf("node9's certificate after its removal: %v", err)
	}
	if st, err := pc.Status(target, 5*time.Second); err != nil || st.GetTerm() != term {
		t.Fatalf("term after the join and removal: %v %v", st.GetTerm(), err)
	}
}

// memberNameACL grants admin to the joining nodes only (node1 bootstraps):
// a client certificate named node1 gets nothing from the ACL.
const memberNameACL = `
rules:
  - name: joining-nodes
    identities: [node2, node3]
    node_certificates: true
    ops: [admin]
  - name: reports
    identities: [reports-svc]
    ops: [lease, read]
`

// clientNamed is a client TLS configuration presenting a client
// certificate (no node profile) whose identity is name.
func clientNamed(t *testing.T, certs *testcluster.Certs, name string) *tls.Config {
	t.Helper()
	leaf, err := certs.CA.Issue(name, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := certs.Client("")
	cfg.Certificates = []tls.Certificate{pair}
	return cfg
}

// Issue 32, item 3: a client certificate named after a node is an
// ordinary identity. It may not speak for another identity (a Release of
// reports-svc's lease with coordd-identity: reports-svc, even claiming to
// be a member), and member-only calls (Snapshot) go through the ACL.
func TestClientCertificateNamedLikeAMemberIsNoMember(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, memberNameACL)
	leader := c.WaitLeader()
	ctx := ctxT(t)
	got, err := coordAs(t, certs, leader, "reports-svc").Acquire(ctx, &coordv1.AcquireRequest{Name: "reports/daily", Owner: "r1", Ttl: pbtime.Dur(30000)})
	if err != nil || !got.GetAcquired() {
		t.Fatalf("acquire by reports-svc: %v %v", got, err)
	}
	impostor := connAs(t, clientNamed(t, certs, "node1"), leader.API.GRPCAddr())
	for _, md := range [][]string{
		{"coordd-identity", "reports-svc"},
		{"coordd-forwarded", "node1", "coordd-identity", "reports-svc", "coordd-identity-member", "1"},
	} {
		_, err = coordv1.NewCoordinatorClient(impostor).Release(withMD(ctx, md...),
			&coordv1.ReleaseRequest{Name: "reports/daily", Owner: "r1", Generation: got.GetLease().GetGeneration()})
		wantErr(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	}
	l, err := coordAs(t, certs, leader, "reports-svc").GetLease(ctx, &coordv1.GetLeaseRequest{Name: "reports/daily"})
	if err != nil || l.GetLease().GetOwner() != "r1" || l.GetLease().GetIdentity() != "reports-svc" {
		t.Fatalf("reports-svc's lease after the impostor: %v %v", l, err)
	}
	_, err = coordv1.NewClusterClient(impostor).Snapshot(ctx, &coordv1.SnapshotRequest{})
	if meta := wantErr(t, err, codes.PermissionDenied, "PERMISSION_DENIED"); meta["rule"] != auth.DefaultDenyRule {
		t.Fatalf("snapshot by a client named node1: %v", meta)
	}
	// The node's own certificate is the member: its Snapshot needs no rule.
	if _, err := coordv1.NewClusterClient(c.Conn(leader)).Snapshot(ctx, &coordv1.SnapshotRequest{}); err != nil {
		t.Fatalf("snapshot by node certificate: %v", err)
	}
}

// The gap left by item 3: the ACL's rule for joining nodes (identities
// [node*], node_certificates: true) gives admin to a node certificate of a
// server not yet in the configuration, on the node it reaches and through
// a follower, and never to a client certificate named node4.
func TestNodeRuleNeedsANodeCertificate(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, securityACL)
	leader := c.WaitLeader()
	follower := c.Followers()[0]
	ctx := ctxT(t)
	joiner, err := tlsutil.ClientConfig(certs.Files("node4", true))
	if err != nil {
		t.Fatal(err)
	}
	impostor := clientNamed(t, certs, "node4")
	for _, n := range []*testcluster.Node{leader, follower} {
		// RemoveServer of a server that is not there: admin, forwarded
		// from the follower, and no change to the configuration.
		_, err := coordv1.NewClusterClient(connAs(t, impostor, n.API.GRPCAddr())).RemoveServer(ctx, &coordv1.RemoveServerRequest{Id: "node9"})
		if meta := wantErr(t, err, codes.PermissionDenied, "PERMISSION_DENIED"); meta["rule"] != auth.DefaultDenyRule {
			t.Fatalf("client certificate named node4 via %s: %v", n.ID, meta)
		}
		_, err = coordv1.NewClusterClient(connAs(t, joiner, n.API.GRPCAddr())).RemoveServer(ctx, &coordv1.RemoveServerRequest{Id: "node9"})
		if codeOf(err) == codes.PermissionDenied {
			t.Fatalf("node certificate of node4 via %s: %v", n.ID, err)
		}
	}
	if _, err := coordv1.NewClusterClient(connAs(t, impostor, leader.API.GRPCAddr())).Snapshot(ctx, &coordv1.SnapshotRequest{}); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("snapshot by a client certificate named node4: %v", err)
	}
}

// coordd refuses to start with a certificate no peer would accept as its
// own: a client certificate, or another node's, as --tls-cert, and a
// client certificate as --tls-cert next to a proper --peer-tls-cert (the
// API forwards and probes clocks with --tls-cert).
func TestCoorddRefusesACertificateThatIsNotItsNodeCertificate(t *testing.T) {
	certs := testcluster.NewCerts(t)
	client, other, own := certs.Files("billing-svc", false), certs.Files("node2", true), certs.Files("node1", true)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"client certificate", []string{"--tls-cert", client.Cert, "--tls-key", client.Key, "--tls-ca", client.CA},
			`the peer TLS certificate (--peer-tls-cert, default --tls-cert) is not node "node1"'s node certificate`},
		{"another node's certificate", []string{"--tls-cert", other.Cert, "--tls-key", other.Key, "--tls-ca", other.CA},
			`is not node "node1"'s node certificate (its identity is "node2"`},
		{"client certificate for the API", []string{"--tls-cert", client.Cert, "--tls-key", client.Key, "--tls-ca", client.CA,
			"--peer-tls-cert", own.Cert, "--peer-tls-key", own.Key, "--peer-tls-ca", own.CA},
			`the TLS certificate (--tls-cert) is not node "node1"'s node certificate`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a coordd that starts is killed
			defer cancel()
			cmd := exec.CommandContext(ctx, coorddBin, append([]string{"--id", "node1", "--data-dir", t.TempDir(), "--grpc-addr", "127.0.0.1:0",
				"--http-addr", "", "--raft-addr", "127.0.0.1:0"}, tc.args...)...)
			cmd.Env = cleanEnv()
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "coordctl certs issue node1 --node") {
				t.Fatalf("want a refusal with %q, got %v:\n%s", tc.want, err, out)
			}
		})
	}
}
