package api

import (
	"context"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func acquireReq() *coordv1.AcquireRequest {
	return &coordv1.AcquireRequest{Name: "L", Owner: "o", Ttl: pbtime.Dur(5000)}
}

// Forwarding decisions: the leader runs a call; a follower forwards it to
// the leader it knows, marked as forwarded; a forwarded call is never
// forwarded again; without a known leader the answer is NO_LEADER.
func TestForwardingDecisions(t *testing.T) {
	t.Run("leader runs it", func(t *testing.T) {
		n := newFakeNode()
		s := newTestServer(t, n)
		resp, err := (&coordinator{s: s}).Acquire(context.Background(), acquireReq())
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("%v %v", resp, err)
		}
	})
	t.Run("follower forwards to the leader", func(t *testing.T) {
		n := newFakeNode()
		n.leading, n.leaderID, n.leaderAddr = false, "n2", "leader:7400"
		s := newTestServer(t, n)
		conn := &recordingConn{reply: &coordv1.AcquireResponse{Acquired: true, Lease: &coordv1.Lease{Name: "L", Generation: 7}}}
		s.dial = func(addr string) (grpc.ClientConnInterface, error) { conn.addr = addr; return conn, nil }
		resp, err := (&coordinator{s: s}).Acquire(context.Background(), acquireReq())
		if err != nil || resp.GetLease().GetGeneration() != 7 {
			t.Fatalf("%v %v", resp, err)
		}
		if conn.addr != "leader:7400" || conn.method != coordv1.Coordinator_Acquire_FullMethodName {
			t.Fatalf("forwarded %s to %s", conn.method, conn.addr)
		}
		if got := conn.md.Get(forwardedKey); len(got) != 1 || got[0] != "n1" {
			t.Fatalf("forwarded mark %v", got)
		}
		if got := conn.md.Get(identityKey); len(got) != 0 {
			t.Fatalf("an identity forwarded without TLS: %v", got)
		}
		if len(n.acquires) != 0 {
			t.Fatal("the follower ran the call too")
		}
	})
	t.Run("follower forwards the caller's identity with TLS", func(t *testing.T) {
		n := newFakeNode()
		n.leading, n.leaderID, n.leaderAddr = false, "n2", "leader:7400"
		s := newTestServer(t, n)
		s.tls = &tlsutil.Reloader{} // identities on
		conn := &recordingConn{reply: &coordv1.AcquireResponse{}}
		s.dial = func(string) (grpc.ClientConnInterface, error) { return conn, nil }
		ctx := auth.WithCaller(context.Background(), auth.Caller{Identity: "billing"})
		if _, err := (&coordinator{s: s}).Acquire(ctx, acquireReq()); err != nil {
			t.Fatal(err)
		}
		if got := conn.md.Get(identityKey); len(got) != 1 || got[0] != "billing" {
			t.Fatalf("forwarded identity %v", got)
		}
		if got := conn.md.Get(memberKey); len(got) != 0 {
			t.Fatalf("a client forwarded as a member: %v", got)
		}
		// A member's own call says so: the leader then treats it as one.
		ctx = auth.WithCaller(context.Background(), auth.Caller{Identity: "n1", Member: true})
		if _, err := (&coordinator{s: s}).Acquire(ctx, acquireReq()); err != nil {
			t.Fatal(err)
		}
		if got := conn.md.Get(memberKey); len(got) != 1 || got[0] != "1" {
			t.Fatalf("a member forwarded as %v", got)
		}
	})
	t.Run("a forwarded call is not forwarded again", func(t *testing.T) {
		n := newFakeNode()
		n.leading, n.leaderID, n.leaderAddr = false, "n2", "leader:7400"
		s := newTestServer(t, n) // dial fails the test
		_, err := (&coordinator{s: s}).Acquire(forwardedCtx(), acquireReq())
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || coorderr.WireReason(err) != "NOT_LEADER" || metaOf(err)["leader_address"] != "leader:7400" {
			t.Fatalf("%v", err)
		}
	})
	t.Run("no leader known", func(t *testing.T) {
		n := newFakeNode()
		n.leading = false
		s := newTestServer(t, n)
		_, err := (&coordinator{s: s}).Acquire(context.Background(), acquireReq())
		if status.Code(err) != codes.Unavailable || coorderr.WireReason(err) != "NO_LEADER" {
			t.Fatalf("%v", err)
		}
	})
	t.Run("stale reads stay on the follower", func(t *testing.T) {
		n := newFakeNode()
		n.apply(&fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5000})
		n.leading, n.leaderID, n.leaderAddr = false, "n2", "leader:7400"
		s := newTestServer(t, n)
		resp, err := (&coordinator{s: s}).GetLease(context.Background(), &coordv1.GetLeaseRequest{Name: "L", Stale: true})
		if err != nil || resp.GetLease().GetOwner() != "o" {
			t.Fatalf("%v %v", resp, err)
		}
	})
}
