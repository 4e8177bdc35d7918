package api

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/pbtime"
	"github.com/coordd/coordd/internal/testutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// clockMember answers Cluster.Clock as a member whose wall clock reads
// offset off the leader's fake clock; each call takes rtt of virtual time,
// half before the member reads its clock and half after. Calls take turns,
// so probes that overlap see longer round trips (and error bounds).
type clockMember struct {
	clk *clock.Fake
	rtt time.Duration

	mu       sync.Mutex
	offset   time.Duration
	requests []*coordv1.ClockRequest
}

func (m *clockMember) setOffset(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offset = d
}

func (m *clockMember) last() *coordv1.ClockRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.requests) == 0 {
		return nil
	}
	return m.requests[len(m.requests)-1]
}

func (m *clockMember) Invoke(_ context.Context, method string, req, reply any, _ ...grpc.CallOption) error {
	if method != coordv1.Cluster_Clock_FullMethodName {
		panic("clockMember: " + method)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, proto.Clone(req.(proto.Message)).(*coordv1.ClockRequest))
	m.clk.Advance(m.rtt / 2)
	wall := clock.Wall(m.clk).Add(m.offset)
	m.clk.Advance(m.rtt / 2)
	reply.(*coordv1.ClockResponse).WallTimeUnixNano = wall.UnixNano()
	return nil
}

func (m *clockMember) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	panic("not a stream")
}

// The clock probe, a leader service, in virtual time: every member's
// offset is measured within its error bound (half the round trip), one
// Warn when a member goes beyond ClockOffsetWarn and one Info when it is
// back, the gauges follow, each probe tells the member its last offset,
// and everything is forgotten when the leadership ends.
func TestClockProbeMeasuresOffsetsAndWarns(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_800_000_000, 0))
	var logs testutil.Buffer
	cfg := Config{GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logs, nil)), Clock: fc}.withDefaults()
	cfg.Metrics = prometheus.NewRegistry()
	n := newFakeNode()
	n.members = []*coordv1.Member{{Id: "n1", GrpcAddress: "n1:1"}, {Id: "n2", GrpcAddress: "n2:1"}, {Id: "n3", GrpcAddress: "n3:1"}}
	s := newServer(cfg, n)
	members := map[string]*clockMember{
		"n2:1": {clk: fc, rtt: 4 * time.Millisecond, offset: 2 * time.Second},
		"n3:1": {clk: fc, rtt: 4 * time.Millisecond, offset: -100 * time.Millisecond},
	}
	s.dial = func(addr string) (grpc.ClientConnInterface, error) {
		if m, ok := members[addr]; ok {
			return m, nil
		}
		t.Fatalf("dialled %s", addr)
		return nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- clockProbe{s}.Run(ctx, nil) }()

	probed := func(id string, rounds int) func() bool {
		return func() bool {
			m := members[id+":1"]
			m.mu.Lock()
			defer m.mu.Unlock()
			return len(m.requests) >= rounds && s.clocks.get(id) != nil && s.clocks.get(id).GetMeasuredAtMs() > 0
		}
	}
	testutil.Poll(t, "the first probe", 5*time.Second, time.Millisecond, func() bool {
		return probed("n2", 1)() && probed("n3", 1)() && len(s.clocks.all()) == 3
	})
	check := func(id string, want time.Duration) *coordv1.ClockOffset {
		t.Helper()
		o := s.clocks.get(id)
		got, bound := pbtime.Duration(o.GetOffset()), pbtime.Duration(o.GetOffsetError())
		if bound < 2*time.Millisecond || bound > 4*time.Millisecond {
			t.Fatalf("%s: error bound %v, want half a round trip of 4-8 ms", id, bound)
		}
		// Within the bound; in fact within half of it here, as a lone
		// call's round trip is symmetric (error 0) and one that waited for
		// another call first read the member's clock in its second half.
		if (got - want).Abs() > bound/2 {
			t.Fatalf("%s: offset %v ± %v, the member is %v off", id, got, bound, want)
		}
		return o
	}
	first := check("n2", 2*time.Second)
	check("n3", -100*time.Millisecond)
	if self := s.clocks.get("n1"); self.GetOffset().AsDuration() != 0 || self.GetOffsetError().AsDuration() != 0 {
		t.Fatalf("the leader's own offset %v", self)
	}
	exceeded := func(id string) float64 { return promtest.ToFloat64(s.clocks.exceededG.WithLabelValues(id)) }
	if exceeded("n2") != 1 || exceeded("n3") != 0 {
		t.Fatalf("exceeded gauges n2=%v n3=%v, want 1 and 0", exceeded("n2"), exceeded("n3"))
	}
	if got := promtest.ToFloat64(s.clocks.offset.WithLabelValues("n2")); got < 1.99 || got > 2.01 {
		t.Fatalf("offset gauge n2 = %v s", got)
	}
	warn := "a member's wall clock is off the leader's"
	if c := strings.Count(logs.String(), warn); c != 1 || !strings.Contains(logs.String(), "member=n2") {
		t.Fatalf("want one warning, for n2; logs:\n%s", logs.String())
	}

	// n2's clock is corrected: the next probe (one interval later) tells it
	// its previous offset, measures it back within the limit, and says so.
	members["n2:1"].setOffset(0)
	fc.Advance(cfg.ClockProbeInterval)
	testutil.Poll(t, "the second probe", 5*time.Second, time.Millisecond, func() bool {
		return probed("n2", 2)() && exceeded("n2") == 0
	})
	if prev := members["n2:1"].last().GetOffset(); !proto.Equal(prev, first) {
		t.Fatalf("the second probe carried %v, want the first measurement %v", prev, first)
	}
	check("n2", 0)
	if !strings.Contains(logs.String(), "back within the limit") || strings.Count(logs.String(), warn) != 1 {
		t.Fatalf("want one Info when n2 is back and no second warning; logs:\n%s", logs.String())
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if got := s.clocks.all(); len(got) != 0 {
		t.Fatalf("measurements kept after the leadership ended: %v", got)
	}
}
