package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/internal/tlsutil"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The HTTP gateway reaches the services through the in-process connection:
// a call on a follower is forwarded like a gRPC call, the leader's address
// comes back as a response header, and the answer is the leader's.
func TestHTTPThroughInprocForwardsAndReturnsHeaders(t *testing.T) {
	n := newFakeNode()
	n.leading, n.leaderID, n.leaderAddr = false, "n2", "leader:7400"
	s := newTestServer(t, n)
	conn := &recordingConn{reply: &coordv1.FencedCommitResponse{Accepted: true, MaxGeneration: 9}}
	s.dial = func(addr string) (grpc.ClientConnInterface, error) { conn.addr = addr; return conn, nil }

	body := `{"lease_name":"L","generation":"9","resource":"r"}`
	req := httptest.NewRequest(http.MethodPost, "/v1/fence/commit", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("Cookie", "session=1")
	rec := httptest.NewRecorder()
	s.httpAPI().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got struct {
		Accepted      bool   `json:"accepted"`
		MaxGeneration string `json:"max_generation"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || !got.Accepted || got.MaxGeneration != "9" {
		t.Fatalf("answer %s (%v)", rec.Body, err)
	}
	if conn.addr != "leader:7400" || conn.method != coordv1.Coordinator_FencedCommit_FullMethodName {
		t.Fatalf("forwarded %s to %s", conn.method, conn.addr)
	}
	// Only the forwarding mark goes to the leader: never the HTTP request's
	// headers (credentials, cookies) or anything the gateway derived.
	for k := range conn.md {
		if k != forwardedKey {
			t.Errorf("forwarded metadata %s=%v", k, conn.md[k])
		}
	}
	if h := rec.Header().Get("Grpc-Metadata-" + LeaderAddressHeader); h != "leader:7400" {
		t.Fatalf("leader address header %q (headers %v)", h, rec.Header())
	}
}

// The in-process guard is the gRPC one: with identities on, a caller
// without a certificate identity is refused before the service runs.
func TestInprocGuardRefusesWithoutIdentity(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	s.tls = &tlsutil.Reloader{} // identities on
	c := coordv1.NewCoordinatorClient(s.inprocConn())
	_, err := c.FencedCommit(context.Background(), &coordv1.FencedCommitRequest{LeaseName: "L", Generation: 1, Resource: "r"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("%v, want UNAUTHENTICATED", err)
	}
	if len(n.acquires) != 0 {
		t.Fatal("the service ran")
	}
	// Unknown methods are UNIMPLEMENTED, and so is KeepAlive: server
	// streams (Watch) are served in process, client streams are not.
	if err := s.inprocConn().Invoke(context.Background(), "/coord.v1.Nope/Nope", &coordv1.StatusRequest{}, &coordv1.StatusResponse{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("%v", err)
	}
	if _, err := c.KeepAlive(context.Background()); status.Code(err) != codes.Unimplemented {
		t.Fatalf("KeepAlive in process: %v", err)
	}
}

// The request is copied in and the answer out: the service never sees the
// caller's message, the caller never holds the service's.
func TestInprocCopiesMessages(t *testing.T) {
	n := newFakeNode()
	n.apply(&fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5000})
	s := newTestServer(t, n)
	c := coordv1.NewCoordinatorClient(s.inprocConn())
	req := &coordv1.GetLeaseRequest{Name: "L"}
	a, err := c.GetLease(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.GetLease(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if a.GetLease().GetOwner() != "o" || a == b || a.GetLease() == b.GetLease() {
		t.Fatalf("answers %v and %v share messages or lack the lease", a, b)
	}
}
