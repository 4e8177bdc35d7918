package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/node"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

const securityACL = `
rules:
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
  - name: billing
    identities: [billing-*]
    ops: [lease, window, read]
    prefixes: [billing/]
  - name: ledger-api
    identities: [ledger-api]
    ops: [fence]
    prefixes: [ledger/]
  - name: operators
    identities: [ops]
    ops: [admin, read]
`

// secureCluster starts n nodes with mutual TLS and, when acl is not empty,
// that ACL file.
func secureCluster(t *testing.T, n int, acl string, opts ...testcluster.Option) (*testcluster.Cluster, *testcluster.Certs, string) {
	t.Helper()
	certs := testcluster.NewCerts(t)
	aclPath := ""
	if acl != "" {
		aclPath = filepath.Join(t.TempDir(), "acl.yaml")
		if err := os.WriteFile(aclPath, []byte(acl), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts = append([]testcluster.Option{certs.Option(), testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.ACLFile = aclPath })}, opts...)
	return testcluster.New(t, n, opts...), certs, aclPath
}

// coordAs is a raw Coordinator client of node n presenting identity's
// certificate.
func coordAs(t *testing.T, certs *testcluster.Certs, n *testcluster.Node, identity string) coordv1.CoordinatorClient {
	t.Helper()
	return coordv1.NewCoordinatorClient(connAs(t, certs.Client(identity), n.API.GRPCAddr()))
}

func connAs(t *testing.T, cfg *tls.Config, addr string) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func sdkAs(t *testing.T, c *testcluster.Cluster, certs *testcluster.Certs, identity string, opts ...client.Option) *client.Client {
	t.Helper()
	return newClient(t, c, identity+"-owner", append([]client.Option{client.WithTLS(certs.Client(identity))}, opts...)...)
}

func TestTLSRefusesClientsWithoutAValidCertificate(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, "")
	c.WaitLeader()

	// A client with a certificate from the CA works, through any node: the
	// SDK's leases are kept alive over TLS.
	cl := sdkAs(t, c, certs, "billing-worker")
	l, err := cl.Acquire(ctxT(t), "billing/close", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Only the CA, no certificate.
	noCert := newClient(t, c, "x", client.WithTLS(certs.Client("")))
	if _, err := noCert.Acquire(ctx, "billing/other", 2*time.Second); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("client without a certificate: want ErrUnauthenticated, got %v", err)
	}
	// A certificate from another CA.
	other := testcluster.NewCerts(t)
	otherCfg := other.Client("billing-worker")
	otherCfg.RootCAs = certs.Client("").RootCAs // it trusts our nodes, but they do not trust it
	stranger := newClient(t, c, "y", client.WithTLS(otherCfg))
	if _, err := stranger.Acquire(ctx, "billing/other", 2*time.Second); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("client with another CA's certificate: want ErrUnauthenticated, got %v", err)
	}
	// Plaintext.
	plain := coordv1.NewCoordinatorClient(connAs(t, nil, c.Nodes[0].API.GRPCAddr()))
	if _, err := plain.GetLease(ctx, &coordv1.GetLeaseRequest{Name: "billing/close"}); codeOf(err) != codes.Unavailable {
		t.Fatalf("plaintext client: want Unavailable (handshake refused), got %v", err)
	}
	// Without an ACL file every authenticated identity is allowed; the
	// lease is bound to its identity, visible to readers.
	got, err := cl.GetLease(ctxT(t), "billing/close")
	if err != nil || got.GetIdentity() != "billing-worker" {
		t.Fatalf("lease identity: %v %v", got, err)
	}
}

func codeOf(err error) codes.Code {
	code, _, _ := errInfo(err)
	return code
}

func TestACLAllowsAndDeniesEachFamily(t *testing.T) {
	c, certs, aclPath := secureCluster(t, 3, securityACL)
	leader := c.WaitLeader()
	follower := c.Followers()[0]
	billing := coordAs(t, certs, follower, "billing-worker") // through a follower: forwarded
	ledger := coordAs(t, certs, leader, "ledger-api")
	ops := coordAs(t, certs, leader, "ops")
	ctx := ctxT(t)

	denied := func(what string, err error, rule string) {
		t.Helper()
		meta := wantErr(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
		if meta["rule"] != rule {
			t.Fatalf("%s: denied by rule %q, want %q (%v)", what, meta["rule"], rule, err)
		}
	}

	// lease
	l := acquire(t, billing, "billing/close", "w1", 2*time.Second)
	if l.GetIdentity() != "billing-worker" {
		t.Fatalf("forwarded acquire bound to %q, want the original caller", l.GetIdentity())
	}
	_, err := billing.Acquire(ctx, &coordv1.AcquireRequest{Name: "hr/close", Owner: "w1", Ttl: pbtime.Dur(2000)})
	denied("acquire outside prefix", err, auth.DefaultDenyRule)
	_, err = ledger.Acquire(ctx, &coordv1.AcquireRequest{Name: "billing/close", Owner: "w1", Ttl: pbtime.Dur(2000)})
	denied("acquire by ledger-api", err, auth.DefaultDenyRule)

	// window
	if _, err := billing.ClaimWindow(ctx, &coordv1.ClaimWindowRequest{Job: "billing/close", Window: "2026-09-25",
		LeaseName: "billing/close", Owner: "w1", Generation: l.GetGeneration()}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	_, err = ops.ClaimWindow(ctx, &coordv1.ClaimWindowRequest{Job: "billing/close", Window: "2026-09-25",
		LeaseName: "billing/close", Owner: "w1", Generation: l.GetGeneration()})
	denied("claim by ops", err, auth.DefaultDenyRule)

	// fence
	_, err = billing.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "ledger/store-42", LeaseName: "billing/close", Generation: l.GetGeneration()})
	denied("fence by billing", err, auth.DefaultDenyRule)
	if _, err := ledger.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "ledger/store-42", LeaseName: "billing/close",
		Generation: l.GetGeneration()}); err != nil {
		t.Fatalf("fence by ledger-api: %v", err)
	}
	_, err = ledger.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "hr/x", Token: "billing/close:1", DryRun: true})
	denied("dry-run commit outside prefix", err, auth.DefaultDenyRule)

	// read
	if _, err := billing.ListLeases(ctx, &coordv1.ListLeasesRequest{Prefix: "billing/"}); err != nil {
		t.Fatalf("list own prefix: %v", err)
	}
	_, err = billing.ListLeases(ctx, &coordv1.ListLeasesRequest{})
	denied("list everything", err, auth.DefaultDenyRule)
	if _, err := ops.ListLeases(ctx, &coordv1.ListLeasesRequest{}); err != nil {
		t.Fatalf("ops lists: %v", err)
	}

	// admin
	billingCluster := coordv1.NewClusterClient(connAs(t, certs.Client("billing-worker"), leader.API.GRPCAddr()))
	_, err = billingCluster.Snapshot(ctx, &coordv1.SnapshotRequest{})
	denied("snapshot by billing", err, auth.DefaultDenyRule)
	opsCluster := coordv1.NewClusterClient(connAs(t, certs.Client("ops"), leader.API.GRPCAddr()))
	if _, err := opsCluster.Snapshot(ctx, &coordv1.SnapshotRequest{}); err != nil {
		t.Fatalf("snapshot by ops: %v", err)
	}
	// Cluster status is open to any authenticated identity.
	if _, err := billingCluster.Status(ctx, &coordv1.StatusRequest{}); err != nil {
		t.Fatalf("status: %v", err)
	}

	// A client cannot claim to be someone else: only members may forward.
	_, err = billing.Acquire(withMD(ctx, "coordd-identity", "ops"), &coordv1.AcquireRequest{Name: "billing/x", Owner: "w1", Ttl: pbtime.Dur(2000)})
	wantErr(t, err, codes.PermissionDenied, "PERMISSION_DENIED")

	// Denials are counted by rule.
	if v := metricValue(t, leader, `coordd_auth_denied_total{op="lease",rule="default-deny"}`); v < 1 {
		t.Fatalf("denials not counted: %v", v)
	}

	// Reload: a new rule lets billing lists everything.
	if err := os.WriteFile(aclPath, []byte(securityACL+`
  - name: billing-reads-all
    identities: [billing-*]
    ops: [read]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Running() {
		if err := n.API.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := billing.ListLeases(ctx, &coordv1.ListLeasesRequest{}); err != nil {
		t.Fatalf("list after reload: %v", err)
	}
	// A broken file keeps the previous ACL.
	if err := os.WriteFile(aclPath, []byte("rules: [{name: x, ops: [fly]}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := leader.API.Reload(); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("reload of a broken ACL: %v", err)
	}
	if _, err := coordAs(t, certs, leader, "billing-worker").ListLeases(ctx, &coordv1.ListLeasesRequest{}); err != nil {
		t.Fatalf("previous ACL lost after a failed reload: %v", err)
	}
}

func TestLeaseBoundToItsIdentity(t *testing.T) {
	c, certs, _ := secureCluster(t, 1, "")
	n := c.WaitLeader()
	a := coordAs(t, certs, n, "billing-a")
	b := coordAs(t, certs, n, "billing-b")
	ctx := ctxT(t)
	l := acquire(t, a, "billing/close", "shared-owner", 3*time.Second)
	// b knows the owner string and the generation, and still cannot act.
	_, err := b.Renew(ctx, &coordv1.RenewRequest{Name: "billing/close", Owner: "shared-owner", Generation: l.GetGeneration()})
	wantErr(t, err, codes.PermissionDenied, "IDENTITY_MISMATCH")
	_, err = b.Release(ctx, &coordv1.ReleaseRequest{Name: "billing/close", Owner: "shared-owner", Generation: l.GetGeneration()})
	wantErr(t, err, codes.PermissionDenied, "IDENTITY_MISMATCH")
	_, err = b.ClaimWindow(ctx, &coordv1.ClaimWindowRequest{Job: "j", Window: "w", LeaseName: "billing/close", Owner: "shared-owner", Generation: l.GetGeneration()})
	wantErr(t, err, codes.PermissionDenied, "IDENTITY_MISMATCH")
	// Over a KeepAlive stream too: the renewal is refused, the lease stays a's.
	ks, err := b.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Send(&coordv1.KeepAliveRequest{Name: "billing/close", Owner: "shared-owner", Generation: l.GetGeneration(), Seq: 1}); err != nil {
		t.Fatal(err)
	}
	resp, err := ks.Recv()
	if err != nil || resp.GetOk() || resp.GetReason() != "IDENTITY_MISMATCH" {
		t.Fatalf("keepalive by another identity: %v %v", resp, err)
	}
	// a can.
	if _, err := a.Release(ctx, &coordv1.ReleaseRequest{Name: "billing/close", Owner: "shared-owner", Generation: l.GetGeneration()}); err != nil {
		t.Fatal(err)
	}
}

func TestPerIdentityLimits(t *testing.T) {
	c, certs, _ := secureCluster(t, 1, "", testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.Limits = auth.Limits{LeasesPerIdentity: 2, RequestsPerSecond: 0.5, Burst: 6, KeepAliveStreams: 1, WaitingAcquires: 1}
	}))
	n := c.WaitLeader()
	a := coordAs(t, certs, n, "tenant-a")
	b := coordAs(t, certs, n, "tenant-b")
	ctx := ctxT(t)

	// Live leases: the third is refused (calls 1-3 of a's burst of 6).
	acquire(t, a, "a/1", "o", 5*time.Second)
	acquire(t, a, "a/2", "o", 5*time.Second)
	_, err := a.Acquire(ctx, &coordv1.AcquireRequest{Name: "a/3", Owner: "o", Ttl: pbtime.Dur(5000)})
	wantErr(t, err, codes.ResourceExhausted, "LEASE_LIMIT")

	// KeepAlive streams: one per identity (call 4 opens it).
	s1, err := a.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Send(&coordv1.KeepAliveRequest{Name: "a/1", Owner: "o", Generation: 1, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if r, err := s1.Recv(); err != nil || !r.GetOk() {
		t.Fatalf("first stream: %v %v", r, err)
	}
	s2, err := a.KeepAlive(ctx) // call 5
	if err == nil {
		_, err = s2.Recv()
	}
	wantErr(t, err, codes.ResourceExhausted, "STREAM_LIMIT")

	// Rate: the burst is spent after 6 calls; the 7th is refused at once,
	// not queued, and b is not affected.
	_, _ = a.GetLease(ctx, &coordv1.GetLeaseRequest{Name: "a/1"}) // call 6
	start := time.Now()
	_, err = a.GetLease(ctx, &coordv1.GetLeaseRequest{Name: "a/1"})
	wantErr(t, err, codes.ResourceExhausted, "RATE_LIMITED")
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("a rate-limited call waited %s instead of failing fast", waited)
	}
	if _, err := b.GetLease(ctx, &coordv1.GetLeaseRequest{Name: "a/1"}); err != nil {
		t.Fatalf("another identity is rate-limited too: %v", err)
	}

	// Waiting acquires: one queued call per identity.
	d := coordAs(t, certs, n, "tenant-d")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := d.Acquire(wctx, &coordv1.AcquireRequest{Name: "a/1", Owner: "d", Ttl: pbtime.Dur(5000), Wait: true})
		first <- err
	}()
	c.Eventually("d waits", 5*time.Second, func() bool { return metricValue(t, n, "coordd_acquire_waiters") == 1 })
	_, err = d.Acquire(ctx, &coordv1.AcquireRequest{Name: "a/2", Owner: "d", Ttl: pbtime.Dur(5000), Wait: true})
	wantErr(t, err, codes.ResourceExhausted, "WAIT_LIMIT")
	cancel()
	if err := <-first; codeOf(err) != codes.Canceled {
		t.Fatalf("cancelled wait: %v", err)
	}
}

func TestPlaintextRefusedOffLoopback(t *testing.T) {
	// The API refuses a plaintext gRPC listener off loopback before it
	// touches the node; the node refuses a plaintext Raft listener.
	_, err := api.Serve(api.Config{GRPCAddr: "0.0.0.0:0"}, nil)
	if err == nil || !strings.Contains(err.Error(), "without TLS") || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("want a refusal naming TLS and --insecure, got %v", err)
	}
	_, err = node.New(node.Config{ID: "n", DataDir: t.TempDir(), RaftAddr: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "without TLS") || !strings.Contains(err.Error(), "(Raft)") {
		t.Fatalf("want a refusal of plaintext Raft, got %v", err)
	}
}

// A waiting Acquire from another identity that sends the holder's owner and
// request id is not the holder's retry: it waits like any caller, with no
// log entries while the lease is held and one per hand-over. (The waiter
// used to skip the identity check and propose in a loop: 266 entries in
// 1 s.)
func TestForeignWaiterWithTheHoldersRequestID(t *testing.T) {
	c, certs, _ := secureCluster(t, 1, "", testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.Node.TickInterval = time.Hour }))
	n := c.WaitLeader()
	a := coordAs(t, certs, n, "tenant-a")
	b := coordAs(t, certs, n, "tenant-b")
	ctx := ctxT(t)
	held := grant(t, ctx, a, &coordv1.AcquireRequest{Name: "shared", Owner: "o", Ttl: pbtime.Dur(10_000), RequestId: "r1"})
	waited := make(chan *coordv1.AcquireResponse, 1)
	go func() {
		r, err := b.Acquire(ctx, &coordv1.AcquireRequest{Name: "shared", Owner: "o", Ttl: pbtime.Dur(10_000), RequestId: "r1", Wait: true})
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	c.Eventually("b waits", 5*time.Second, func() bool { return metricValue(t, n, "coordd_acquire_waiters") == 1 })
	before := n.Node.Raft().LastIndex()
	time.Sleep(time.Second) // the window the old waiter filled with proposals
	if got := n.Node.Raft().LastIndex() - before; got != 0 {
		t.Fatalf("%d log entries in 1 s while the lease was held", got)
	}
	if _, err := a.Release(ctx, &coordv1.ReleaseRequest{Name: "shared", Owner: "o", Generation: held.GetLease().GetGeneration()}); err != nil {
		t.Fatal(err)
	}
	r := <-waited
	if !r.GetAcquired() || r.GetLease().GetIdentity() != "tenant-b" || r.GetLease().GetGeneration() != 2 {
		t.Fatalf("hand-over: %v", r)
	}
	if got := n.Node.Raft().LastIndex() - before; got != 1 {
		t.Fatalf("%d log entries for one hand-over", got)
	}
}
