package auth

import (
	"context"
	"errors"
	"testing"

	"github.com/coordd/coordd/internal/tlsutil"
)

func kindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

func TestAuthenticate(t *testing.T) {
	members := func(id string) bool { return id == "node1" || id == "node2" }
	client := func(id string) tlsutil.Peer { return tlsutil.Peer{Identity: id} }
	node := func(id string) tlsutil.Peer { return tlsutil.Peer{Identity: id, Node: true} }
	if _, err := Authenticate(tlsutil.Peer{}, nil, members); kindOf(err) != Unauthenticated {
		t.Fatalf("no certificate: %v", err)
	}
	c, err := Authenticate(client("billing"), nil, members)
	if err != nil || c != (Caller{Identity: "billing"}) {
		t.Fatalf("plain caller: %+v %v", c, err)
	}
	// Only a member may speak for another identity.
	fwd := client("ops")
	if _, err := Authenticate(client("billing"), &fwd, members); kindOf(err) != PermissionDenied {
		t.Fatalf("non-member forwarding: %v", err)
	}
	fwd = client("billing")
	c, err = Authenticate(node("node1"), &fwd, members)
	if err != nil || c != (Caller{Identity: "billing", Forwarded: true}) {
		t.Fatalf("forwarded by a member: %+v %v", c, err)
	}
	fwd = node("node2")
	c, err = Authenticate(node("node1"), &fwd, members)
	if err != nil || !c.Member || !c.Forwarded {
		t.Fatalf("a member forwarded by a member: %+v %v", c, err)
	}
	ctx := WithCaller(context.Background(), c)
	if IdentityOf(ctx) != "node2" || CallerOf(context.Background()) != (Caller{}) {
		t.Fatal("caller does not round-trip through the context")
	}
}

// A client certificate named like a member is an ordinary identity: not a
// member, not trusted to forward, and a member forwarding its call does
// not make it one.
func TestMemberNameOnAClientCertificate(t *testing.T) {
	members := func(id string) bool { return id == "node1" || id == "node2" }
	c, err := Authenticate(tlsutil.Peer{Identity: "node1"}, nil, members)
	if err != nil || c.Member || c.Node {
		t.Fatalf("client certificate named node1: %+v %v", c, err)
	}
	fwd := tlsutil.Peer{Identity: "reports-svc"}
	if _, err := Authenticate(tlsutil.Peer{Identity: "node1"}, &fwd, members); kindOf(err) != PermissionDenied {
		t.Fatalf("client certificate named node1 forwarding: %v", err)
	}
	fwd = tlsutil.Peer{Identity: "node2"}
	if c, err := Authenticate(tlsutil.Peer{Identity: "node1", Node: true}, &fwd, members); err != nil || c.Member {
		t.Fatalf("a client named node2 forwarded by node1: %+v %v", c, err)
	}
	// A node certificate of a server not in the configuration is no member.
	if c, err := Authenticate(tlsutil.Peer{Identity: "node9", Node: true}, nil, members); err != nil || c.Member || !c.Node {
		t.Fatalf("node certificate of a non-member: %+v %v", c, err)
	}
	// Forwarded: the forwarding member says whether its caller presented a
	// node certificate (a joining node's, for node_certificates rules).
	fwd = tlsutil.Peer{Identity: "node9", Node: true}
	if c, err := Authenticate(tlsutil.Peer{Identity: "node1", Node: true}, &fwd, members); err != nil || c.Member || !c.Node {
		t.Fatalf("a joining node forwarded by node1: %+v %v", c, err)
	}
}

func TestJobBytesAndScheduleRates(t *testing.T) {
	l := NewLimiter(Limits{JobBytesPerSecond: 1, ScheduleJobsPerSecond: 2})
	// The burst is one largest request; nothing is taken on a refusal.
	if err := l.AllowJobBytes("a", MinJobBytesBurst); err != nil {
		t.Fatal(err)
	}
	err := l.AllowJobBytes("a", 1000)
	if kindOf(err) != JobBytesLimited || err.(*Error).Meta["limit"] != "job_bytes" {
		t.Fatalf("over the rate: %v", err)
	}
	if err := l.AllowJobBytes("b", 1000); err != nil {
		t.Fatalf("another identity has its own bucket: %v", err)
	}
	if err := l.ScheduleRates("a", 2, 1); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
	for _, tc := range []struct {
		jobs, bytes float64
		quota       string
	}{{2.01, 0, "jobs_rate"}, {1, 1.5, "bytes_rate"}} {
		err := l.ScheduleRates("a", tc.jobs, tc.bytes)
		if kindOf(err) != ScheduleQuota || err.(*Error).Meta["quota"] != tc.quota {
			t.Fatalf("%v jobs/s, %v bytes/s: %v", tc.jobs, tc.bytes, err)
		}
	}
	off := NewLimiter(Limits{})
	if off.AllowJobBytes("a", 1<<30) != nil || off.ScheduleRates("a", 1e9, 1e9) != nil {
		t.Fatal("zero limits refuse")
	}
	if l.AllowJobBytes("", 1<<30) != nil || l.ScheduleRates("", 1e9, 1e9) != nil {
		t.Fatal("the anonymous identity (TLS off) is limited")
	}
}

func TestLimiter(t *testing.T) {
	l := NewLimiter(Limits{RequestsPerSecond: 0.001, Burst: 2, KeepAliveStreams: 1, WaitingAcquires: 2})
	for i := 0; i < 2; i++ {
		if err := l.Allow("a"); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
	}
	if err := l.Allow("a"); kindOf(err) != RateLimited {
		t.Fatalf("over the burst: %v", err)
	}
	if err := l.Allow("b"); err != nil {
		t.Fatalf("another identity has its own bucket: %v", err)
	}
	done, err := l.OpenStream("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenStream("a"); kindOf(err) != StreamLimit {
		t.Fatalf("second stream: %v", err)
	}
	done()
	if _, err := l.OpenStream("a"); err != nil {
		t.Fatalf("a stream given back is free again: %v", err)
	}
	w1, _ := l.StartWait("a")
	w2, _ := l.StartWait("a")
	if _, err := l.StartWait("a"); kindOf(err) != WaitLimit {
		t.Fatalf("third wait: %v", err)
	}
	w1()
	w2()
	if len(l.waits) != 0 {
		t.Fatalf("counts left behind: %v", l.waits)
	}
	unlimited := NewLimiter(Limits{})
	for i := 0; i < 100; i++ {
		if err := unlimited.Allow("a"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestACLCheckNamesTheRule(t *testing.T) {
	a, err := ParseACL([]byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Check(Caller{Identity: "billing-worker"}, OpLease, "billing/x", false); err != nil {
		t.Fatal(err)
	}
	_, err = a.Check(Caller{Identity: "billing-worker"}, OpLease, "payroll/x", false)
	var e *Error
	if !errors.As(err, &e) || e.Kind != PermissionDenied || e.Meta["rule"] != "no-payroll" || e.Meta["op"] != "lease" {
		t.Fatalf("denial: %#v", err)
	}
}
