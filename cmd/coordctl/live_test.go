package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// These tests run coordctl in-process against in-process clusters
// (internal/testcluster): real nodes, real gRPC, real Raft on loopback.

// syncBuf is an output the test reads while coordctl writes it.
type syncBuf struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newSyncBuf() *syncBuf { return &syncBuf{changed: make(chan struct{}, 1)} }

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.b.Write(p)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return n, err
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until cond holds for what was written so far.
func (s *syncBuf) waitFor(t *testing.T, what string, timeout time.Duration, cond func(string) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond(s.String()) {
		select {
		case <-s.changed:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s; output so far:\n%s", timeout, what, s.String())
		}
	}
}

type ctlResult struct {
	out, errOut string
	code        int
}

// ctl runs coordctl against endpoints and waits for it.
func ctl(t *testing.T, endpoints []string, args ...string) ctlResult {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"--endpoints", strings.Join(endpoints, ",")}, args...), &out, &errOut)
	return ctlResult{out: out.String(), errOut: errOut.String(), code: code}
}

// ctlOK runs coordctl and requires exit status 0.
func ctlOK(t *testing.T, endpoints []string, args ...string) string {
	t.Helper()
	r := ctl(t, endpoints, args...)
	if r.code != exitOK {
		t.Fatalf("coordctl %v: exit %d\n%s%s", args, r.code, r.out, r.errOut)
	}
	return r.out
}

// ctlAsync starts coordctl; cancelling ctx is its SIGINT. The exit status
// arrives on the channel.
func ctlAsync(ctx context.Context, endpoints []string, args ...string) (out, errOut *syncBuf, done <-chan int) {
	out, errOut = newSyncBuf(), newSyncBuf()
	ch := make(chan int, 1)
	go func() {
		ch <- runContext(ctx, append([]string{"--endpoints", strings.Join(endpoints, ",")}, args...), out, errOut)
	}()
	return out, errOut, ch
}

func waitExit(t *testing.T, done <-chan int, timeout time.Duration) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(timeout):
		t.Fatalf("coordctl still running after %s", timeout)
		return -1
	}
}

// addr is a node's gRPC address.
func addr(c *testcluster.Cluster, n *testcluster.Node) string {
	for i, m := range c.Nodes {
		if m == n {
			return c.Endpoints()[i]
		}
	}
	panic("not a node of the cluster")
}

const electionNotice = "no leader yet (election in progress), retrying\n"

func noTLSEnv(t *testing.T) {
	for _, k := range []string{"COORD_TLS_CA", "COORD_TLS_CERT", "COORD_TLS_KEY", "COORD_ENDPOINTS"} {
		t.Setenv(k, "")
	}
}

// Three nodes: elections, refusing nodes, and keepalive across a leader
// kill.
func TestThreeNodeCluster(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 3)
	eps := c.Endpoints()
	ctlOK(t, eps, "lease", "acquire", "e1", "--owner", "alice", "--ttl", "30s")

	t.Run("election", func(t *testing.T) {
		// The leader and a follower stop: the last node cannot elect anyone
		// (no quorum) and answers NO_LEADER until a second node is back.
		leader := c.WaitLeader()
		follower := c.Followers()[0]
		c.Stop(leader)
		c.Stop(follower)
		live := c.Running()[0]
		// The stopped nodes come first: they refuse connections.
		order := []string{addr(c, leader), addr(c, follower), addr(c, live)}

		// Without an election in time: said so, not "cannot reach coordd"
		// (the live node answers NO_LEADER or, until it notices the leader
		// is gone, that it could not forward to it).
		r := ctl(t, order, "--timeout", "1500ms", "lease", "get", "e1")
		if r.code != exitError || strings.Count(r.errOut, electionNotice) != 1 ||
			!strings.Contains(r.errOut, "error: lease get e1: no leader elected within --timeout 1.5s: ") ||
			strings.Contains(r.errOut, "cannot reach coordd") {
			t.Fatalf("no quorum: exit %d\n%s", r.code, r.errOut)
		}

		// A read waits for the election (up to --timeout) and then answers.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out, errOut, done := ctlAsync(ctx, order, "--timeout", "30s", "lease", "get", "e1")
		errOut.waitFor(t, "the election notice", 20*time.Second, func(s string) bool { return strings.Contains(s, electionNotice) })
		c.Restart(follower)
		if code := waitExit(t, done, 40*time.Second); code != exitOK || !strings.Contains(out.String(), "alice") ||
			errOut.String() != electionNotice {
			t.Fatalf("read across the election: exit %d\n%s%s", code, out.String(), errOut.String())
		}

		// A call that is not idempotent (a fenced commit without a key) goes
		// past the node that refuses connections.
		c.WaitLeader()
		r = ctl(t, order, "fence", "commit", "ledger/e1", "--lease", "e1", "--generation", "1")
		if r.code != exitOK || strings.Contains(r.errOut, "cannot reach coordd") || !strings.Contains(r.out, "accepted") {
			t.Fatalf("fence commit past a refusing node: exit %d\n%s%s", r.code, r.out, r.errOut)
		}
		c.Restart(leader)
		c.WaitConverged()
	})

	t.Run("keepalive follows the leader", func(t *testing.T) {
		ctlOK(t, eps, "lease", "acquire", "ka", "--owner", "alice", "--ttl", "6s")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out, errOut, done := ctlAsync(ctx, eps, "lease", "keepalive", "ka", "--owner", "alice", "--generation", "1", "--ttl", "6s")
		renewals := func(s string) int { return strings.Count(s, "renewed ka generation 1: expires in ") }
		out.waitFor(t, "the first renewal", 20*time.Second, func(s string) bool { return renewals(s) >= 1 })
		old := c.WaitLeader()
		c.Stop(old)
		before := renewals(out.String())
		leader := c.WaitLeader()
		// Renewals go on (on the new leader: the old one is gone; one ack
		// may have been in flight when it stopped, hence two).
		out.waitFor(t, "renewals on the new leader", 30*time.Second, func(s string) bool { return renewals(s) >= before+2 })
		l, err := c.Coord(leader).GetLease(context.Background(), &coordv1.GetLeaseRequest{Name: "ka"})
		if err != nil || l.GetLease().GetOwner() != "alice" || l.GetLease().GetGeneration() != 1 ||
			l.GetLease().GetExpired() || l.GetLease().GetReleased() {
			t.Fatalf("lease after the leader change: %v %v", l, err)
		}
		cancel()
		if code := waitExit(t, done, 10*time.Second); code != exitOK ||
			!strings.Contains(errOut.String(), "stopped renewing ka (generation 1); it expires after its TTL") {
			t.Fatalf("keepalive after interrupt: exit %d\n%s", code, errOut.String())
		}
		c.Restart(old)
	})
}

// One node: what the keepalive, acquire --wait and leader transfer say.
func TestOneNodeCluster(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()

	t.Run("keepalive loss shows the holder", func(t *testing.T) {
		ctlOK(t, eps, "lease", "acquire", "lost", "--owner", "alice", "--ttl", "6s")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out, errOut, done := ctlAsync(ctx, eps, "lease", "keepalive", "lost", "--owner", "alice", "--generation", "1", "--ttl", "6s")
		out.waitFor(t, "the first renewal", 20*time.Second, func(s string) bool { return strings.Contains(s, "renewed lost") })
		// Between two renewals (2 s apart), the lease changes hands.
		ctlOK(t, eps, "lease", "release", "lost", "--owner", "alice", "--generation", "1")
		ctlOK(t, eps, "lease", "acquire", "lost", "--owner", "bob")
		details := "(current_generation=2, current_owner=bob)\n"
		if code := waitExit(t, done, 20*time.Second); code != exitError ||
			!strings.HasPrefix(errOut.String(), "error: lease keepalive lost: LEASE_LOST: ") || !strings.HasSuffix(errOut.String(), details) {
			t.Fatalf("keepalive of a lost lease: exit %d\n%s", code, errOut.String())
		}
		// As release says it.
		r := ctl(t, eps, "lease", "release", "lost", "--owner", "alice", "--generation", "1")
		if r.code != exitError || !strings.HasPrefix(r.errOut, "error: lease release lost: LEASE_LOST: ") || !strings.HasSuffix(r.errOut, details) {
			t.Fatalf("release: exit %d\n%s", r.code, r.errOut)
		}
	})

	t.Run("wait timeout prints the request id", func(t *testing.T) {
		ctlOK(t, eps, "lease", "acquire", "maint", "--owner", "erin", "--ttl", "30s")
		r := ctl(t, eps, "--timeout", "500ms", "lease", "acquire", "maint", "--owner", "dave", "--wait", "--request-id", "rid-7")
		if r.code != exitError || !strings.Contains(r.errOut, "error: lease acquire maint: not granted within --timeout 500ms;") ||
			!strings.Contains(r.errOut, "retry with --request-id rid-7 ") {
			t.Fatalf("wait timeout: exit %d\n%s", r.code, r.errOut)
		}
		r = ctl(t, eps, "--timeout", "500ms", "lease", "acquire", "maint", "--owner", "dave", "--wait")
		if r.code != exitError || !regexp.MustCompile(`retry with --request-id [0-9a-f]{24} `).MatchString(r.errOut) {
			t.Fatalf("wait timeout, generated id: exit %d\n%s", r.code, r.errOut)
		}
		// The retry with that id gets the grant, and a repeat the same one.
		ctlOK(t, eps, "lease", "release", "maint", "--owner", "erin", "--generation", "1")
		for range 2 {
			if out := ctlOK(t, eps, "lease", "acquire", "maint", "--owner", "dave", "--request-id", "rid-7"); !strings.Contains(out, "dave") ||
				!regexp.MustCompile(`maint\s+dave\s+2\s+held`).MatchString(out) {
				t.Fatalf("retry with the request id:\n%s", out)
			}
		}
	})

	t.Run("leader transfer alone", func(t *testing.T) {
		r := ctl(t, eps, "leader", "transfer")
		want := "error: leader transfer: the cluster has a single voter (node1): there is no other node to hand leadership to (FailedPrecondition)\n"
		if r.code != exitError || r.errOut != want {
			t.Fatalf("transfer: exit %d %q", r.code, r.errOut)
		}
	})

	t.Run("TLS flags against a plaintext node", func(t *testing.T) {
		certs := testcluster.NewCerts(t)
		f := certs.Files("admin", false)
		r := ctl(t, eps, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "lease", "get", "maint")
		if r.code != exitError || !strings.Contains(r.errOut, "the server does not use TLS") {
			t.Fatalf("exit %d %q", r.code, r.errOut)
		}
	})
}

// A plaintext coordctl against a cluster running mutual TLS says what to
// pass, at once (it does not retry until --timeout).
func TestPlaintextAgainstTLS(t *testing.T) {
	noTLSEnv(t)
	certs := testcluster.NewCerts(t)
	c := testcluster.New(t, 1, certs.Option())
	eps := c.Endpoints()
	start := time.Now()
	r := ctl(t, eps, "--timeout", "20s", "lease", "get", "x")
	want := "error: lease get x: the server requires TLS: pass --tls-ca/--tls-cert/--tls-key or COORD_TLS_*\n"
	if r.code != exitError || r.errOut != want {
		t.Fatalf("exit %d %q", r.code, r.errOut)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s: retried until the timeout", d)
	}
	r = ctl(t, eps, "--timeout", "20s", "status")
	if r.code != exitError || !strings.Contains(r.out, "the server requires TLS") ||
		r.errOut != "error: the server requires TLS: pass --tls-ca/--tls-cert/--tls-key or COORD_TLS_*\n" {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	// With the files, it works.
	f := certs.Files("admin", false)
	r = ctl(t, eps, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "lease", "get", "x")
	if r.code != exitError || !strings.Contains(r.errOut, "NOT_FOUND") {
		t.Fatalf("with TLS: exit %d %q", r.code, r.errOut)
	}
}
