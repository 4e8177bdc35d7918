package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/clock"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// scriptedNode is a Coordinator on loopback that answers FencedCommit and
// Snapshot with the scripted errors first, then success.
type scriptedNode struct {
	coordv1.UnimplementedCoordinatorServer
	coordv1.UnimplementedClusterServer
	mu     sync.Mutex
	script []error
	calls  int
}

func (n *scriptedNode) next() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls++
	if len(n.script) == 0 {
		return nil
	}
	err := n.script[0]
	n.script = n.script[1:]
	return err
}

func (n *scriptedNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls
}

// errHang in a script makes that call wait until the caller gives up.
var errHang = errors.New("hang")

func (n *scriptedNode) FencedCommit(ctx context.Context, _ *coordv1.FencedCommitRequest) (*coordv1.FencedCommitResponse, error) {
	if err := n.next(); errors.Is(err, errHang) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	} else if err != nil {
		return nil, err
	}
	return &coordv1.FencedCommitResponse{Accepted: true, Generation: 3}, nil
}

func (n *scriptedNode) Snapshot(context.Context, *coordv1.SnapshotRequest) (*coordv1.SnapshotResponse, error) {
	if err := n.next(); err != nil {
		return nil, err
	}
	return &coordv1.SnapshotResponse{Id: "snap-1", Index: 9}, nil
}

func startScripted(t *testing.T, script ...error) (*scriptedNode, string) {
	t.Helper()
	n := &scriptedNode{script: script}
	return n, serveLoopback(t, func(srv *grpc.Server) {
		coordv1.RegisterCoordinatorServer(srv, n)
		coordv1.RegisterClusterServer(srv, n)
	})
}

// serveLoopback serves what register adds on a loopback gRPC server,
// stopped when the test ends, and returns its address.
func serveLoopback(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// refusingAddr is a loopback address where nothing listens.
func refusingAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func reasonErr(code codes.Code, reason string) error {
	st, _ := status.New(code, reason).WithDetails(&errdetails.ErrorInfo{Reason: reason})
	return st.Err()
}

func rawClient(t *testing.T, endpoints ...string) *Client {
	t.Helper()
	return testClient(t, endpoints, WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
}

// Raw calls take the SDK's policy: a call that was certainly not applied
// (no leader, a node refusing connections) is retried whatever it is; one
// whose outcome is unknown is retried only when a repeat has no second
// effect.
func TestRawRetryPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noKey := &coordv1.FencedCommitRequest{Resource: "r", LeaseName: "l", Generation: 3}
	withKey := &coordv1.FencedCommitRequest{Resource: "r", LeaseName: "l", Generation: 3, IdempotencyKey: "k"}

	// NO_LEADER, then an answer: retried although not idempotent.
	n, addr := startScripted(t, reasonErr(codes.Unavailable, "NO_LEADER"), reasonErr(codes.Unavailable, "NO_LEADER"))
	resp, err := coordv1.NewCoordinatorClient(rawClient(t, addr).Raw()).FencedCommit(ctx, noKey)
	if err != nil || !resp.GetAccepted() || n.count() != 3 {
		t.Fatalf("after NO_LEADER: %v %v, %d calls", resp, err, n.count())
	}

	// A node that refuses connections, then one that answers.
	n, addr = startScripted(t)
	c := rawClient(t, refusingAddr(t), addr)
	if _, err := coordv1.NewCoordinatorClient(c.Raw()).FencedCommit(ctx, noKey); err != nil || n.count() != 1 {
		t.Fatalf("past a refusing node: %v, %d calls", err, n.count())
	}

	// Unknown outcome (the node went away mid-call): not retried without an
	// idempotency key, retried with one.
	cut := status.Error(codes.Unavailable, "error reading from server: EOF")
	n, addr = startScripted(t, cut)
	_, err = coordv1.NewCoordinatorClient(rawClient(t, addr).Raw()).FencedCommit(ctx, noKey)
	var e *Error
	if !errors.Is(err, ErrUnknownOutcome) || !errors.As(err, &e) || e.Code != codes.Unavailable || n.count() != 1 {
		t.Fatalf("unknown outcome without a key: %v, %d calls", err, n.count())
	}
	n, addr = startScripted(t, cut)
	if _, err := coordv1.NewCoordinatorClient(rawClient(t, addr).Raw()).FencedCommit(ctx, withKey); err != nil || n.count() != 2 {
		t.Fatalf("unknown outcome with a key: %v, %d calls", err, n.count())
	}

	// A verdict is returned as the SDK's *Error, with its sentinel.
	stale, _ := status.New(codes.FailedPrecondition, "stale").WithDetails(&errdetails.ErrorInfo{Reason: "STALE_TOKEN",
		Metadata: map[string]string{"max_generation": "4"}})
	n, addr = startScripted(t, stale.Err())
	_, err = coordv1.NewCoordinatorClient(rawClient(t, addr).Raw()).FencedCommit(ctx, withKey)
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &e) || e.Metadata["max_generation"] != "4" || n.count() != 1 {
		t.Fatalf("verdict: %v, %d calls", err, n.count())
	}
}

func TestIdempotentCall(t *testing.T) {
	for _, tc := range []struct {
		req  any
		want bool
	}{
		{&coordv1.AcquireRequest{Name: "a"}, false},
		{&coordv1.AcquireRequest{Name: "a", RequestId: "r"}, true},
		{&coordv1.FencedCommitRequest{}, false},
		{&coordv1.FencedCommitRequest{IdempotencyKey: "k"}, true},
		{&coordv1.FencedCommitRequest{Token: "l:3", DryRun: true}, true},
		{&coordv1.RenewRequest{}, true},
		{&coordv1.ReleaseRequest{}, true},
		{&coordv1.GetLeaseRequest{}, true},
		{&coordv1.PutScheduleRequest{}, true},
		{&coordv1.PauseScheduleRequest{}, true},
		{&coordv1.DeleteScheduleRequest{}, true},
		{&coordv1.GetScheduleRequest{}, true},
		{&coordv1.ListOverdueRequest{}, true},
		{&coordv1.TriggerScheduleRequest{}, false},
		{&coordv1.AddVoterRequest{}, true},
		{&coordv1.RemoveServerRequest{}, false},
		{&coordv1.TransferLeadershipRequest{}, false},
		{&coordv1.SnapshotRequest{}, false},
		{&coordv1.QueueSubmitRequest{}, false},
		{&coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{UniqueKey: "a"}, {}}}, false},
		{&coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{UniqueKey: "a"}, {UniqueKey: "b"}}}, true},
		{&coordv1.QueueGetRequest{}, true},
		{&coordv1.QueueListRequest{}, true},
		{&coordv1.QueueStatsRequest{}, true},
		{&coordv1.QueueHeartbeatRequest{}, true},
		{&coordv1.QueueCompleteRequest{}, true},
		{&coordv1.QueueFailRequest{}, true},
		{&coordv1.QueueCancelRequest{}, true},
		{&coordv1.QueueRetryRequest{}, false},
		{&coordv1.QueueFetchRequest{}, false},
	} {
		if got := idempotentCall(tc.req); got != tc.want {
			t.Errorf("%T %v: idempotent %v, want %v", tc.req, tc.req, got, tc.want)
		}
	}
}

// Snapshot without an endpoint goes to the first configured node that
// answers; a node's refusal is final.
func TestSnapshotFirstNodeThatAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, addr := startScripted(t)
	refusing := refusingAddr(t)
	c := rawClient(t, refusing, addr)
	if s, err := c.Snapshot(ctx, ""); err != nil || s.GetId() != "snap-1" || n.count() != 1 {
		t.Fatalf("snapshot: %v %v, %d calls", s, err, n.count())
	}
	if got := c.Endpoints(); len(got) != 2 || got[0] != refusing || got[1] != addr {
		t.Fatalf("endpoints %v", got)
	}
	n, addr = startScripted(t, status.Error(codes.NotFound, "nothing applied yet"), nil)
	if _, err := rawClient(t, addr).Snapshot(ctx, addr); !errors.Is(err, ErrNotFound) || n.count() != 1 {
		t.Fatalf("refusal: %v, %d calls", err, n.count())
	}
}

// A node that refuses connections costs no backoff while another endpoint
// is untried: with a clock that never moves, the call still gets through
// (a backoff sleep would block it until the context ends).
func TestRefusingNodeCostsNoBackoff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, addr := startScripted(t)
	c, err := New(ctx, []string{refusingAddr(t), refusingAddr(t), addr}, WithClock(clock.NewFake(time.Unix(1_000_000, 0))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &coordv1.FencedCommitRequest{Resource: "r", LeaseName: "l", Generation: 3}
	if _, err := coordv1.NewCoordinatorClient(c.Raw()).FencedCommit(ctx, req); err != nil || n.count() != 1 {
		t.Fatalf("%v, %d calls", err, n.count())
	}
	// Every node refusing: the client backs off (here: until ctx ends) and
	// says it could not reach coordd.
	c2, err := New(ctx, []string{refusingAddr(t), refusingAddr(t)}, WithClock(clock.NewFake(time.Unix(1_000_000, 0))))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	if _, err := coordv1.NewCoordinatorClient(c2.Raw()).FencedCommit(sctx, req); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("all refusing: %v", err)
	}
}

// silentAddr is a loopback address that takes TCP connections (the
// kernel's backlog) but never answers: a frozen node.
func silentAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis.Addr().String()
}

// A call whose time runs out while it still waits for a connection sent
// nothing: its outcome is known (not applied), whatever the call, and
// the error says the cluster could not be reached.
func TestTimeoutWaitingForConnectionIsNotUnknown(t *testing.T) {
	req := &coordv1.FencedCommitRequest{Resource: "r", LeaseName: "l", Generation: 3} // not idempotent
	for _, eps := range [][]string{{silentAddr(t)}, {refusingAddr(t), silentAddr(t)}} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := coordv1.NewCoordinatorClient(rawClient(t, eps...).Raw()).FencedCommit(ctx, req)
		cancel()
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknownOutcome) {
			t.Fatalf("%d endpoints: %v", len(eps), err)
		}
	}
}

// When the time runs out in an attempt, the error is what the cluster
// said before (here LEADERSHIP_LOST), not a bare "deadline exceeded"; the
// outcome stays unknown.
func TestTimeoutReportsTheLastAnswer(t *testing.T) {
	n, addr := startScripted(t, reasonErr(codes.Unavailable, "LEADERSHIP_LOST"), errHang)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req := &coordv1.FencedCommitRequest{Resource: "r", LeaseName: "l", Generation: 3, IdempotencyKey: "k"}
	c := testClient(t, []string{addr}, WithRetryBackoff(time.Millisecond, 5*time.Millisecond), WithAttemptTimeout(time.Minute))
	_, err := coordv1.NewCoordinatorClient(c.Raw()).FencedCommit(ctx, req)
	var e *Error
	if !errors.Is(err, ErrUnknownOutcome) || !errors.As(err, &e) || e.Reason != "LEADERSHIP_LOST" || n.count() != 2 {
		t.Fatalf("%v, %d calls", err, n.count())
	}

	// A node's own TIMEOUT (DEADLINE_EXCEEDED with a reason) is an answer:
	// it is reported, not the NO_LEADER before it.
	n, addr = startScripted(t, reasonErr(codes.Unavailable, "NO_LEADER"), reasonErr(codes.DeadlineExceeded, "TIMEOUT"))
	noKey := &coordv1.FencedCommitRequest{Resource: "r", LeaseName: "l", Generation: 3}
	c = testClient(t, []string{addr}, WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	_, err = coordv1.NewCoordinatorClient(c.Raw()).FencedCommit(context.Background(), noKey)
	if !errors.Is(err, ErrUnknownOutcome) || !errors.As(err, &e) || e.Reason != "TIMEOUT" || n.count() != 2 {
		t.Fatalf("after NO_LEADER, TIMEOUT: %v, %d calls", err, n.count())
	}
}
