// Package fsm is coordd's deterministic state machine: leases and their
// generations, the window ledger, per-resource fences and idempotency
// records, the job queue. It reads no wall clock and no randomness; time is
// what the leader stamped into each command: lease time (now_ms) and calendar
// time (calendar_ms). See DESIGN.md.
package fsm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// FSM is the replicated state and its one Apply switch. It knows nothing
// of Raft: the node adapts it to raft.FSM and raft.BatchingFSM, handing it
// the data of committed command entries.
type FSM struct {
	mu sync.RWMutex
	st *state
	// version counts the changes of st (commands applied, restores), so
	// that Digest can reuse its last result while nothing changed.
	version uint64

	// queueEpoch counts the applies and restores that changed the job
	// queue or its settings (QueueEpoch).
	queueEpoch atomic.Uint64

	digestMu      sync.Mutex // one digest at a time; the others wait and reuse it
	digest        string
	digestVersion uint64
}

// New returns an empty state machine.
func New() *FSM {
	return &FSM{st: newState()}
}

// Apply applies the data of one committed command entry.
func (f *FSM) Apply(data []byte) any {
	return f.ApplyBatch([][]byte{data})[0]
}

// ApplyBatch applies the data of committed entries under one lock
// acquisition, in order. A nil element is an entry that is not a command
// (Raft's own configuration entries): it is skipped and its result is nil.
func (f *FSM) ApplyBatch(entries [][]byte) []any {
	return f.ApplyBatchTo(entries, nil)
}

// ApplyCommand applies a command outside Raft (tests, tools). It is what
// ApplyBatch does for one decoded entry.
func (f *FSM) ApplyCommand(cmd *fsmv1.Command) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	defer f.publishQueueChanges()
	return f.st.apply(cmd)
}

// QueueEpoch changes whenever an applied command or a restore changed the
// job queue or its settings (a job added, moved, made due, lapsed or
// removed; a pause, limit, target or bulk operation). Commands that touch
// only leases, windows and fences leave it as it was, so the leader's
// queue loops need not look again after them.
func (f *FSM) QueueEpoch() uint64 { return f.queueEpoch.Load() }

// publishQueueChanges moves the last apply's queue changes to queueEpoch
// (under f.mu).
func (f *FSM) publishQueueChanges() {
	if c := f.st.queueChanges; c != 0 {
		f.st.queueChanges = 0
		f.queueEpoch.Add(c)
	}
}

// apply dispatches one command. Every command type is handled here.
func (s *state) apply(cmd *fsmv1.Command) any {
	if cmd.GetType() != fsmv1.CommandType_COMMAND_TYPE_BATCH {
		if cmd.GetNowMs() > s.leaseTime {
			s.leaseTime = cmd.GetNowMs()
		}
		if cmd.GetCalendarMs() > s.calendarTime {
			s.calendarTime = cmd.GetCalendarMs()
		}
	}
	now, cal := s.leaseTime, s.calendarTime
	if cmd.GetType() != fsmv1.CommandType_COMMAND_TYPE_BATCH {
		s.expireLeases()
		s.advanceQueue(cal)
	}
	// day is the time this command's calendar decisions are judged at and
	// its job and window timestamps are: calendar time, or lease time for
	// a command stamped without a calendar time (written before the leader
	// stamped one), as it was judged when it was written.
	day := now
	if cmd.GetCalendarMs() > 0 {
		day = cal
	}
	switch cmd.GetType() {
	case fsmv1.CommandType_COMMAND_TYPE_ACQUIRE, fsmv1.CommandType_COMMAND_TYPE_RENEW,
		fsmv1.CommandType_COMMAND_TYPE_RELEASE, fsmv1.CommandType_COMMAND_TYPE_CLAIM_WINDOW,
		fsmv1.CommandType_COMMAND_TYPE_COMPLETE_WINDOW, fsmv1.CommandType_COMMAND_TYPE_FENCED_COMMIT,
		fsmv1.CommandType_COMMAND_TYPE_BATCH:
		// leases, windows and fences: the queue changed only if the
		// stamps above made jobs due or lapsed (counted there)
	default:
		s.queueChanges++ // a tick (rate tokens), or a command about jobs, queues or schedules
	}
	switch cmd.GetType() {
	case fsmv1.CommandType_COMMAND_TYPE_TICK:
		return nil
	case fsmv1.CommandType_COMMAND_TYPE_ACQUIRE:
		return s.acquire(now, day, cmd.GetAcquire())
	case fsmv1.CommandType_COMMAND_TYPE_RENEW:
		return s.renew(now, cmd.GetRenew())
	case fsmv1.CommandType_COMMAND_TYPE_RELEASE:
		return s.release(now, day, cmd.GetRelease())
	case fsmv1.CommandType_COMMAND_TYPE_CLAIM_WINDOW:
		return s.claimWindow(now, day, cmd.GetClaimWindow())
	case fsmv1.CommandType_COMMAND_TYPE_COMPLETE_WINDOW:
		return s.completeWindow(now, day, cmd.GetCompleteWindow())
	case fsmv1.CommandType_COMMAND_TYPE_FENCED_COMMIT:
		return s.fencedCommit(now, cmd.GetFencedCommit())
	case fsmv1.CommandType_COMMAND_TYPE_PRUNE:
		return s.prune(cmd.GetPrune())
	case fsmv1.CommandType_COMMAND_TYPE_SET_MEMBER:
		return s.setMember(cmd.GetSetMember())
	case fsmv1.CommandType_COMMAND_TYPE_REMOVE_MEMBER:
		return s.removeMember(cmd.GetRemoveMember())
	case fsmv1.CommandType_COMMAND_TYPE_REGISTER_JOB:
		return s.registerJob(day, cmd.GetRegisterJob())
	case fsmv1.CommandType_COMMAND_TYPE_BATCH:
		return s.applyBatch(cmd.GetBatch())
	case fsmv1.CommandType_COMMAND_TYPE_SUBMIT_JOBS:
		return s.submitJobs(cal, cmd.GetSubmitJobs())
	case fsmv1.CommandType_COMMAND_TYPE_FETCH_JOBS:
		return s.fetchJobs(cal, cmd.GetFetchJobs())
	case fsmv1.CommandType_COMMAND_TYPE_HEARTBEAT_JOBS:
		return s.heartbeatJobs(cal, cmd.GetHeartbeatJobs())
	case fsmv1.CommandType_COMMAND_TYPE_COMPLETE_JOBS:
		return s.completeJobs(cal, cmd.GetCompleteJobs())
	case fsmv1.CommandType_COMMAND_TYPE_FAIL_JOBS:
		return s.failJobs(cal, cmd.GetFailJobs())
	case fsmv1.CommandType_COMMAND_TYPE_CANCEL_JOBS:
		return s.cancelJobs(cal, cmd.GetCancelJobs())
	case fsmv1.CommandType_COMMAND_TYPE_RETRY_JOBS:
		return s.retryJobs(cal, cmd.GetRetryJobs())
	case fsmv1.CommandType_COMMAND_TYPE_PUT_SCHEDULE:
		return s.putSchedule(cal, cmd.GetPutSchedule())
	case fsmv1.CommandType_COMMAND_TYPE_DELETE_SCHEDULE:
		return s.deleteSchedule(cal, cmd.GetDeleteSchedule())
	case fsmv1.CommandType_COMMAND_TYPE_PAUSE_SCHEDULE:
		return s.pauseSchedule(cal, cmd.GetPauseSchedule())
	case fsmv1.CommandType_COMMAND_TYPE_TRIGGER_SCHEDULE:
		return s.triggerSchedule(cal, cmd.GetTriggerSchedule())
	case fsmv1.CommandType_COMMAND_TYPE_MATERIALISE_SCHEDULES:
		return s.materialise(cal, cmd.GetMaterialiseSchedules())
	case fsmv1.CommandType_COMMAND_TYPE_SET_QUEUE_TARGET:
		return s.setQueueTarget(cal, cmd.GetSetQueueTarget())
	case fsmv1.CommandType_COMMAND_TYPE_PAUSE_QUEUE:
		return s.pauseQueue(cal, cmd.GetPauseQueue())
	case fsmv1.CommandType_COMMAND_TYPE_START_BULK_JOBS:
		return s.startBulkJobs(cal, cmd.GetStartBulkJobs())
	case fsmv1.CommandType_COMMAND_TYPE_STEP_BULK_JOBS:
		return s.stepBulkJobs(cal, cmd.GetStepBulkJobs())
	case fsmv1.CommandType_COMMAND_TYPE_DELETE_JOBS:
		return s.deleteJobs(cmd.GetDeleteJobs())
	case fsmv1.CommandType_COMMAND_TYPE_SET_QUEUE_LIMITS:
		return s.setQueueLimits(cal, cmd.GetSetQueueLimits())
	default:
		// A command from a newer version: stop rather than diverge.
		panic(fmt.Sprintf("fsm: unknown command type %d", cmd.GetType()))
	}
}

// LeaseTime is the lease time (ms) of the last applied command: the
// highest lease stamp applied.
func (f *FSM) LeaseTime() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.leaseTime
}

// CalendarTime is the calendar time (ms since the Unix epoch) of the last
// applied command: the highest calendar stamp applied (0 before any).
func (f *FSM) CalendarTime() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.calendarTime
}

// Snapshot takes an O(1) copy of the state; Persist writes it out while
// commands keep applying.
func (f *FSM) Snapshot() *Snapshot {
	return &Snapshot{st: f.cloneState()}
}

// cloneState copies the state in O(1). btree's Clone writes to the original
// tree, so it takes the write lock.
func (f *FSM) cloneState() *state {
	st, _ := f.cloneStateVersion()
	return st
}

func (f *FSM) cloneStateVersion() (*state, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.clone(), f.version
}

// Restore replaces the state with the one in a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := readSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.st = st
	f.version++
	f.queueEpoch.Add(1)
	f.mu.Unlock()
	return nil
}

// BatchResult holds the results of a Batch's commands, in order.
type BatchResult []any

// applyBatch applies the commands of a batch in order; each advances the
// clock to its own stamp. A nested batch is refused, not applied.
func (s *state) applyBatch(b *fsmv1.Batch) any {
	out := make(BatchResult, len(b.GetCommands()))
	for i, c := range b.GetCommands() {
		if c.GetType() == fsmv1.CommandType_COMMAND_TYPE_BATCH {
			out[i] = reject(coorderr.InvalidArgument, nil, "batches do not nest")
			continue
		}
		out[i] = s.apply(c)
	}
	return out
}
