package api

import (
	"context"
	"io"
	"time"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/probe"
	"github.com/coordd/coordd/node/leader"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Node is what the API needs of a coordd node (node.Node implements it; the
// API's unit tests use a fake). It is defined here, by its consumer, so
// that this package never imports the node or Raft. It is one small
// interface per service, and every method takes and returns typed values:
// a command the API needs and the node lacks is a compile error here, not
// a cast that fails at run time (internal/layering's TestTypedSeams keeps
// `any` out of these interfaces).
//
// Errors come back as *fsm.Rejection (a verdict of the state machine) or as
// node errors that toStatus recognises by their methods (NotLeader,
// LeadershipLost, ShuttingDown, FailedPrecondition, InvalidArgument,
// NotFound), or context errors.
type Node interface {
	Leadership
	State
	Cluster
	Leases
	Jobs
	Schedules
	Watcher
	Probes
}

// Probes are the checks of /livez and /readyz (probes.go).
type Probes interface {
	// Liveness: the node's loops turn and Raft applies; never a matter of
	// quorum.
	Liveness() []probe.Check
	// Readiness: a leader is known, this node hears from it (or leads,
	// ready) and has applied what is committed.
	Readiness() []probe.Check
}

// Leadership is who this node is and who leads.
type Leadership interface {
	ID() string
	// Leading: this node leads (calls run here, waiting for it to be
	// ready). Leader: the leader's id and gRPC address when it is another
	// node ("" when unknown).
	Leading() bool
	Leader() (id, grpcAddr string)
	// LeaderChanged is closed when the leader this node knows may have
	// changed (reads wait on it during an election).
	LeaderChanged() <-chan struct{}
	// LeaderContext ends with this node's current leadership (streams that
	// live on the leader end with it).
	LeaderContext(ctx context.Context) (context.Context, error)
	// RegisterLeaderServices adds services that run while this node leads,
	// under the node's one leader lifecycle (node/leader): started on
	// every ready leadership, stopped when it ends. Serve registers the
	// API's (leaderServices).
	RegisterLeaderServices(svcs ...leader.Service)
}

// State is the committed state and the clocks it is judged on.
type State interface {
	// Read returns the committed state (read only) and the lease time to
	// judge expiry at: linearizable on the leader, or stale on any node.
	Read(ctx context.Context, stale bool) (*fsm.FSM, int64, error)
	// CalendarTime is calendar time now (Unix ms): on the ready leader its
	// wall clock, never below its last stamp; elsewhere the FSM's. Every
	// calendar decision (not-before gates, due and overdue windows, job
	// queues) is judged on it; leases never are (lease time).
	CalendarTime() int64
	// LeaderCalendarTime is the ready leader's calendar time now (waiting
	// while this node is becoming the leader), or a not-leader error: what
	// the leader resolves against the calendar (delay_ms) uses it.
	LeaderCalendarTime(ctx context.Context) (int64, error)
}

// Cluster is membership and administration, in the Cluster service's wire
// types.
type Cluster interface {
	// IsMember reports whether identity is a Raft server id.
	IsMember(identity string) bool
	Health() error
	Status(digest bool) *coordv1.StatusResponse
	Members() ([]*coordv1.Member, error)
	AddVoter(ctx context.Context, id, raftAddr, grpcAddr string) ([]*coordv1.Member, error)
	RemoveServer(ctx context.Context, id string) ([]*coordv1.Member, error)
	TransferLeadership(ctx context.Context, id string) (string, error)
	Snapshot(ctx context.Context) (*coordv1.SnapshotResponse, error)
	// SaveSnapshot writes a consistent snapshot to w on the ready leader
	// (a not-leader error elsewhere), calling start with its description
	// before the first byte.
	SaveSnapshot(ctx context.Context, start func(*coordv1.SnapshotInfo) error, w io.Writer) error
	// Advertise tells the node where its API listens and how to call
	// another member's AddVoter (registration and join).
	Advertise(grpcAddr string, addVoter func(ctx context.Context, addr string, req *coordv1.AddVoterRequest) error)
}

// Leases is the Coordinator's commands: each commits its fsm command on the
// ready leader and returns the FSM's result (fsm/results.go).
type Leases interface {
	// TTLRange is the range of lease TTLs the node accepts.
	TTLRange() (lo, hi time.Duration)
	// Acquire answers from state, proposes, or (wait) queues: the one
	// entry point for acquires. cmd carries the caller's identity and the
	// live-lease limit.
	Acquire(ctx context.Context, cmd *fsmv1.Acquire, wait bool) (*fsm.AcquireResult, error)
	Renew(ctx context.Context, cmd *fsmv1.Renew) (*fsm.LeaseResult, error)
	// Release hands the lease to its first waiting acquire, if any.
	Release(ctx context.Context, cmd *fsmv1.Release) (*fsm.ReleaseResult, error)
	ClaimWindow(ctx context.Context, cmd *fsmv1.ClaimWindow) (*fsm.ClaimResult, error)
	CompleteWindow(ctx context.Context, cmd *fsmv1.CompleteWindow) (*fsm.WindowResult, error)
	FencedCommit(ctx context.Context, cmd *fsmv1.FencedCommit) (*fsm.CommitResult, error)
}

// Jobs is the job queue's commands, committed on the ready leader; the
// worker batches answer one result per item.
type Jobs interface {
	// SubmitJobs takes the fetches of the long polls it feeds into its
	// entry.
	SubmitJobs(ctx context.Context, cmd *fsmv1.SubmitJobs) (*fsm.SubmitResult, error)
	// Fetch hands out queued jobs (FetchJobs, with the caller's identity);
	// with wait it long-polls on the leader, up to wait and not past ctx's
	// deadline, in arrival order with the other waiting fetches.
	Fetch(ctx context.Context, cmd *fsmv1.FetchJobs, wait time.Duration) (*fsm.FetchResult, error)
	CancelJobs(ctx context.Context, cmd *fsmv1.CancelJobs) (fsm.JobResults, error)
	RetryJobs(ctx context.Context, cmd *fsmv1.RetryJobs) (fsm.JobResults, error)
	HeartbeatJobs(ctx context.Context, cmd *fsmv1.HeartbeatJobs) (fsm.JobResults, error)
	CompleteJobs(ctx context.Context, cmd *fsmv1.CompleteJobs) (fsm.JobResults, error)
	// FailJobs: the node draws each failure's retry jitter.
	FailJobs(ctx context.Context, cmd *fsmv1.FailJobs) (fsm.JobResults, error)
	// SetQueueTarget sets or clears a queue's HTTP target; nil: cleared.
	SetQueueTarget(ctx context.Context, cmd *fsmv1.SetQueueTarget) (*fsm.QueueTarget, error)
	// SetQueueLimits sets or clears a queue's limits; nil: cleared.
	SetQueueLimits(ctx context.Context, cmd *fsmv1.SetQueueLimits) (*fsm.QueueLimits, error)
	// PauseQueue pauses or (Paused false) resumes a queue.
	PauseQueue(ctx context.Context, cmd *fsmv1.PauseQueue) (*fsm.PauseResult, error)
	// StartBulkJobs records a bulk operation the leader then applies in
	// batches; DeleteJobs deletes final jobs.
	StartBulkJobs(ctx context.Context, cmd *fsmv1.StartBulkJobs) (*fsm.BulkResult, error)
	DeleteJobs(ctx context.Context, cmd *fsmv1.DeleteJobs) (fsm.JobResults, error)
}

// Schedules is the schedules' commands, committed on the ready leader.
type Schedules interface {
	PutSchedule(ctx context.Context, cmd *fsmv1.PutSchedule) (*fsm.ScheduleResult, error)
	// PauseSchedule pauses or (Paused false) resumes.
	PauseSchedule(ctx context.Context, cmd *fsmv1.PauseSchedule) (*fsm.ScheduleResult, error)
	TriggerSchedule(ctx context.Context, cmd *fsmv1.TriggerSchedule) (*fsm.TriggerResult, error)
	DeleteSchedule(ctx context.Context, cmd *fsmv1.DeleteSchedule) (*fsm.ScheduleResult, error)
}

// Watcher is the change stream.
type Watcher interface {
	// Watch delivers the change events this node applies from position
	// from (index 0: now), those that match, to send, with an initial View
	// when asked; it returns when ctx ends, send fails, or the watch cannot
	// go on (an error with WatchRefused). Any node serves it.
	Watch(ctx context.Context, from fsm.Position, initial bool, match func(*fsm.Event) bool, send func(fsm.WatchBatch) error) error
}
