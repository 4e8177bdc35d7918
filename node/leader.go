package node

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/node/leader"
)

// leaderState lives while this node is the leader. ready is closed once
// the node applied everything before its term (Barrier) and set its cluster
// clock; no proposal is stamped before that. ctx ends with the leadership
// or the node. Once ready, it is the leader.Leadership the leader services
// run on.
type leaderState struct {
	n      *Node
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan struct{}
	clock  *leaderClock
	// lastProposal is the lease time of the last stamped command, so the
	// tick service only appends ticks when the log is idle.
	lastProposal atomic.Int64
	// fetches are the long-polling Fetch calls on this leader.
	fetches fetchQueue
}

var _ leader.Leadership = (*leaderState)(nil)

func (ls *leaderState) LeaseTime() int64    { return ls.clock.leaseTime() }
func (ls *leaderState) CalendarTime() int64 { return ls.clock.calendarTime() }
func (ls *leaderState) LastStamp() int64    { return ls.lastProposal.Load() }
func (ls *leaderState) Propose(ctx context.Context, body any) (any, error) {
	return ls.n.proposeAs(ctx, ls, body)
}

// watchLeadership is the leadership lifecycle: on gaining leadership it
// starts runLeader; on losing it, it cancels everything leader-only.
// Raft's NotifyCh is buffered and always drained here.
func (n *Node) watchLeadership() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.livePings.leadership: // it turns (/livez)
		case isLeader := <-n.notifyCh:
			if old := n.leader.Swap(nil); old != nil {
				old.cancel()
			}
			n.metrics.leader.Set(b2f(isLeader))
			if !isLeader {
				n.leaderChanged()
				n.log.Info("lost leadership")
				continue
			}
			ls := n.newLeaderState()
			n.leader.Store(ls)
			n.leaderChanged()
			n.wg.Go(func() { n.runLeader(ls) })
		}
	}
}

func (n *Node) newLeaderState() *leaderState {
	ctx, cancel := context.WithCancel(n.ctx)
	return &leaderState{n: n, ctx: ctx, cancel: cancel, ready: make(chan struct{})}
}

// runLeader establishes leadership (Barrier, then the leader clock), then
// runs the leader services (node/leader: the node's own and those the API
// registered) until leadership ends, and returns once they all stopped.
func (n *Node) runLeader(ls *leaderState) {
	start := n.clock.Now()
	// Apply everything committed by earlier leaders before stamping anything:
	// lease time continues from the FSM's.
	if err := n.await(ls.ctx, n.raft.Barrier(0)); err != nil {
		n.log.Warn("barrier after election failed; waiting for the next election", "err", err)
		return
	}
	if ls.ctx.Err() != nil {
		return
	}
	base := n.fsm.LeaseTime()
	if base == 0 {
		// A new cluster: its clock starts at this node's wall clock, once.
		base = clock.Wall(n.clock).UnixMilli()
	}
	ls.clock = newLeaderClock(n.clock, base, n.fsm.CalendarTime())
	close(ls.ready)
	cal := ls.clock.calendarTime()
	n.log.Info("leadership established", "term", n.raft.CurrentTerm(), "lease_time", base,
		"calendar_time", cal, "barrier", clock.Since(n.clock, start).Round(time.Millisecond))
	if behind := cal - clock.Wall(n.clock).UnixMilli(); behind > 0 {
		// This node's wall clock reads behind the last calendar stamp (a
		// predecessor's clock was ahead, or this one was stepped back):
		// calendar time holds until the wall clock passes it.
		n.log.Warn("wall clock is behind calendar time: calendar time holds until it catches up",
			"behind", time.Duration(behind)*time.Millisecond)
	}
	n.services.Lead(ls.ctx, ls)
}

// CalendarTime is calendar time now (Unix ms): on the ready leader, what it
// would stamp on a command now (its wall clock, never below its last stamp
// nor the FSM's calendar time); on any other node, the calendar time its
// FSM applied last. It never decreases on a node while it leads. The
// leader's calendar loops (the API's absence monitor, the job dispatcher)
// and calendar reads use it: a lease is never judged on it.
func (n *Node) CalendarTime() int64 {
	if ls := n.leader.Load(); ls != nil {
		select {
		case <-ls.ready:
			return ls.clock.calendarTime()
		default:
		}
	}
	return n.fsm.CalendarTime()
}

// LeaderCalendarTime is the ready leader's calendar time now, waiting while
// this node is a leader that is not ready yet (its clock is not set until
// it applied its predecessors' entries); a *NotLeaderError elsewhere. What
// the leader resolves against the calendar (a submit's delay_ms) uses it:
// CalendarTime on a leader not ready yet is the FSM's last stamp, in the past.
func (n *Node) LeaderCalendarTime(ctx context.Context) (int64, error) {
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return 0, err
	}
	return ls.clock.calendarTime(), nil
}

// times is lease time and calendar time now, as one pair: on the ready
// leader its clocks (what it would stamp now), elsewhere the FSM's last
// applied stamps.
func (n *Node) times() (lease, calendar int64) {
	if ls := n.leader.Load(); ls != nil {
		select {
		case <-ls.ready:
			return ls.clock.leaseTime(), ls.clock.calendarTime()
		default:
		}
	}
	return n.fsm.LeaseTime(), n.fsm.CalendarTime()
}

// RegisterLeaderServices adds services that run while this node leads,
// under the same lifecycle as the node's own (node/leader): started on
// every ready leadership (at once on the current one), stopped when it
// ends. api.Serve registers the API's this way.
func (n *Node) RegisterLeaderServices(svcs ...leader.Service) { n.services.Register(svcs...) }

// LeaderServices names the services that run while this node leads.
func (n *Node) LeaderServices() []string { return n.services.Names() }

// readyLeader returns the leader state once it is ready, or a
// *NotLeaderError.
func (n *Node) readyLeader(ctx context.Context) (*leaderState, error) {
	ls := n.leader.Load()
	if ls == nil {
		return nil, n.notLeader()
	}
	select {
	case <-ls.ready:
		return ls, nil
	case <-ls.ctx.Done():
		return nil, n.notLeader()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// LeaderContext returns a context that ends when this node's current
// leadership does (or the node stops), once the leader is ready; or a
// *NotLeaderError. Streams that live on the leader (KeepAlive) end with it.
func (n *Node) LeaderContext(ctx context.Context) (context.Context, error) {
	ls, err := n.readyLeader(ctx)
	if err != nil {
		return nil, err
	}
	return ls.ctx, nil
}

// Leader returns the id and gRPC address of the leader when it is another
// node ("" when unknown, or when this node leads).
func (n *Node) Leader() (id, addr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" || lid == raft.ServerID(n.cfg.ID) {
		return "", ""
	}
	return string(lid), n.memberAddr(string(lid))
}

// notLeader describes where the leader is, as far as this node knows.
func (n *Node) notLeader() error {
	id, addr := n.Leader()
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// memberAddr is the gRPC address of a member, from the replicated table.
func (n *Node) memberAddr(id string) string {
	for _, m := range n.fsm.Members() {
		if m.ID == id {
			return m.GRPCAddress
		}
	}
	return ""
}

// proposeAs proposes under a known leadership. The command is stamped now
// and handed to the proposer, which commits it, possibly in one log entry
// with others (proposer.go). A rejection comes back as the error.
func (n *Node) proposeAs(ctx context.Context, ls *leaderState, body any) (any, error) {
	wait, err := n.proposeStart(ctx, ls, body)
	if err != nil {
		return nil, err
	}
	return wait(ctx)
}

// proposeStart stamps body and hands it to the proposer; wait returns its
// result. Commands started one after the other apply in that order (the
// fetch pump relies on it to serve long polls in arrival order).
func (n *Node) proposeStart(ctx context.Context, ls *leaderState, body any) (wait func(context.Context) (any, error), err error) {
	waits, err := n.proposeGroup(ctx, ls, body)
	if err != nil {
		return nil, err
	}
	return waits[0], nil
}

// proposeGroup stamps bodies and hands them to the proposer as one unit:
// they apply in one entry, in order. It returns a wait function per body.
func (n *Node) proposeGroup(ctx context.Context, ls *leaderState, bodies ...any) ([]func(context.Context) (any, error), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ps := make([]*proposal, len(bodies))
	for i, body := range bodies {
		cmd := ls.clock.stamp().envelope(body)
		ls.lastProposal.Store(cmd.GetNowMs())
		ps[i] = &proposal{cmd: cmd, done: make(chan proposalResult, 1)}
	}
	ps[0].with = ps[1:]
	start := n.clock.Now()
	if _, err := n.enqueueGroup(ctx, ps[0]); err != nil {
		for _, p := range ps {
			n.metrics.proposed(p.cmd.GetType(), "error").Inc()
		}
		return nil, err
	}
	waits := make([]func(context.Context) (any, error), len(ps))
	for i, p := range ps {
		waits[i] = n.waitFor(ls, p, start)
	}
	return waits, nil
}

// waitFor returns the function that waits for an enqueued proposal's
// result, counts it and wakes the queue's loops.
func (n *Node) waitFor(ls *leaderState, p *proposal, start time.Time) func(context.Context) (any, error) {
	cmd := p.cmd
	return func(ctx context.Context) (any, error) {
		resp, err := n.result(ctx, p)
		// Any command may have changed the queue (each one first applies
		// what its calendar stamp made due or lapsed).
		n.queueChanged()
		if err != nil {
			n.metrics.proposed(cmd.GetType(), "error").Inc()
			return nil, err
		}
		n.metrics.applyLatency.Observe(clock.Since(n.clock, start).Seconds())
		if rej, ok := resp.(*fsm.Rejection); ok {
			n.metrics.proposed(cmd.GetType(), "rejected").Inc()
			return nil, rej
		}
		n.metrics.proposed(cmd.GetType(), "ok").Inc()
		return resp, nil
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// await waits for a Raft future, but not past shutdown or ctx (a future
// still queued when Raft shuts down is never answered), and translates
// Raft's errors into the node's. The goroutine that blocks on the future
// (Raft's futures offer nothing to select on) is counted in n.futures:
// Close waits for those Raft still answers and logs the ones it never will.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	n.futures.Add(1)
	go func() {
		defer n.futures.Add(-1)
		done <- f.Error()
	}()
	select {
	case err := <-done:
		return n.translate(err)
	case <-n.ctx.Done():
		return ErrShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
}
