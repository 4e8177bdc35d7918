package api

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Overdue windows, next occurrences and the monitor are judged on calendar
// time; stuck leases on lease time. The fake node's lease time lags its
// calendar by far more than a job's interval (failovers and outages): a
// window is overdue by calendar time, not by the lagging lease clock.
func TestOverdueOnCalendarTime(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	j := &jobs{s: s}
	ctx := context.Background()
	// Registered at calendar time cal0; lease time is ~20 days behind.
	cal0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC).UnixMilli()
	n.calendar = cal0
	if _, err := j.RegisterJob(ctx, &coordv1.RegisterJobRequest{Spec: &coordv1.JobSpec{Name: "every-minute", Schedule: "@every 1m"}}); err != nil {
		t.Fatal(err)
	}
	st, err := j.JobStatus(ctx, &coordv1.JobStatusRequest{Name: "every-minute"})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetJob().GetRegisteredAt(); got != cal0 {
		t.Fatalf("registered at %d, want calendar time %d", got, cal0)
	}
	if next := st.GetNextOccurrences(); len(next) == 0 || next[0] <= cal0 || next[0] > cal0+60_000 {
		t.Fatalf("next occurrences %v from calendar time %d", next, cal0)
	}
	if len(st.GetOverdue()) != 0 {
		t.Fatalf("overdue at registration: %v", st.GetOverdue())
	}
	// Three minutes later on the calendar (lease time unmoved): the
	// occurrences at 12:01 and 12:02 are overdue (due one interval after),
	// not the one before the registration.
	n.calendar = cal0 + 3*60_000
	od, err := j.ListOverdue(ctx, &coordv1.ListOverdueRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(od.GetWindows()) != 2 {
		t.Fatalf("%d overdue windows, want 2 (12:01, 12:02): %v", len(od.GetWindows()), od.GetWindows())
	}
	for _, w := range od.GetWindows() {
		if w.GetOccurrence() < cal0 || w.GetOverdueMs() < 0 || w.GetOverdueMs() > 2*60_000 {
			t.Fatalf("overdue window %v at calendar %d", w, n.calendar)
		}
	}
	a := s.computeAbsence(n.fsm, n.now, n.calendar)
	if a.perJob["every-minute"] != 2 {
		t.Fatalf("monitor: %d overdue", a.perJob["every-minute"])
	}
}

// A read during an election waits for a leader (here one appears after a
// while of virtual time and the read is forwarded to it), for at most
// LeaderWait: without a leader it answers NO_LEADER once that passed, and
// a forwarded read or a stale one does not wait.
func TestReadWaitsBrieflyForALeader(t *testing.T) {
	setup := func(t *testing.T) (*fakeNode, *Server, *clock.Fake, *recordingConn) {
		n := newFakeNode()
		n.setLeader(false, "", "")
		s := newTestServer(t, n)
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		s.cfg.Clock = clk
		conn := &recordingConn{reply: &coordv1.GetLeaseResponse{Lease: &coordv1.Lease{Name: "L", Generation: 3}}}
		s.dial = func(addr string) (grpc.ClientConnInterface, error) { conn.addr = addr; return conn, nil }
		return n, s, clk, conn
	}
	type result struct {
		resp *coordv1.GetLeaseResponse
		err  error
	}
	read := func(s *Server, ctx context.Context) chan result {
		out := make(chan result, 1)
		go func() {
			r, err := (&coordinator{s: s}).GetLease(ctx, &coordv1.GetLeaseRequest{Name: "L"})
			out <- result{r, err}
		}()
		return out
	}
	t.Run("a leader is elected meanwhile", func(t *testing.T) {
		n, s, clk, conn := setup(t)
		got := read(s, context.Background())
		if !clk.WaitTimers(1, 5*time.Second) {
			t.Fatal("the read did not wait")
		}
		clk.Advance(time.Second)
		select {
		case r := <-got:
			t.Fatalf("answered during the election: %v %v", r.resp, r.err)
		default:
		}
		n.setLeader(false, "n2", "n2:7400")
		r := <-got
		if r.err != nil || r.resp.GetLease().GetGeneration() != 3 || conn.addr != "n2:7400" {
			t.Fatalf("after the election: %v %v (forwarded to %q)", r.resp, r.err, conn.addr)
		}
	})
	t.Run("no leader within the wait", func(t *testing.T) {
		_, s, clk, _ := setup(t)
		got := read(s, context.Background())
		if !clk.WaitTimers(1, 5*time.Second) {
			t.Fatal("the read did not wait")
		}
		clk.Advance(s.cfg.LeaderWait - time.Millisecond)
		select {
		case r := <-got:
			t.Fatalf("answered before LeaderWait: %v", r.err)
		case <-time.After(20 * time.Millisecond):
		}
		clk.Advance(time.Millisecond)
		r := <-got
		if status.Code(r.err) != codes.Unavailable || coorderr.ReasonOf(r.err) != coorderr.NoLeader {
			t.Fatalf("after LeaderWait: %v", r.err)
		}
	})
	t.Run("the caller's deadline comes first", func(t *testing.T) {
		_, s, _, _ := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		got := read(s, ctx)
		cancel()
		if r := <-got; status.Code(r.err) != codes.Unavailable {
			t.Fatalf("after the caller gave up: %v", r.err)
		}
	})
	t.Run("forwarded and stale reads do not wait", func(t *testing.T) {
		_, s, clk, _ := setup(t)
		c := &coordinator{s: s}
		if _, err := c.GetLease(forwardedCtx(), &coordv1.GetLeaseRequest{Name: "L"}); coorderr.ReasonOf(err) != coorderr.NoLeader {
			t.Fatalf("forwarded read: %v", err)
		}
		if _, err := c.GetLease(context.Background(), &coordv1.GetLeaseRequest{Name: "L", Stale: true}); status.Code(err) != codes.NotFound {
			t.Fatalf("stale read: %v", err)
		}
		if clk.Pending() != 0 {
			t.Fatal("a read that must not wait armed a timer")
		}
	})
}

// clockConn is a member answering Cluster.Clock: its wall clock is the
// leader's fake clock + offset, read after `before` of the round trip; the
// round trip is rtt (the fake clock moves by it).
type clockConn struct {
	clk         *clock.Fake
	offset      time.Duration
	before, rtt time.Duration
	reqs        []*coordv1.ClockRequest
	err         error
}

func (c *clockConn) Invoke(_ context.Context, method string, req, reply any, _ ...grpc.CallOption) error {
	if method != coordv1.Cluster_Clock_FullMethodName {
		return status.Errorf(codes.Unimplemented, "%s", method)
	}
	c.reqs = append(c.reqs, proto.Clone(req.(proto.Message)).(*coordv1.ClockRequest))
	if c.err != nil {
		return c.err
	}
	c.clk.Advance(c.before)
	reply.(*coordv1.ClockResponse).WallTimeUnixNano = c.clk.Now().Add(c.offset).UnixNano()
	c.clk.Advance(c.rtt - c.before)
	return nil
}

func (c *clockConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	panic("no streams")
}

// gauge reads a gauge of the registry by name and node label (ok false
// when absent).
func gauge(t *testing.T, s *Server, name, node string) (float64, bool) {
	t.Helper()
	mfs, err := s.cfg.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" && l.GetValue() == node {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// The leader measures each member's offset as remote − (send + recv)/2,
// bounded by half the round trip; it tells the member its last offset on
// the next probe; an offset beyond ClockOffsetWarn is flagged (metric and
// one Warn line); Status shows the offsets; leadership's end clears them.
func TestClockOffsetProbe(t *testing.T) {
	n := newFakeNode()
	n.members = []*coordv1.Member{{Id: "n1", GrpcAddress: "n1:1"}, {Id: "n2", GrpcAddress: "n2:1"}, {Id: "n3", GrpcAddress: "n3:1"}}
	s := newTestServer(t, n)
	var logs strings.Builder
	var logMu sync.Mutex
	s.log = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s.cfg.Clock = clk
	var mu sync.Mutex // the probes of one round run concurrently; each member has its own conn
	conns := map[string]*clockConn{
		"n2:1": {clk: clk, offset: 3 * time.Second, before: 10 * time.Millisecond, rtt: 40 * time.Millisecond},
		"n3:1": {clk: clk, offset: -200 * time.Millisecond, before: 20 * time.Millisecond, rtt: 40 * time.Millisecond},
	}
	s.dial = func(addr string) (grpc.ClientConnInterface, error) {
		mu.Lock()
		defer mu.Unlock()
		return conns[addr], nil
	}
	// One member at a time, so the fake clock's moves do not interleave.
	s.probeClock(context.Background(), "n2", "n2:1")
	s.probeClock(context.Background(), "n3", "n3:1")
	n2, n3 := s.clocks.get("n2"), s.clocks.get("n3")
	// n2 read its clock 10 ms into a 40 ms round trip: the estimate is
	// 3 s − 10 ms, within the 20 ms bound.
	if n2.GetOffsetUs() != (3*time.Second-10*time.Millisecond).Microseconds() || n2.GetErrorUs() != 20_000 {
		t.Fatalf("n2: %v", n2)
	}
	if n3.GetOffsetUs() != (-200*time.Millisecond).Microseconds() || n3.GetErrorUs() != 20_000 {
		t.Fatalf("n3: %v", n3)
	}
	if v, ok := gauge(t, s, "coordd_clock_offset_seconds", "n2"); !ok || v < 2.98 || v > 3 {
		t.Fatalf("offset gauge n2 = %v %v", v, ok)
	}
	if v, _ := gauge(t, s, "coordd_clock_offset_exceeded", "n2"); v != 1 {
		t.Fatal("n2 is 3 s off and not flagged")
	}
	if v, _ := gauge(t, s, "coordd_clock_offset_exceeded", "n3"); v != 0 {
		t.Fatal("n3 is 200 ms off and flagged")
	}
	// The next probe carries the member's previous measurement.
	s.probeClock(context.Background(), "n2", "n2:1")
	if r := conns["n2:1"].reqs[1]; r.GetLeaderId() != "n1" || r.GetOffset().GetOffsetUs() != n2.GetOffsetUs() {
		t.Fatalf("second probe of n2 carried %v", r)
	}
	logMu.Lock()
	warned := strings.Count(logs.String(), "level=WARN")
	logMu.Unlock()
	if warned != 1 || !strings.Contains(logs.String(), "member=n2") {
		t.Fatalf("want one Warn line for n2:\n%s", logs.String())
	}
	// A failed probe keeps the last offset and says why.
	conns["n2:1"].err = status.Error(codes.Unavailable, "down")
	s.probeClock(context.Background(), "n2", "n2:1")
	if o := s.clocks.get("n2"); o.GetOffsetUs() != n2.GetOffsetUs() || !strings.Contains(o.GetError(), "down") {
		t.Fatalf("after a failed probe: %v", o)
	}
	// A full round records the leader itself at zero; Status lists all.
	conns["n2:1"].err = nil
	s.probeClocks(context.Background())
	st := s.withClocks(&coordv1.StatusResponse{Id: "n1", WallTimeMs: 5})
	if len(st.GetClockOffsets()) != 3 || st.GetClockOffsets()[0].GetId() != "n1" || st.GetClockOffsets()[0].GetOffsetUs() != 0 ||
		st.GetClockOffset().GetId() != "n1" {
		t.Fatalf("leader's status: %v", st)
	}
	s.clocks.clear()
	if _, ok := gauge(t, s, "coordd_clock_offset_seconds", "n2"); ok {
		t.Fatal("offsets still published after leadership ended")
	}
}

// A member keeps the offset its leader measured (from the leader it knows
// only) and shows it in its Status; Clock answers its wall clock.
func TestClockHandlerKeepsTheLeadersMeasurement(t *testing.T) {
	n := newFakeNode()
	n.setLeader(false, "n2", "n2:1")
	s := newTestServer(t, n)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s.cfg.Clock = &clock.Stepped{Base: clk}
	s.cfg.Clock.(*clock.Stepped).Step(-10 * time.Second)
	c := &cluster{s: s}
	resp, err := c.Clock(context.Background(), &coordv1.ClockRequest{LeaderId: "n3", Offset: &coordv1.ClockOffset{Id: "n1", OffsetUs: 7}})
	if err != nil || resp.GetWallTimeUnixNano() != clk.Now().Add(-10*time.Second).UnixNano() || resp.GetId() != "n1" {
		t.Fatalf("Clock: %v %v (want the wall clock)", resp, err)
	}
	if st := s.withClocks(&coordv1.StatusResponse{}); st.GetClockOffset() != nil {
		t.Fatalf("kept an offset from a node that is not the leader: %v", st.GetClockOffset())
	}
	if _, err := c.Clock(context.Background(), &coordv1.ClockRequest{LeaderId: "n2", Offset: &coordv1.ClockOffset{Id: "n1", OffsetUs: -10_000_000, ErrorUs: 300}}); err != nil {
		t.Fatal(err)
	}
	if st := s.withClocks(&coordv1.StatusResponse{}); st.GetClockOffset().GetOffsetUs() != -10_000_000 || len(st.GetClockOffsets()) != 0 {
		t.Fatalf("follower's status: %v", st)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
