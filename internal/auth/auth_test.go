package auth

import (
	"context"
	"errors"
	"testing"
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
	if _, err := Authenticate("", "", false, members); kindOf(err) != Unauthenticated {
		t.Fatalf("no certificate: %v", err)
	}
	c, err := Authenticate("billing", "", false, members)
	if err != nil || c != (Caller{Identity: "billing"}) {
		t.Fatalf("plain caller: %+v %v", c, err)
	}
	// Only a member may speak for another identity.
	if _, err := Authenticate("billing", "ops", true, members); kindOf(err) != PermissionDenied {
		t.Fatalf("non-member forwarding: %v", err)
	}
	c, err = Authenticate("node1", "billing", true, members)
	if err != nil || c != (Caller{Identity: "billing", Forwarded: true}) {
		t.Fatalf("forwarded by a member: %+v %v", c, err)
	}
	c, err = Authenticate("node1", "node2", true, members)
	if err != nil || !c.Member || !c.Forwarded {
		t.Fatalf("a member forwarded by a member: %+v %v", c, err)
	}
	ctx := WithCaller(context.Background(), c)
	if IdentityOf(ctx) != "node2" || CallerOf(context.Background()) != (Caller{}) {
		t.Fatal("caller does not round-trip through the context")
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
	if _, err := a.Check("billing-worker", OpLease, "billing/x", false); err != nil {
		t.Fatal(err)
	}
	_, err = a.Check("billing-worker", OpLease, "payroll/x", false)
	var e *Error
	if !errors.As(err, &e) || e.Kind != PermissionDenied || e.Meta["rule"] != "no-payroll" || e.Meta["op"] != "lease" {
		t.Fatalf("denial: %#v", err)
	}
}
