package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/internal/snapfile"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// SnapshotFormat is the version of the snapshot encoding this build writes
// and the newest it reads: the digit of the header that starts every
// snapshot. A change that an older coordd would misread bumps it (an added
// record family or field that older builds may skip does not).
const SnapshotFormat = snapfile.Format

// snapshotHeader starts every snapshot; the digit is the format version.
const snapshotHeader = snapfile.Header

// Snapshot is a point-in-time copy of the state (FSM.Snapshot).
type Snapshot struct{ st *state }

// Persist streams the header and then length-delimited records: meta, then
// every family in key order. Equal state gives equal bytes (G8).
func (s *Snapshot) Persist(w io.Writer) error { return s.st.writeTo(w) }

func (st *state) writeTo(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	if _, err := bw.WriteString(snapshotHeader); err != nil {
		return err
	}
	var (
		buf  []byte
		werr error
	)
	put := func(rec *fsmv1.SnapshotRecord) bool {
		var err error
		buf, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(buf[:0], rec)
		if err == nil {
			var hdr [binary.MaxVarintLen64]byte
			n := binary.PutUvarint(hdr[:], uint64(len(buf)))
			if _, err = bw.Write(hdr[:n]); err == nil {
				_, err = bw.Write(buf)
			}
		}
		werr = err
		return err == nil
	}
	put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Meta{Meta: &fsmv1.SnapshotMeta{
		ClockMs:     st.leaseTime,
		Leases:      uint64(st.leases.Len()),
		Windows:     uint64(st.windows.Len()),
		Resources:   uint64(st.resources.Len()),
		Idempotency: uint64(st.idem.Len()),
		Members:     uint64(st.members.Len()),
		Jobs:        uint64(st.registryJobs.Len()),
		CalendarMs:  st.calendarTime,
		LastJobId:   st.lastJobID,
		FetchSeq:    st.fetchSeq,
		QueueJobs:   uint64(st.qjobs.Len()),
		Schedules:   uint64(st.schedules.Len()),
	}}})
	st.leases.Ascend(func(l *Lease) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Lease{Lease: leaseRecord(l)}})
	})
	st.windows.Ascend(func(w *Window) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Window{Window: windowRecord(w)}})
	})
	st.resources.Ascend(func(r *Resource) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Resource{Resource: &fsmv1.ResourceRecord{
			Resource: r.Name, LeaseName: r.LeaseName, MaxGeneration: r.MaxGeneration,
			LastCommitAtMs: r.LastCommitAt, LastIdempotencyKey: r.LastIdempotencyKey, Commits: r.Commits, JobId: r.JobID,
		}}})
	})
	st.idem.Ascend(func(r *Idempotency) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Idempotency{Idempotency: &fsmv1.IdempotencyRecord{
			Resource: r.Resource, Key: r.Key, Generation: r.Generation, Payload: r.Payload, AtMs: r.At,
		}}})
	})
	st.members.Ascend(func(m *Member) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Member{Member: &fsmv1.MemberRecord{
			Id: m.ID, GrpcAddress: m.GRPCAddress,
		}}})
	})
	st.registryJobs.Ascend(func(j *RegistryJob) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Job{Job: registryJobRecord(j)}})
	})
	st.qjobs.Ascend(func(j *QueueJob) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_QueueJob{QueueJob: queueJobRecord(j)}})
	})
	st.schedules.Ascend(func(sc *Schedule) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_Schedule{Schedule: scheduleRecord(sc)}})
	})
	st.qtargets.Ascend(func(q *QueueTarget) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_QueueTarget{QueueTarget: &fsmv1.QueueTargetRecord{
			Queue: q.Queue, Target: q.Target, UpdatedBy: q.UpdatedBy, UpdatedAtMs: q.UpdatedAt}}})
	})
	st.qops.pauses.Ascend(func(p *QueuePause) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_QueuePause{QueuePause: queuePauseRecord(p)}})
	})
	st.qops.bulks.Ascend(func(o *BulkOp) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_BulkOp{BulkOp: bulkOpRecord(o)}})
	})
	st.qlimits.Ascend(func(l *QueueLimits) bool {
		return werr == nil && put(&fsmv1.SnapshotRecord{Record: &fsmv1.SnapshotRecord_QueueLimits{QueueLimits: queueLimitsRecord(l)}})
	})
	if werr != nil {
		return werr
	}
	return bw.Flush()
}

func leaseRecord(l *Lease) *fsmv1.LeaseRecord {
	return &fsmv1.LeaseRecord{
		Name: l.Name, Owner: l.Owner, Generation: l.Generation, TtlMs: l.TTLMs,
		AcquiredAtMs: l.AcquiredAt, RenewedAtMs: l.RenewedAt, ExpiresAtMs: l.ExpiresAt,
		Released: l.Released, RequestId: l.RequestID, Renewals: l.Renewals, Identity: l.Identity, Value: []byte(l.Value),
	}
}

func windowRecord(w *Window) *fsmv1.WindowRecord {
	return &fsmv1.WindowRecord{
		Job: w.Ledger, Window: w.Window, Completed: w.Completed, LeaseName: w.LeaseName, Owner: w.Owner,
		Generation: w.Generation, Attempts: w.Attempts, FirstStartedAtMs: w.FirstStartedAt,
		StartedAtMs: w.StartedAt, CompletedAtMs: w.CompletedAt, Result: w.Result,
	}
}

// readSnapshot builds a fresh state from a snapshot stream.
func readSnapshot(r io.Reader) (*state, error) {
	st := newState()
	err := snapfile.Read(r, func(rec *fsmv1.SnapshotRecord) error {
		switch x := rec.GetRecord().(type) {
		case *fsmv1.SnapshotRecord_Meta:
			st.leaseTime = x.Meta.GetClockMs()
			st.calendarTime = x.Meta.GetCalendarMs()
			st.lastJobID = x.Meta.GetLastJobId()
			st.fetchSeq = x.Meta.GetFetchSeq()
		case *fsmv1.SnapshotRecord_Lease:
			r := x.Lease
			st.leases.ReplaceOrInsert(&Lease{Name: r.GetName(), Owner: r.GetOwner(), RequestID: r.GetRequestId(),
				Generation: r.GetGeneration(), TTLMs: r.GetTtlMs(), AcquiredAt: r.GetAcquiredAtMs(),
				RenewedAt: r.GetRenewedAtMs(), ExpiresAt: r.GetExpiresAtMs(), Renewals: r.GetRenewals(), Released: r.GetReleased(),
				Identity: r.GetIdentity(), Value: string(r.GetValue())})
			if !r.GetReleased() {
				st.indexIdentity(r.GetIdentity(), r.GetName())
			}
		case *fsmv1.SnapshotRecord_Window:
			r := x.Window
			st.windows.ReplaceOrInsert(&Window{Ledger: r.GetJob(), Window: r.GetWindow(), LeaseName: r.GetLeaseName(),
				Owner: r.GetOwner(), Generation: r.GetGeneration(), Attempts: r.GetAttempts(),
				FirstStartedAt: r.GetFirstStartedAtMs(), StartedAt: r.GetStartedAtMs(), CompletedAt: r.GetCompletedAtMs(),
				Result: r.GetResult(), Completed: r.GetCompleted()})
		case *fsmv1.SnapshotRecord_Resource:
			r := x.Resource
			st.resources.ReplaceOrInsert(&Resource{Name: r.GetResource(), LeaseName: r.GetLeaseName(),
				MaxGeneration: r.GetMaxGeneration(), LastCommitAt: r.GetLastCommitAtMs(),
				LastIdempotencyKey: r.GetLastIdempotencyKey(), Commits: r.GetCommits(), JobID: r.GetJobId()})
		case *fsmv1.SnapshotRecord_Idempotency:
			r := x.Idempotency
			st.idem.ReplaceOrInsert(&Idempotency{Resource: r.GetResource(), Key: r.GetKey(),
				Generation: r.GetGeneration(), Payload: r.GetPayload(), At: r.GetAtMs()})
		case *fsmv1.SnapshotRecord_Member:
			st.members.ReplaceOrInsert(&Member{ID: x.Member.GetId(), GRPCAddress: x.Member.GetGrpcAddress()})
		case *fsmv1.SnapshotRecord_Job:
			st.registryJobs.ReplaceOrInsert(registryJobFromRecord(x.Job))
		case *fsmv1.SnapshotRecord_QueueJob:
			j, err := queueJobFromRecord(x.QueueJob)
			if err != nil {
				return err
			}
			if j.ID > st.lastJobID {
				return fmt.Errorf("snapshot: queue job %d above the last id assigned (%d)", j.ID, st.lastJobID)
			}
			st.shareNames(j)
			st.qjobs.ReplaceOrInsert(j)
		case *fsmv1.SnapshotRecord_Schedule:
			sc, err := scheduleFromRecord(x.Schedule)
			if err != nil {
				return err
			}
			st.schedules.ReplaceOrInsert(sc)
		case *fsmv1.SnapshotRecord_QueueTarget:
			r := x.QueueTarget
			if r.GetQueue() == "" || r.GetTarget() == nil {
				return fmt.Errorf("snapshot: a queue target without its queue or target")
			}
			st.qtargets.ReplaceOrInsert(&QueueTarget{Queue: r.GetQueue(), Target: r.GetTarget(), UpdatedBy: r.GetUpdatedBy(), UpdatedAt: r.GetUpdatedAtMs()})
		case *fsmv1.SnapshotRecord_QueuePause:
			r := x.QueuePause
			if r.GetQueue() == "" {
				return fmt.Errorf("snapshot: a queue pause without its queue")
			}
			st.qops.pauses.ReplaceOrInsert(&QueuePause{Queue: r.GetQueue(), PausedBy: r.GetPausedBy(), PausedAt: r.GetPausedAtMs()})
		case *fsmv1.SnapshotRecord_BulkOp:
			if x.BulkOp.GetOpId() == "" {
				return fmt.Errorf("snapshot: a bulk operation without its id")
			}
			st.qops.bulks.ReplaceOrInsert(bulkOpFromRecord(x.BulkOp))
		case *fsmv1.SnapshotRecord_QueueLimits:
			l, err := queueLimitsFromRecord(x.QueueLimits)
			if err != nil {
				return err
			}
			st.qlimits.ReplaceOrInsert(l)
		default:
			return fmt.Errorf("snapshot: unknown record type")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	st.rebuildQueues()
	st.rebuildQueueIndex()
	st.rebuildScheduleIndex()
	st.rebuildExpiry()
	st.rebuildJobResources()
	return st, nil
}

// Digest is a SHA-256 over the snapshot encoding of the state: replicas
// that applied the same log have the same digest (G8).
//
// It costs a pass over the whole state (a second at a million jobs), so
// one runs at a time, and calls while nothing was applied since reuse it:
// Status, which reports it, is cheap to poll.
func (f *FSM) Digest() string {
	f.digestMu.Lock()
	defer f.digestMu.Unlock()
	st, v := f.cloneStateVersion()
	if f.digest != "" && f.digestVersion == v {
		return f.digest
	}
	h := sha256.New()
	if err := st.writeTo(h); err != nil {
		return "error: " + err.Error()
	}
	f.digest, f.digestVersion = hex.EncodeToString(h.Sum(nil)), v
	return f.digest
}

// WriteSnapshot writes the current state in snapshot format (tools, tests).
func (f *FSM) WriteSnapshot(w io.Writer) error {
	st := f.cloneState()
	return st.writeTo(w)
}
