package queue

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/testutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// fakeQueue is an in-process coord.v1.Queue (and Coordinator.FencedCommit)
// on loopback, in the test's virtual time: it hands out the jobs the test
// adds, keeps each attempt's server-side deadline (fetch or heartbeat time
// + visibility timeout) and records every call.
type fakeQueue struct {
	coordv1.UnimplementedQueueServer
	coordv1.UnimplementedCoordinatorServer
	clk *clock.Fake

	mu        sync.Mutex
	nextID    uint64
	jobs      map[uint64]*coordv1.QueueJob
	keys      map[[2]string]*coordv1.QueueJob // by queue and unique key
	avail     map[string][]uint64
	added     chan struct{} // closed and replaced when jobs are added
	deadlines map[ref]time.Time
	fetchReqs []*coordv1.QueueFetchRequest
	submits   []*coordv1.QueueSubmitRequest
	completed []*coordv1.QueueCompleteRequest
	failed    []*coordv1.QueueFailRequest

	fetched    chan *coordv1.QueueFetchRequest // a Fetch arrived
	fetchEnded chan error                      // a Fetch ended by its context
	heartbeats chan hbCall
	completes  chan *coordv1.QueueCompleteRequest
	fails      chan *coordv1.QueueFailRequest
	commits    chan *coordv1.FencedCommitRequest

	// Scripts; nil: the default answer.
	onHeartbeat func(ctx context.Context, r *coordv1.QueueHeartbeatRequest) (*coordv1.QueueHeartbeatResponse, error)
	onCommit    func(r *coordv1.FencedCommitRequest) (*coordv1.FencedCommitResponse, error)
	onSubmit    func(r *coordv1.QueueSubmitRequest) error
	// beforeSubmit runs first in every Submit, outside f.mu (a test holds
	// calls there); an error is the answer and nothing is recorded.
	beforeSubmit func(ctx context.Context, r *coordv1.QueueSubmitRequest) error
	// lostAfterApply: that many Submits apply their jobs and then answer
	// LEADERSHIP_LOST (the outcome is unknown to the caller).
	lostAfterApply int
	// maxRun > 0 gives every attempt handed out a run_until (max_run).
	maxRun time.Duration
}

type hbCall struct {
	req *coordv1.QueueHeartbeatRequest
	at  time.Time
}

func newFakeQueue(clk *clock.Fake) *fakeQueue {
	return &fakeQueue{clk: clk, jobs: map[uint64]*coordv1.QueueJob{}, keys: map[[2]string]*coordv1.QueueJob{}, avail: map[string][]uint64{}, added: make(chan struct{}),
		deadlines: map[ref]time.Time{}, fetched: make(chan *coordv1.QueueFetchRequest, 100), fetchEnded: make(chan error, 100),
		heartbeats: make(chan hbCall, 100), completes: make(chan *coordv1.QueueCompleteRequest, 100),
		fails: make(chan *coordv1.QueueFailRequest, 100), commits: make(chan *coordv1.FencedCommitRequest, 100)}
}

// add makes a job available in queue.
func (f *fakeQueue) add(queue, kind string, args []byte, vt time.Duration) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := f.nextID
	f.jobs[id] = &coordv1.QueueJob{Id: id, Queue: queue, Kind: kind, Args: args, State: coordv1.JobState_JOB_STATE_AVAILABLE,
		MaxAttempts: 25, VisibilityTimeout: durationpb.New(vt), RunAt: pbtime.At(f.clk.Now().UnixMilli())}
	f.avail[queue] = append(f.avail[queue], id)
	close(f.added)
	f.added = make(chan struct{})
	return id
}

// deadline is the server-side visibility deadline of an attempt.
func (f *fakeQueue) deadline(id uint64, attempt uint32) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadlines[ref{id, attempt}]
}

// logCall appends r to *log (under f.mu) and announces it on ch.
func logCall[R any](f *fakeQueue, log *[]R, ch chan<- R, r R) {
	f.mu.Lock()
	*log = append(*log, r)
	f.mu.Unlock()
	ch <- r
}

func (f *fakeQueue) Fetch(ctx context.Context, r *coordv1.QueueFetchRequest) (*coordv1.QueueFetchResponse, error) {
	logCall(f, &f.fetchReqs, f.fetched, r)
	for {
		f.mu.Lock()
		var out []*coordv1.ClaimedJob
		for _, q := range r.GetQueues() {
			for len(f.avail[q]) > 0 && len(out) < int(r.GetMax()) {
				id := f.avail[q][0]
				f.avail[q] = f.avail[q][1:]
				j := f.jobs[id]
				j.Attempts++
				j.State = coordv1.JobState_JOB_STATE_RUNNING
				now := f.clk.Now()
				f.deadlines[ref{id, j.Attempts}] = now.Add(time.Duration(j.GetVisibilityTimeoutMs()) * time.Millisecond)
				out = append(out, &coordv1.ClaimedJob{Job: j, Attempt: &coordv1.JobAttempt{Number: j.Attempts, WorkerId: r.GetWorkerId(),
					StartedAt: pbtime.FromTime(now), Token: Token(id, j.Attempts)}})
				if f.maxRun > 0 {
					out[len(out)-1].Attempt.RunUntil = pbtime.FromTime(now.Add(f.maxRun))
				}
			}
		}
		added := f.added
		f.mu.Unlock()
		if len(out) > 0 {
			return &coordv1.QueueFetchResponse{Jobs: out}, nil
		}
		select {
		case <-added:
		case <-ctx.Done():
			f.fetchEnded <- ctx.Err()
			return nil, ctx.Err()
		}
	}
}

func (f *fakeQueue) Heartbeat(ctx context.Context, r *coordv1.QueueHeartbeatRequest) (*coordv1.QueueHeartbeatResponse, error) {
	f.heartbeats <- hbCall{req: r, at: f.clk.Now()}
	if f.onHeartbeat != nil {
		return f.onHeartbeat(ctx, r)
	}
	return f.ackHeartbeat(r), nil
}

// ackHeartbeat extends every attempt of r.
func (f *fakeQueue) ackHeartbeat(r *coordv1.QueueHeartbeatRequest) *coordv1.QueueHeartbeatResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &coordv1.QueueHeartbeatResponse{}
	for _, a := range r.GetAttempts() {
		d := f.clk.Now().Add(time.Duration(f.jobs[a.GetJobId()].GetVisibilityTimeoutMs()) * time.Millisecond)
		f.deadlines[ref{a.GetJobId(), a.GetAttempt()}] = d
		resp.Results = append(resp.Results, &coordv1.HeartbeatResult{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Deadline: pbtime.FromTime(d)})
	}
	return resp
}

func (f *fakeQueue) Complete(_ context.Context, r *coordv1.QueueCompleteRequest) (*coordv1.QueueCompleteResponse, error) {
	logCall(f, &f.completed, f.completes, r)
	resp := &coordv1.QueueCompleteResponse{}
	for _, c := range r.GetCompletions() {
		resp.Results = append(resp.Results, &coordv1.CompleteResult{JobId: c.GetJobId(), Attempt: c.GetAttempt()})
	}
	return resp, nil
}

func (f *fakeQueue) Fail(_ context.Context, r *coordv1.QueueFailRequest) (*coordv1.QueueFailResponse, error) {
	logCall(f, &f.failed, f.fails, r)
	resp := &coordv1.QueueFailResponse{}
	for _, x := range r.GetFailures() {
		resp.Results = append(resp.Results, &coordv1.FailResult{JobId: x.GetJobId(), Attempt: x.GetAttempt(),
			State: coordv1.JobState_JOB_STATE_RETRYABLE})
	}
	return resp, nil
}

func (f *fakeQueue) FencedCommit(_ context.Context, r *coordv1.FencedCommitRequest) (*coordv1.FencedCommitResponse, error) {
	f.commits <- r
	if f.onCommit != nil {
		return f.onCommit(r)
	}
	return &coordv1.FencedCommitResponse{Accepted: true}, nil
}

// Submit assigns ids in order; a unique key already used returns its job.
func (f *fakeQueue) Submit(ctx context.Context, r *coordv1.QueueSubmitRequest) (*coordv1.QueueSubmitResponse, error) {
	if f.beforeSubmit != nil {
		if err := f.beforeSubmit(ctx, r); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits = append(f.submits, r)
	if f.onSubmit != nil {
		if err := f.onSubmit(r); err != nil {
			return nil, err
		}
	}
	resp := &coordv1.QueueSubmitResponse{}
	for _, nj := range r.GetJobs() {
		if k := nj.GetUniqueKey(); k != "" {
			if j := f.byKey(nj.GetQueue(), k); j != nil {
				resp.Jobs = append(resp.Jobs, &coordv1.SubmittedJob{Id: j.GetId(), State: j.GetState(), Duplicate: true})
				continue
			}
		}
		f.nextID++
		j := &coordv1.QueueJob{Id: f.nextID, Queue: nj.GetQueue(), Kind: nj.GetKind(), Args: nj.GetArgs(), UniqueKey: nj.GetUniqueKey(),
			State: coordv1.JobState_JOB_STATE_SCHEDULED, RunAt: pbtime.At(nj.GetRunAtMs()), Labels: nj.GetLabels()}
		f.jobs[j.Id] = j
		if j.GetUniqueKey() != "" {
			f.keys[[2]string{j.GetQueue(), j.GetUniqueKey()}] = j
		}
		resp.Jobs = append(resp.Jobs, &coordv1.SubmittedJob{Id: j.Id, State: j.State, RunAt: pbtime.At(j.GetRunAtMs())})
	}
	if f.lostAfterApply > 0 {
		f.lostAfterApply--
		return nil, coorderr.New(codes.Unavailable, coorderr.LeadershipLost,
			"leadership lost while applying; the outcome is unknown, retry with the same request id", nil)
	}
	return resp, nil
}

func (f *fakeQueue) byKey(queue, key string) *coordv1.QueueJob {
	return f.keys[[2]string{queue, key}]
}

func (f *fakeQueue) Get(_ context.Context, r *coordv1.QueueGetRequest) (*coordv1.QueueGetResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[r.GetId()]
	if !ok {
		return nil, coorderr.New(codes.NotFound, coorderr.JobNotFound, fmt.Sprintf("job %d does not exist", r.GetId()), nil)
	}
	return &coordv1.QueueGetResponse{Job: j}, nil
}

// List pages by id, newest first; the page token is the last id listed.
func (f *fakeQueue) List(_ context.Context, r *coordv1.QueueListRequest) (*coordv1.QueueListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []uint64
	for id, j := range f.jobs {
		if r.GetKind() == "" || j.GetKind() == r.GetKind() {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] > ids[b] })
	before := uint64(1 << 63)
	if r.GetPageToken() != "" {
		before, _ = strconv.ParseUint(r.GetPageToken(), 10, 64)
	}
	resp := &coordv1.QueueListResponse{}
	for _, id := range ids {
		if id >= before {
			continue
		}
		if len(resp.Jobs) == int(r.GetPageSize()) {
			resp.NextPageToken = strconv.FormatUint(resp.Jobs[len(resp.Jobs)-1].GetId(), 10)
			break
		}
		resp.Jobs = append(resp.Jobs, f.jobs[id])
	}
	return resp, nil
}

func (f *fakeQueue) Cancel(_ context.Context, r *coordv1.QueueCancelRequest) (*coordv1.QueueCancelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[r.GetId()]
	if !ok {
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.JobNotFound, "no such job", nil)
	}
	if j.State == coordv1.JobState_JOB_STATE_SUCCEEDED {
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.JobFinished, "job succeeded", nil)
	}
	dup := j.State == coordv1.JobState_JOB_STATE_CANCELLED
	j.State = coordv1.JobState_JOB_STATE_CANCELLED
	return &coordv1.QueueCancelResponse{Job: j, Duplicate: dup}, nil
}

func (f *fakeQueue) Stats(_ context.Context, r *coordv1.QueueStatsRequest) (*coordv1.QueueStatsResponse, error) {
	return &coordv1.QueueStatsResponse{Queues: []*coordv1.QueueStats{{Queue: r.GetQueue(), Available: 3}}}, nil
}

// fakeWatch serves coord.v1.Watch: once hold is closed, the first
// message, then each event the test sends on events, one per message.
type fakeWatch struct {
	coordv1.UnimplementedWatchServer
	reqs   chan *coordv1.WatchRequest
	events chan *coordv1.WatchEvent
	mu     sync.Mutex
	hold   chan struct{}
}

// holdFirst makes the next watches wait for release before their first
// message.
func (f *fakeWatch) holdFirst() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.hold = ch
	f.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

func newFakeWatch() *fakeWatch {
	f := &fakeWatch{reqs: make(chan *coordv1.WatchRequest, 100), hold: make(chan struct{}), events: make(chan *coordv1.WatchEvent, 100)}
	close(f.hold)
	return f
}

func (f *fakeWatch) Watch(r *coordv1.WatchRequest, s coordv1.Watch_WatchServer) error {
	f.reqs <- r
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	select {
	case <-hold:
	case <-s.Context().Done():
		return nil
	}
	if err := s.Send(&coordv1.WatchResponse{ResumeIndex: 1, Synced: true}); err != nil {
		return err
	}
	for i := uint64(1); ; i++ {
		select {
		case e := <-f.events:
			e.Index = i
			if err := s.Send(&coordv1.WatchResponse{Events: []*coordv1.WatchEvent{e}, ResumeIndex: i + 1, Synced: true}); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

// harness: a fake queue on loopback and a client in virtual time.
type harness struct {
	t     *testing.T
	clk   *clock.Fake
	f     *fakeQueue
	watch *fakeWatch
	c     *client.Client
	t0    time.Time
}

// serveFake serves f (and a fake watch) over gRPC on loopback until the
// test ends, and returns its address.
func serveFake(t testing.TB, f *fakeQueue) (string, *fakeWatch) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coordv1.RegisterQueueServer(srv, f)
	coordv1.RegisterCoordinatorServer(srv, f)
	fw := newFakeWatch()
	coordv1.RegisterWatchServer(srv, fw)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), fw
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	f := newFakeQueue(clk)
	addr, fw := serveFake(t, f)
	c, err := client.New(context.Background(), []string{addr}, client.WithClock(clk), client.WithOwner("w1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &harness{t: t, clk: clk, f: f, watch: fw, c: c, t0: clk.Now()}
}

func (h *harness) at(d time.Duration) time.Time { return h.t0.Add(d) }

// worker starts a worker and stops it (handing back what still runs) at
// the end of the test.
func (h *harness) worker(opts ...WorkerOption) *Worker {
	h.t.Helper()
	w := NewWorker(h.c, append([]WorkerOption{WithBatching(1, time.Millisecond)}, opts...)...)
	h.t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// advanceTo waits until a timer is armed at `at` (the code under test is
// idle, waiting for that moment), then moves the clock there.
func (h *harness) advanceTo(at time.Time) {
	h.t.Helper()
	if !h.clk.WaitArmed(at, 5*time.Second) {
		h.t.Fatalf("nothing armed at t0+%s (now t0+%s)", at.Sub(h.t0), h.clk.Now().Sub(h.t0))
	}
	h.clk.Advance(at.Sub(h.clk.Now()))
}

// recv receives from ch within 5 s of real time.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testutil.Recv(t, ch, what)
}

// waitUntil polls cond (internal state the test cannot await otherwise)
// for up to 5 s of real time.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Poll(t, what, 5*time.Second, time.Millisecond, cond)
}
