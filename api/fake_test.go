package api

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// fakeNode is the node in the API's unit tests: a real FSM applied in
// process at a fixed lease time, with leadership set by the test.
// Methods the tests do not need panic (the embedded nil interface).
type fakeNode struct {
	Node
	id         string
	leading    bool
	leaderID   string
	leaderAddr string
	now        int64 // lease time
	calendar   int64 // calendar time
	fsm        *fsm.FSM

	mu        sync.Mutex
	leaderSig chan struct{} // LeaderChanged
	members   []*coordv1.Member
	fetchWait time.Duration
	acquires  []*fsmv1.Acquire
	waits     int
	block     chan struct{} // waiting acquires block on it
	transfer  error
	// beforePropose, when set, runs before each proposal is applied (a
	// concurrent change landing between a handler's check and its apply).
	beforePropose func(body any)
}

func newFakeNode() *fakeNode {
	return &fakeNode{id: "n1", leading: true, now: 1_000_000, calendar: 1_700_000_000_000, fsm: fsm.New()}
}

func (f *fakeNode) ID() string                       { return f.id }
func (f *fakeNode) TTLRange() (lo, hi time.Duration) { return time.Second, time.Hour }
func (f *fakeNode) Leading() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leading
}

func (f *fakeNode) Leader() (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leaderID, f.leaderAddr
}

func (f *fakeNode) LeaderChanged() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaderSig == nil {
		f.leaderSig = make(chan struct{})
	}
	return f.leaderSig
}

// setLeader changes the leader this node knows, as an election would.
func (f *fakeNode) setLeader(leading bool, id, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leading, f.leaderID, f.leaderAddr = leading, id, addr
	if f.leaderSig != nil {
		close(f.leaderSig)
		f.leaderSig = nil
	}
}

func (f *fakeNode) Members() ([]*coordv1.Member, error) { return f.members, nil }
func (f *fakeNode) IsMember(id string) bool             { return id == "n1" || id == "n2" }

func (f *fakeNode) LeaderContext(ctx context.Context) (context.Context, error) {
	if !f.leading {
		return nil, &notLeaderError{id: f.leaderID, addr: f.leaderAddr}
	}
	return ctx, nil
}

func (f *fakeNode) CalendarTime() int64 { return f.calendar }

func (f *fakeNode) LeaderCalendarTime(context.Context) (int64, error) { return f.calendar, nil }

func (f *fakeNode) apply(body any) any {
	return f.fsm.ApplyCommand(fsm.EnvelopeAt(f.now, f.calendar, body))
}

// Fetch applies the fetch at once (the node's long polls are its own
// tests'); it records the wait it was given.
func (f *fakeNode) Fetch(ctx context.Context, cmd *fsmv1.FetchJobs, wait time.Duration) (*fsm.FetchResult, error) {
	f.mu.Lock()
	f.fetchWait = wait
	f.mu.Unlock()
	return commit[*fsm.FetchResult](f, cmd)
}

// commit applies body on the leader and types its result as R; a
// rejection is the error.
func commit[R any](f *fakeNode, body any) (R, error) {
	var zero R
	res, err := f.propose(body)
	if err != nil {
		return zero, err
	}
	return res.(R), nil
}

func (f *fakeNode) propose(body any) (any, error) {
	if !f.leading {
		return nil, &notLeaderError{id: f.leaderID, addr: f.leaderAddr}
	}
	if hook := f.beforePropose; hook != nil {
		hook(body)
	}
	res := f.apply(body)
	if rej, ok := res.(*fsm.Rejection); ok {
		return nil, rej
	}
	return res, nil
}

func (f *fakeNode) Acquire(ctx context.Context, cmd *fsmv1.Acquire, wait bool) (*fsm.AcquireResult, error) {
	f.mu.Lock()
	f.acquires = append(f.acquires, proto.Clone(cmd).(*fsmv1.Acquire))
	if wait {
		f.waits++
	}
	block := f.block
	f.mu.Unlock()
	if wait && block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return commit[*fsm.AcquireResult](f, cmd)
}

func (f *fakeNode) Renew(_ context.Context, c *fsmv1.Renew) (*fsm.LeaseResult, error) {
	return commit[*fsm.LeaseResult](f, c)
}

func (f *fakeNode) Release(_ context.Context, c *fsmv1.Release) (*fsm.ReleaseResult, error) {
	return commit[*fsm.ReleaseResult](f, c)
}

func (f *fakeNode) ClaimWindow(_ context.Context, c *fsmv1.ClaimWindow) (*fsm.ClaimResult, error) {
	return commit[*fsm.ClaimResult](f, c)
}

func (f *fakeNode) CompleteWindow(_ context.Context, c *fsmv1.CompleteWindow) (*fsm.WindowResult, error) {
	return commit[*fsm.WindowResult](f, c)
}

func (f *fakeNode) FencedCommit(_ context.Context, c *fsmv1.FencedCommit) (*fsm.CommitResult, error) {
	return commit[*fsm.CommitResult](f, c)
}

func (f *fakeNode) SubmitJobs(_ context.Context, c *fsmv1.SubmitJobs) (*fsm.SubmitResult, error) {
	return commit[*fsm.SubmitResult](f, c)
}

func (f *fakeNode) SetQueueTarget(_ context.Context, c *fsmv1.SetQueueTarget) (*fsm.QueueTarget, error) {
	return commit[*fsm.QueueTarget](f, c)
}

func (f *fakeNode) SetQueueLimits(_ context.Context, c *fsmv1.SetQueueLimits) (*fsm.QueueLimits, error) {
	return commit[*fsm.QueueLimits](f, c)
}

func (f *fakeNode) PauseQueue(_ context.Context, c *fsmv1.PauseQueue) (*fsm.PauseResult, error) {
	return commit[*fsm.PauseResult](f, c)
}

func (f *fakeNode) StartBulkJobs(_ context.Context, c *fsmv1.StartBulkJobs) (*fsm.BulkResult, error) {
	return commit[*fsm.BulkResult](f, c)
}

func (f *fakeNode) DeleteJobs(_ context.Context, c *fsmv1.DeleteJobs) (fsm.JobResults, error) {
	return commit[fsm.JobResults](f, c)
}

func (f *fakeNode) CancelJobs(_ context.Context, c *fsmv1.CancelJobs) (fsm.JobResults, error) {
	return commit[fsm.JobResults](f, c)
}

func (f *fakeNode) RetryJobs(_ context.Context, c *fsmv1.RetryJobs) (fsm.JobResults, error) {
	return commit[fsm.JobResults](f, c)
}

func (f *fakeNode) HeartbeatJobs(_ context.Context, c *fsmv1.HeartbeatJobs) (fsm.JobResults, error) {
	return commit[fsm.JobResults](f, c)
}

func (f *fakeNode) CompleteJobs(_ context.Context, c *fsmv1.CompleteJobs) (fsm.JobResults, error) {
	return commit[fsm.JobResults](f, c)
}

func (f *fakeNode) FailJobs(_ context.Context, c *fsmv1.FailJobs) (fsm.JobResults, error) {
	return commit[fsm.JobResults](f, c)
}

func (f *fakeNode) PutSchedule(_ context.Context, c *fsmv1.PutSchedule) (*fsm.ScheduleResult, error) {
	return commit[*fsm.ScheduleResult](f, c)
}

func (f *fakeNode) PauseSchedule(_ context.Context, c *fsmv1.PauseSchedule) (*fsm.ScheduleResult, error) {
	return commit[*fsm.ScheduleResult](f, c)
}

func (f *fakeNode) TriggerSchedule(_ context.Context, c *fsmv1.TriggerSchedule) (*fsm.TriggerResult, error) {
	return commit[*fsm.TriggerResult](f, c)
}

func (f *fakeNode) DeleteSchedule(_ context.Context, c *fsmv1.DeleteSchedule) (*fsm.ScheduleResult, error) {
	return commit[*fsm.ScheduleResult](f, c)
}

func (f *fakeNode) Read(_ context.Context, stale bool) (*fsm.FSM, int64, error) {
	if !stale && !f.leading {
		return nil, 0, &notLeaderError{id: f.leaderID, addr: f.leaderAddr}
	}
	return f.fsm, f.now, nil
}

func (f *fakeNode) TransferLeadership(context.Context, string) (string, error) {
	return "n2", f.transfer
}

// newTestServer is an API server on a fake node that does not listen:
// tests call its handlers directly.
func newTestServer(t *testing.T, n *fakeNode) *Server {
	t.Helper()
	cfg := Config{GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.withDefaults()
	cfg.Metrics = prometheus.NewRegistry()
	s := newServer(cfg, n)
	s.dial = func(addr string) (grpc.ClientConnInterface, error) {
		t.Fatalf("dialled %s", addr)
		return nil, nil
	}
	return s
}

// recordingConn stands for a connection to the leader: it records what is
// forwarded and answers with reply.
type recordingConn struct {
	addr   string
	method string
	md     metadata.MD
	reply  proto.Message
}

func (c *recordingConn) Invoke(ctx context.Context, method string, _, reply any, _ ...grpc.CallOption) error {
	c.method = method
	c.md, _ = metadata.FromOutgoingContext(ctx)
	proto.Merge(reply.(proto.Message), c.reply)
	return nil
}

func (c *recordingConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	panic("not forwarded")
}

var _ grpc.ClientConnInterface = (*recordingConn)(nil)

func forwardedCtx() context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(forwardedKey, "n3"))
}
