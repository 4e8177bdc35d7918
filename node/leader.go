package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// leaderState lives while this node is the leader. ready is closed once
// the node applied everything before its term (Barrier) and set its cluster
// clock; no proposal is stamped before that.
type leaderState struct {
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan struct{}
	clock  *clusterClock
	// lastProposal is the cluster time of the last stamped command, so the
	// ticker only appends ticks when the log is idle.
	lastProposal atomic.Int64
}

// watchLeadership is the leadership lifecycle: on gaining leadership it
// starts establishLeadership; on losing it, it cancels everything
// leader-only. Raft's NotifyCh is buffered and always drained here.
func (s *Server) watchLeadership() {
	for {
		select {
		case <-s.stop:
			return
		case isLeader := <-s.notifyCh:
			if old := s.leader.Swap(nil); old != nil {
				old.cancel()
			}
			s.metrics.leader.Set(b2f(isLeader))
			if !isLeader {
				s.monitor.clear()
				s.log.Info("lost leadership")
				continue
			}
			ctx, cancel := context.WithCancel(context.Background())
			ls := &leaderState{ctx: ctx, cancel: cancel, ready: make(chan struct{})}
			s.leader.Store(ls)
			s.goRun(func() { s.runLeader(ls) })
		}
	}
}

func (s *Server) runLeader(ls *leaderState) {
	start := time.Now()
	// Apply everything committed by earlier leaders before stamping anything:
	// the cluster clock continues from the FSM's clock.
	if err := s.await(ls.ctx, s.raft.Barrier(0)); err != nil {
		s.log.Warn("barrier after election failed; waiting for the next election", "err", err)
		return
	}
	if ls.ctx.Err() != nil {
		return
	}
	base := s.fsm.Clock()
	if base == 0 {
		// A new cluster: its clock starts at this node's wall clock, once.
		base = s.cfg.Clock.Now().UnixMilli()
	}
	ls.clock = newClusterClock(s.cfg.Clock, base)
	close(ls.ready)
	s.log.Info("leadership established", "term", s.raft.CurrentTerm(), "cluster_time", base,
		"barrier", time.Since(start).Round(time.Millisecond))
	// A tick at once moves the followers' clocks to this term's base.
	if _, err := s.proposeAs(ls.ctx, ls, &fsmv1.Tick{}); err != nil {
		s.log.Warn("first tick failed", "err", err)
	}

	tick := time.NewTicker(s.cfg.TickInterval / 2)
	defer tick.Stop()
	prune := time.NewTicker(s.cfg.PruneInterval)
	defer prune.Stop()
	mon := time.NewTicker(s.cfg.MonitorInterval)
	defer mon.Stop()
	for {
		select {
		case <-ls.ctx.Done():
			return
		case <-tick.C:
			if ls.clock.current()-ls.lastProposal.Load() >= s.cfg.TickInterval.Milliseconds() {
				if _, err := s.proposeAs(ls.ctx, ls, &fsmv1.Tick{}); err != nil && ls.ctx.Err() == nil {
					s.log.Warn("tick failed", "err", err)
				}
			}
		case <-mon.C:
			s.observeAbsence(s.computeAbsence(ls.clock.current()))
		case <-prune.C:
			cutoff := ls.clock.current() - s.cfg.Retention.Milliseconds()
			res, err := s.proposeAs(ls.ctx, ls, &fsmv1.Prune{CutoffMs: cutoff})
			if err != nil {
				s.log.Warn("prune failed", "err", err)
				continue
			}
			if r := res.(*fsm.PruneResult); r.Windows+r.Idempotency > 0 {
				s.log.Info("retention pruned records", "windows", r.Windows, "idempotency_records", r.Idempotency,
					"older_than", s.cfg.Retention)
			}
		}
	}
}

// readyLeader returns the leader state once it is ready, or a notLeaderError.
func (s *Server) readyLeader(ctx context.Context) (*leaderState, error) {
	ls := s.leader.Load()
	if ls == nil {
		return nil, s.notLeader()
	}
	select {
	case <-ls.ready:
		return ls, nil
	case <-ls.ctx.Done():
		return nil, s.notLeader()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// notLeader describes where the leader is, as far as this node knows.
func (s *Server) notLeader() error {
	_, id := s.raft.LeaderWithID()
	if id == "" || id == raft.ServerID(s.cfg.ID) {
		return &notLeaderError{}
	}
	return &notLeaderError{leaderID: string(id), leaderAddr: s.memberAddr(string(id))}
}

// memberAddr is the gRPC address of a member, from the replicated table.
func (s *Server) memberAddr(id string) string {
	for _, m := range s.fsm.Members() {
		if m.ID == id {
			return m.GRPCAddress
		}
	}
	return ""
}

// propose stamps a command with the cluster time, replicates it, and
// returns the FSM's result; a rejection comes back as the error.
func (s *Server) propose(ctx context.Context, body any) (any, error) {
	ls, err := s.readyLeader(ctx)
	if err != nil {
		return nil, err
	}
	return s.proposeAs(ctx, ls, body)
}

// proposeAs proposes under a known leadership (leader-only loops). The
// command is stamped now and handed to the proposer, which commits it,
// possibly in one log entry with others (proposer.go).
func (s *Server) proposeAs(ctx context.Context, ls *leaderState, body any) (any, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= 0 {
		return nil, context.DeadlineExceeded
	}
	cmd := fsm.Envelope(ls.clock.stamp(), body)
	ls.lastProposal.Store(cmd.GetNowMs())
	start := time.Now()
	resp, err := s.submit(ctx, cmd)
	if err != nil {
		s.metrics.proposed(cmd.GetType(), "error").Inc()
		return nil, err
	}
	s.metrics.applyLatency.Observe(time.Since(start).Seconds())
	if rej, ok := resp.(*fsm.Rejection); ok {
		s.metrics.proposed(cmd.GetType(), "rejected").Inc()
		return nil, rej
	}
	s.metrics.proposed(cmd.GetType(), "ok").Inc()
	return resp, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// await waits for a Raft future, but not past shutdown or ctx: a future
// still queued when Raft shuts down is never answered.
func (s *Server) await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-s.stop:
		return raft.ErrRaftShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
}
