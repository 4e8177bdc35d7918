package client

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/clock"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// fakeNode is an in-process gRPC server on 127.0.0.1:0 that plays a coordd
// node: Status, Acquire, Release and KeepAlive. A leader grants; a follower
// either forwards (answers as the leader would, counting the call) or
// refuses with NOT_LEADER; a frozen node answers nothing (Status and
// KeepAlive acknowledgements block until it thaws), like a SIGSTOPped one.
type fakeNode struct {
	coordv1.UnimplementedCoordinatorServer
	coordv1.UnimplementedClusterServer
	healthpb.UnimplementedHealthServer

	id, addr string
	clk      *clock.Fake // to stamp renewals with virtual time (may be nil)
	srv      *grpc.Server

	mu          sync.Mutex
	leader      bool
	leaderOf    *fakeNode // the leader this node names (followers)
	term        uint64
	lookupErr   error
	refuse      bool // a follower answers NOT_LEADER instead of forwarding
	header      bool // a forwarding follower names the leader in leaderHeader
	thaw        chan struct{}
	calls       map[string]int
	streams     int
	renewals    chan fakeRenewal
	generations uint64
}

type fakeRenewal struct {
	node string
	name string
	at   time.Time
}

func startFakeNode(t *testing.T, id string, clk *clock.Fake, renewals chan fakeRenewal) *fakeNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{id: id, addr: lis.Addr().String(), clk: clk, srv: grpc.NewServer(), calls: map[string]int{},
		renewals: renewals, term: 1}
	coordv1.RegisterCoordinatorServer(n.srv, n)
	coordv1.RegisterClusterServer(n.srv, n)
	healthpb.RegisterHealthServer(n.srv, n)
	go func() { _ = n.srv.Serve(lis) }()
	t.Cleanup(func() {
		n.unfreeze()
		n.srv.Stop()
	})
	return n
}

// lead makes n the leader in term, and the others its followers.
func lead(n *fakeNode, term uint64, others ...*fakeNode) {
	n.mu.Lock()
	n.leader, n.leaderOf, n.term = true, n, term
	n.mu.Unlock()
	for _, o := range others {
		o.mu.Lock()
		o.leader, o.leaderOf, o.term = false, n, term
		o.mu.Unlock()
	}
}

func (n *fakeNode) freeze() {
	n.mu.Lock()
	if n.thaw == nil {
		n.thaw = make(chan struct{})
	}
	n.mu.Unlock()
}

func (n *fakeNode) unfreeze() {
	n.mu.Lock()
	if n.thaw != nil {
		close(n.thaw)
		n.thaw = nil
	}
	n.mu.Unlock()
}

// wait blocks while n is frozen.
func (n *fakeNode) wait(ctx context.Context) error {
	n.mu.Lock()
	thaw := n.thaw
	n.mu.Unlock()
	if thaw == nil {
		return nil
	}
	select {
	case <-thaw:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *fakeNode) count(method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[method]
}

func (n *fakeNode) streamCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.streams
}

func notLeader(leaderAddr string) error {
	st := status.New(codes.Unavailable, "not the leader")
	st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: "NOT_LEADER", Domain: "coordd.io",
		Metadata: map[string]string{"leader_address": leaderAddr}})
	return st.Err()
}

// Members lists this node and the leader it names (the SDK's leader
// lookup).
func (n *fakeNode) Members(ctx context.Context, _ *coordv1.MembersRequest) (*coordv1.MembersResponse, error) {
	if err := n.wait(ctx); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls["Members"]++
	if n.lookupErr != nil {
		return nil, n.lookupErr
	}
	out := &coordv1.MembersResponse{Members: []*coordv1.Member{{Id: n.id, GrpcAddress: n.addr, Leader: n.leaderOf == n}}}
	if l := n.leaderOf; l != nil && l != n {
		out.Members = append(out.Members, &coordv1.Member{Id: l.id, GrpcAddress: l.addr, Leader: true})
	}
	return out, nil
}

// Check is the health check the keeper probes an idle stream with.
func (n *fakeNode) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	n.mu.Lock()
	n.calls["Check"]++
	n.mu.Unlock()
	if err := n.wait(ctx); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// serveUnary answers a unary call as leader, or as a follower that
// forwards or refuses.
func (n *fakeNode) serveUnary(ctx context.Context, method string, local func() error) error {
	if err := n.wait(ctx); err != nil {
		return err
	}
	n.mu.Lock()
	n.calls[method]++
	leader, l, refuse, header := n.leader, n.leaderOf, n.refuse, n.header
	n.mu.Unlock()
	if leader {
		return local()
	}
	if l == nil {
		return status.Error(codes.Unavailable, "no leader")
	}
	if refuse {
		return notLeader(l.addr)
	}
	if header {
		_ = grpc.SetHeader(ctx, metadata.Pairs(leaderHeader, l.addr))
	}
	l.mu.Lock()
	l.calls["forwarded "+method]++
	l.mu.Unlock()
	return l.wait(ctx) // then answered as the leader would
}

func (n *fakeNode) Acquire(ctx context.Context, req *coordv1.AcquireRequest) (*coordv1.AcquireResponse, error) {
	var gen uint64
	err := n.serveUnary(ctx, "Acquire", func() error {
		n.mu.Lock()
		n.generations++
		gen = n.generations
		n.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &coordv1.AcquireResponse{Acquired: true, Lease: &coordv1.Lease{Name: req.GetName(), Owner: req.GetOwner(), Generation: max(gen, 1)}}, nil
}

func (n *fakeNode) Release(ctx context.Context, _ *coordv1.ReleaseRequest) (*coordv1.ReleaseResponse, error) {
	if err := n.serveUnary(ctx, "Release", func() error { return nil }); err != nil {
		return nil, err
	}
	return &coordv1.ReleaseResponse{}, nil
}

// KeepAlive acknowledges every renewal while not frozen; a frozen node
// records what arrives and answers nothing.
func (n *fakeNode) KeepAlive(stream coordv1.Coordinator_KeepAliveServer) error {
	n.mu.Lock()
	leader, l := n.leader, n.leaderOf
	n.streams++
	n.mu.Unlock()
	if !leader {
		if l == nil {
			return status.Error(codes.Unavailable, "no leader")
		}
		return notLeader(l.addr)
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		r := fakeRenewal{node: n.id, name: req.GetName()}
		if n.clk != nil {
			r.at = n.clk.Now()
		}
		if n.renewals != nil {
			n.renewals <- r
		}
		if err := n.wait(stream.Context()); err != nil {
			return err
		}
		if err := stream.Send(&coordv1.KeepAliveResponse{Name: req.GetName(), Generation: req.GetGeneration(), Ok: true,
			Seq: req.GetSeq(), ExpiresIn: pbtime.Dur(req.GetTtlMs())}); err != nil {
			return err
		}
	}
}

// testClient is a client of endpoints, closed when the test ends.
func testClient(t *testing.T, endpoints []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(context.Background(), endpoints, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func fakeClient(t *testing.T, endpoints []string, opts ...Option) *Client {
	t.Helper()
	return testClient(t, endpoints, append([]Option{WithOwner("me")}, opts...)...)
}

// acquireOnce acquires lease x (TTL 10 s) within 10 s.
func acquireOnce(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, "x", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func acquireRelease(t *testing.T, c *Client, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		l, err := c.Acquire(ctx, "x", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A client whose first endpoint is a follower learns the leader from
// Status at start and sends every call there: the follower forwards none.
func TestRoutingLeaderFromStatusAtStart(t *testing.T) {
	f, l := startFakeNode(t, "f", nil, nil), startFakeNode(t, "l", nil, nil)
	lead(l, 1, f)
	c := fakeClient(t, []string{f.addr, l.addr})
	acquireRelease(t, c, 20)
	if a, r := f.count("Acquire"), f.count("Release"); a != 0 || r != 0 {
		t.Fatalf("the follower got %d acquires and %d releases", a, r)
	}
	if a := l.count("Acquire"); a != 20 {
		t.Fatalf("the leader got %d acquires, want 20", a)
	}
	if c.Endpoint() != l.addr {
		t.Fatalf("endpoint %s, want the leader %s", c.Endpoint(), l.addr)
	}
}

// Without Status answers, the first call goes to the first endpoint, a
// follower; what it answers points the client to the leader, where it
// stays.
func TestRoutingWithoutLeaderLookup(t *testing.T) {
	for _, tc := range []struct {
		name           string
		refuse, header bool
		want           map[string]int // calls per "node method", node f or l
	}{
		// A NOT_LEADER refusal names the leader: only the first acquire
		// went to the follower.
		{name: "not leader redirect", refuse: true, want: map[string]int{"f Acquire": 1, "l Acquire": 10}},
		// A follower that forwards and names the leader in the response
		// header forwards one call, not every call.
		{name: "leader header", header: true, want: map[string]int{"l forwarded Acquire": 1, "l Acquire": 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, l := startFakeNode(t, "f", nil, nil), startFakeNode(t, "l", nil, nil)
			lead(l, 1, f)
			for _, n := range []*fakeNode{f, l} {
				n.lookupErr = status.Error(codes.Unimplemented, "no lookup here")
			}
			f.refuse, f.header = tc.refuse, tc.header
			c := fakeClient(t, []string{f.addr, l.addr})
			acquireRelease(t, c, 10)
			nodes := map[string]*fakeNode{"f": f, "l": l}
			for key, want := range tc.want {
				node, method, _ := strings.Cut(key, " ")
				if got := nodes[node].count(method); got != want {
					t.Fatalf("%s got %d %s calls, want %d", node, got, method, want)
				}
			}
		})
	}
}

// When the leader the nodes name cannot be reached, calls fall back to a
// follower, which forwards.
func TestRoutingFollowerFallback(t *testing.T) {
	f := startFakeNode(t, "f", nil, nil)
	// A leader at an address where nothing listens.
	gone := &fakeNode{id: "gone", addr: refusingAddr(t), calls: map[string]int{}}
	f.leaderOf = gone
	gone.leader = true
	c := fakeClient(t, []string{f.addr}, WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	acquireOnce(t, c)
	if a := f.count("Acquire"); a != 1 {
		t.Fatalf("the follower got %d acquires, want 1", a)
	}
}

// virtual drives a fake clock for the keeper tests.
type virtual struct {
	t        *testing.T
	clk      *clock.Fake
	t0       time.Time
	renewals chan fakeRenewal
}

func newVirtual(t *testing.T) *virtual {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	return &virtual{t: t, clk: clk, t0: clk.Now(), renewals: make(chan fakeRenewal, 100)}
}

// advanceTo waits until a timer is armed at t0+d (the keeper is idle
// until then), then moves the clock there.
func (v *virtual) advanceTo(d time.Duration) {
	v.t.Helper()
	if !v.clk.WaitArmed(v.t0.Add(d), 5*time.Second) {
		v.t.Fatalf("nothing armed at t0+%s", d)
	}
	v.clk.Advance(v.t0.Add(d).Sub(v.clk.Now()))
}

// next is the next renewal a node received; skip ignores those from a
// node (sent on a stream as it was abandoned).
func (v *virtual) next(skip string) fakeRenewal {
	v.t.Helper()
	for {
		select {
		case r := <-v.renewals:
			if r.node != skip {
				return r
			}
		case <-time.After(5 * time.Second):
			v.t.Fatal("no renewal arrived")
			return fakeRenewal{}
		}
	}
}

func (v *virtual) waitDeadline(l *Lease, want time.Duration) {
	v.t.Helper()
	for end := time.Now().Add(5 * time.Second); !l.Deadline().Equal(v.t0.Add(want)); {
		if time.Now().After(end) {
			v.t.Fatalf("local deadline t0+%s, want t0+%s", l.Deadline().Sub(v.t0), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func (v *virtual) acquire(c *Client, ttl time.Duration) *Lease {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "job", ttl)
	if err != nil {
		v.t.Fatal(err)
	}
	return l
}

// Right after the leader dies the others still name it. The lookup does
// not trust a named leader that did not answer, and the calls go to a
// node that did (which forwards once it knows the new leader), not to the
// dead one.
func TestRoutingSkipsDeadNamedLeader(t *testing.T) {
	f := startFakeNode(t, "f", nil, nil)
	dead := &fakeNode{id: "dead", addr: refusingAddr(t), calls: map[string]int{}}
	f.leaderOf = dead
	c := fakeClient(t, []string{dead.addr, f.addr})
	acquireOnce(t, c)
	if a := f.count("Acquire"); a != 1 {
		t.Fatalf("the live node got %d acquires, want 1 (the first attempt)", a)
	}
	if c.Endpoint() != f.addr {
		t.Fatalf("endpoint %s, want the live node %s", c.Endpoint(), f.addr)
	}
}

// A frozen leader neither breaks the KeepAlive stream nor answers. Its
// renewals go unacknowledged; stallLimit (min(TTL/3, 2 s)) after the
// oldest one the keeper abandons the stream, finds the new leader through
// Status on the other node and renews there at once: in virtual time,
// exactly stallLimit after the unanswered renewal. The lease is never lost
// and the frozen node gets no second stream. (TTL 15 s renews often enough
// that the keeper sends no idle probes.)
func TestKeepAliveLeavesFrozenLeader(t *testing.T) {
	v := newVirtual(t)
	a, b := startFakeNode(t, "a", v.clk, v.renewals), startFakeNode(t, "b", v.clk, v.renewals)
	lead(a, 1, b)
	c := fakeClient(t, []string{b.addr, a.addr}, WithClock(v.clk))
	l := v.acquire(c, 15*time.Second) // renewals every 5 s, stall limit 2 s, margin 1.5 s
	if b.count("Acquire") != 0 {
		t.Fatal("the acquire went through the follower")
	}
	v.advanceTo(5 * time.Second)
	if r := v.next(""); r.node != "a" || !r.at.Equal(v.t0.Add(5*time.Second)) {
		t.Fatalf("first renewal on %s at t0+%s", r.node, r.at.Sub(v.t0))
	}
	v.waitDeadline(l, 18500*time.Millisecond)

	a.freeze() // and b wins the election
	lead(b, 2)
	v.advanceTo(10 * time.Second)
	if r := v.next(""); r.node != "a" {
		t.Fatalf("renewal at t0+10s went to %s", r.node)
	}
	v.advanceTo(12 * time.Second) // 10 s + stall limit: the keeper leaves a
	if r := v.next("a"); r.node != "b" || !r.at.Equal(v.t0.Add(12*time.Second)) {
		t.Fatalf("renewal resumed on %s at t0+%s, want b at t0+12s", r.node, r.at.Sub(v.t0))
	}
	v.waitDeadline(l, 25500*time.Millisecond)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	if n := a.streamCount(); n != 1 {
		t.Fatalf("the frozen node got %d streams", n)
	}
	if c.Endpoint() != b.addr {
		t.Fatalf("endpoint %s, want the new leader %s", c.Endpoint(), b.addr)
	}
	if n := a.count("Check") + b.count("Check"); n != 0 {
		t.Fatalf("%d probes at TTL 15 s", n)
	}
}

// A stream with nothing outstanding is probed (a health check on its
// connection) once it has been quiet for probeAfter, so a leader that
// freezes between renewals is noticed within probeAfter + stallLimit
// (TTL/2 - 250 ms for TTL 3 s), not TTL/3 + stallLimit.
func TestKeepAliveProbesQuietStream(t *testing.T) {
	v := newVirtual(t)
	a, b := startFakeNode(t, "a", v.clk, v.renewals), startFakeNode(t, "b", v.clk, v.renewals)
	lead(a, 1, b)
	c := fakeClient(t, []string{a.addr, b.addr}, WithClock(v.clk))
	const ttl = 3 * time.Second // renewals every 1 s, stall limit 1 s, probe after 250 ms quiet
	if got := probeAfter(ttl); got != 250*time.Millisecond {
		t.Fatalf("probeAfter(%s) = %s", ttl, got)
	}
	l := v.acquire(c, ttl) // the stream opens quiet at t0
	v.advanceTo(250 * time.Millisecond)
	v.advanceTo(500 * time.Millisecond) // armed once the first probe was answered
	if !v.clk.WaitArmed(v.t0.Add(750*time.Millisecond), 5*time.Second) {
		t.Fatal("the second probe was not answered")
	}
	a.freeze() // between probes; b wins the election
	lead(b, 2)
	v.advanceTo(750 * time.Millisecond) // a probe a does not answer
	for end := time.Now().Add(5 * time.Second); a.count("Check") < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d probes by t0+750ms, want 3", a.count("Check"))
		}
	}
	v.advanceTo(time.Second) // the renewal goes to a, unanswered too
	if r := v.next(""); r.node != "a" {
		t.Fatalf("renewal at t0+1s went to %s", r.node)
	}
	v.advanceTo(1750 * time.Millisecond) // the probe at 750 ms + stall limit
	r := v.next("a")
	if r.node != "b" || !r.at.Equal(v.t0.Add(1750*time.Millisecond)) {
		t.Fatalf("renewal resumed on %s at t0+%s, want b at t0+1.75s", r.node, r.at.Sub(v.t0))
	}
	v.waitDeadline(l, 4450*time.Millisecond)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

// Before the election the other nodes still name the frozen leader. The
// keeper does not go back to it (it would stall again): it keeps asking
// until a new leader is named, then renews there.
func TestKeepAliveWaitsForElectionAfterStall(t *testing.T) {
	v := newVirtual(t)
	a, b := startFakeNode(t, "a", v.clk, v.renewals), startFakeNode(t, "b", v.clk, v.renewals)
	lead(a, 1, b)
	c := fakeClient(t, []string{a.addr, b.addr}, WithClock(v.clk))
	l := v.acquire(c, 15*time.Second)
	a.freeze() // b still names a: no election yet
	v.advanceTo(5 * time.Second)
	if r := v.next(""); r.node != "a" {
		t.Fatalf("renewal on %s", r.node)
	}
	v.advanceTo(7 * time.Second) // stalled; b names a, a is silent
	// The lookup waits suspectGrace (virtual time) for a's own word, then
	// the keeper waits (50 ms backoff) and asks again.
	v.advanceTo(7*time.Second + suspectGrace)
	retry := 7*time.Second + suspectGrace + 50*time.Millisecond
	if !v.clk.WaitArmed(v.t0.Add(retry), 5*time.Second) {
		t.Fatal("the keeper is not waiting to ask again")
	}
	lead(b, 2)
	v.advanceTo(retry)
	if r := v.next("a"); r.node != "b" || !r.at.Equal(v.t0.Add(retry)) {
		t.Fatalf("renewal on %s at t0+%s, want b at t0+%s", r.node, r.at.Sub(v.t0), retry)
	}
	if n := a.streamCount(); n != 1 {
		t.Fatalf("the frozen node got %d streams", n)
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
}

func TestKeepAliveStallLimit(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		300 * time.Millisecond: 100 * time.Millisecond,
		3 * time.Second:        time.Second,
		5 * time.Second:        5 * time.Second / 3,
		time.Minute:            2 * time.Second,
	} {
		if got := stallLimit(ttl); got != want {
			t.Errorf("stall limit for TTL %s = %s, want %s", ttl, got, want)
		}
	}
}
