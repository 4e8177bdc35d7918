package api

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/node/leader"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Clock offsets (clocks.go). Nothing the cluster decides reads a member's
// wall clock: leases are judged on lease time, the calendar is the
// leader's stamp. A wrong clock still matters (it becomes the calendar
// when its node leads, and the people reading logs trust timestamps), so
// the leader measures it: every ClockProbeInterval it calls Cluster.Clock
// on every member and takes
//
//	offset = member's wall clock − (leader's wall at send + round trip / 2)
//
// with half the round trip as the error bound (NTP's estimate without its
// filtering). The request carries the member's previous measurement, so
// every node's Status shows its own offset; the leader's shows everyone's.

// clocks holds the measurements: on the leader, every member's; on any
// node, its own as the leader last told it.
type clocks struct {
	mu       sync.Mutex
	offsets  map[string]*coordv1.ClockOffset // leader only: by member id
	exceeded map[string]bool                 // leader only: members beyond ClockOffsetWarn
	own      *coordv1.ClockOffset            // this node's, from the leader's last probe
	ownFrom  string                          // the leader that measured own

	offset      *prometheus.GaugeVec
	offsetError *prometheus.GaugeVec
	exceededG   *prometheus.GaugeVec
}

func newClocks(reg *prometheus.Registry) *clocks {
	c := &clocks{
		offsets:  map[string]*coordv1.ClockOffset{},
		exceeded: map[string]bool{},
		offset: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_clock_offset_seconds",
			Help: "A member's wall clock minus the leader's, as the leader measured it last (leader only)."}, []string{"node"}),
		offsetError: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_clock_offset_error_seconds",
			Help: "Bound of the measurement error of coordd_clock_offset_seconds: half the probe's round trip (leader only)."}, []string{"node"}),
		exceededG: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coordd_clock_offset_exceeded",
			Help: "1 when a member's clock offset from the leader is beyond the warning limit (500 ms by default; leader only)."}, []string{"node"}),
	}
	reg.MustRegister(c.offset, c.offsetError, c.exceededG)
	return c
}

// clockProbe is a leader service (node/leader): while this node leads it
// measures every member's clock each ClockProbeInterval; the measurements
// and gauges go when leadership ends.
type clockProbe struct{ s *Server }

func (clockProbe) Name() string { return "clock-probe" }

func (p clockProbe) Run(ctx context.Context, _ leader.Leadership) error {
	s := p.s
	defer s.clocks.clear()
	s.probeClocks(ctx)
	return leader.Every(ctx, s.cfg.Clock, s.cfg.ClockProbeInterval, func() { s.probeClocks(ctx) })
}

// probeClocks measures every other member once, concurrently, and records
// this node (the leader) at zero.
func (s *Server) probeClocks(ctx context.Context) {
	members, err := s.node.Members()
	if err != nil {
		return
	}
	self := s.node.ID()
	s.recordOffset(&coordv1.ClockOffset{Id: self, MeasuredAt: timestamppb.New(clock.Wall(s.cfg.Clock))})
	var wg sync.WaitGroup
	ids := map[string]bool{self: true}
	for _, m := range members {
		ids[m.GetId()] = true
		if m.GetId() == self || m.GetGrpcAddress() == "" {
			continue
		}
		wg.Go(func() { s.probeClock(ctx, m.GetId(), m.GetGrpcAddress()) })
	}
	wg.Wait()
	s.clocks.retain(ids)
}

// probeClock measures one member's offset.
func (s *Server) probeClock(ctx context.Context, id, addr string) {
	prev := s.clocks.get(id)
	fail := func(err error) {
		out := &coordv1.ClockOffset{Id: id}
		if prev != nil {
			out = proto.Clone(prev).(*coordv1.ClockOffset) // the last offset stays, with why it is not newer
		}
		out.Error = err.Error()
		s.clocks.mu.Lock()
		s.clocks.offsets[id] = out
		s.clocks.mu.Unlock()
	}
	conn, err := s.dial(addr)
	if err != nil {
		fail(err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ClockProbeInterval)
	defer cancel()
	sent := s.cfg.Clock.Now() // elapsed time: monotonic on a real clock
	sentWall := clock.Wall(s.cfg.Clock)
	resp, err := coordv1.NewClusterClient(conn).Clock(pctx, &coordv1.ClockRequest{LeaderId: s.node.ID(), Offset: prev})
	if err != nil {
		if ctx.Err() == nil {
			fail(err)
		}
		return
	}
	rtt := clock.Since(s.cfg.Clock, sent)
	mid := sentWall.Add(rtt / 2)
	offset := time.Unix(0, resp.GetWallTimeUnixNano()).Sub(mid)
	s.recordOffset(&coordv1.ClockOffset{Id: id, Offset: durationpb.New(offset), OffsetError: durationpb.New(rtt / 2),
		MeasuredAt: timestamppb.New(mid)})
}

// recordOffset stores a measurement, publishes it and logs a member whose
// offset went beyond ClockOffsetWarn (and when it came back).
func (s *Server) recordOffset(o *coordv1.ClockOffset) {
	c := s.clocks
	offset := pbtime.Duration(o.GetOffset())
	errBound := pbtime.Duration(o.GetOffsetError())
	over := offset.Abs() > s.cfg.ClockOffsetWarn
	// The gauges and the log line first, the measurement last: whoever
	// reads the measurement (get) then sees them too. One measurement of a
	// member at a time (the lock), so the warning is said once.
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.exceeded[o.GetId()]
	c.exceeded[o.GetId()] = over
	c.offset.WithLabelValues(o.GetId()).Set(offset.Seconds())
	c.offsetError.WithLabelValues(o.GetId()).Set(errBound.Seconds())
	c.exceededG.WithLabelValues(o.GetId()).Set(b2f(over))
	switch {
	case over && !was:
		s.log.Warn("a member's wall clock is off the leader's; it becomes calendar time if that member leads",
			"member", o.GetId(), "offset", offset, "error_bound", errBound, "limit", s.cfg.ClockOffsetWarn)
	case !over && was:
		s.log.Info("a member's wall clock is back within the limit", "member", o.GetId(), "offset", offset,
			"error_bound", errBound, "limit", s.cfg.ClockOffsetWarn)
	}
	c.offsets[o.GetId()] = o
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *clocks) get(id string) *coordv1.ClockOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offsets[id]
}

// retain drops members that left the configuration.
func (c *clocks) retain(ids map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.offsets {
		if !ids[id] {
			delete(c.offsets, id)
			delete(c.exceeded, id)
			c.offset.DeleteLabelValues(id)
			c.offsetError.DeleteLabelValues(id)
			c.exceededG.DeleteLabelValues(id)
		}
	}
}

// all is the leader's measurements, by id.
func (c *clocks) all() []*coordv1.ClockOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*coordv1.ClockOffset, 0, len(c.offsets))
	for _, o := range c.offsets {
		out = append(out, proto.Clone(o).(*coordv1.ClockOffset))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

// clear forgets the leader's measurements when leadership ends: only the
// leader reports offsets.
func (c *clocks) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offsets = map[string]*coordv1.ClockOffset{}
	c.exceeded = map[string]bool{}
	c.offset.Reset()
	c.offsetError.Reset()
	c.exceededG.Reset()
}

// setOwn records this node's offset as the leader measured it.
func (c *clocks) setOwn(leader string, o *coordv1.ClockOffset) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.own, c.ownFrom = proto.Clone(o).(*coordv1.ClockOffset), leader
}

func (c *clocks) ownFromLeader(leader string) *coordv1.ClockOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.own == nil || c.ownFrom != leader {
		return nil
	}
	return proto.Clone(c.own).(*coordv1.ClockOffset)
}

// Clock answers this node's wall clock, and keeps the offset the leader
// measured last (from the leader this node knows, only).
func (c *cluster) Clock(_ context.Context, req *coordv1.ClockRequest) (*coordv1.ClockResponse, error) {
	s := c.s
	if o := req.GetOffset(); o != nil && o.GetId() == s.node.ID() {
		if id, _ := s.node.Leader(); id != "" && id == req.GetLeaderId() {
			s.clocks.setOwn(id, o)
		}
	}
	return &coordv1.ClockResponse{Id: s.node.ID(), WallTimeUnixNano: clock.Wall(s.cfg.Clock).UnixNano()}, nil
}

// withClocks adds the offsets to this node's status: its own (zero on the
// leader), and on the leader every member's.
func (s *Server) withClocks(st *coordv1.StatusResponse) *coordv1.StatusResponse {
	if s.node.Leading() {
		st.ClockOffsets = s.clocks.all()
		st.ClockOffset = &coordv1.ClockOffset{Id: s.node.ID(), MeasuredAt: pbtime.At(st.GetWallTimeMs())}
		return st
	}
	if id, _ := s.node.Leader(); id != "" {
		st.ClockOffset = s.clocks.ownFromLeader(id)
	}
	return st
}
