package api

import (
	"context"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/pbtime"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Bulk actions and job delete (fsm/queue_bulk.go): Bulk counts the jobs a
// filter selects (dry_run) or starts an operation the leader applies in
// batches; GetBulk and ListBulk report progress; Delete removes a final
// job.

// bulkQueue is the queue a bulk request is authorized on ("": every
// queue, which takes the admin op: the handler checks it).
func bulkQueue(r *coordv1.QueueBulkRequest) string { return r.GetFilter().GetQueue() }

// jobSelector converts a wire filter, naming the field of a bad one.
func jobSelector(f *coordv1.JobFilter) (*fsmv1.JobSelector, error) {
	sel := &fsmv1.JobSelector{Queue: f.GetQueue(), Kind: f.GetKind(), CreatedAfterMs: pbtime.AtMs(f.GetCreatedAfter()),
		CreatedBeforeMs: pbtime.AtMs(f.GetCreatedBefore()), FinishedAfterMs: pbtime.AtMs(f.GetFinishedAfter()),
		FinishedBeforeMs: pbtime.AtMs(f.GetFinishedBefore())}
	if err := firstErr(checkName("filter.queue", f.GetQueue(), false), checkName("filter.kind", f.GetKind(), false)); err != nil {
		return nil, err
	}
	if s := f.GetState(); s != coordv1.JobState_JOB_STATE_UNSPECIFIED {
		if _, known := coordv1.JobState_name[int32(s)]; !known {
			return nil, invalidArg("filter.state", "unknown state %d", s)
		}
		sel.State = fsmv1.JobState(s)
	}
	if l := f.GetLabel(); l != "" {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" || !utf8.ValidString(v) || fsm.TextProblem(k) != "" {
			return nil, invalidArg("filter.label", "want key=value (UTF-8, no control characters in the key), not %q", l)
		}
		sel.LabelKey, sel.LabelValue = k, v
	}
	for _, r := range []struct {
		field         string
		after, before int64
	}{{"filter.created_before", sel.CreatedAfterMs, sel.CreatedBeforeMs}, {"filter.finished_before", sel.FinishedAfterMs, sel.FinishedBeforeMs}} {
		if r.after < 0 || r.before < 0 {
			return nil, invalidArg(r.field, "times are after 1970")
		}
		if r.before != 0 && r.after >= r.before {
			return nil, invalidArg(r.field, "must be after the range's start")
		}
	}
	if len(f.GetIds()) > fsm.MaxBulkIDs {
		return nil, invalidArg("filter.ids", "at most %d ids, not %d", fsm.MaxBulkIDs, len(f.GetIds()))
	}
	if len(f.GetIds()) > 0 {
		ids := slices.Compact(slices.Sorted(slices.Values(f.GetIds())))
		if ids[0] == 0 {
			return nil, invalidArg("filter.ids", "job ids are at least 1")
		}
		sel.Ids = ids
	}
	if field, problem := fsm.CheckJobSelector(sel); field != "" {
		return nil, invalidArg("filter."+field, "%s", problem)
	}
	return sel, nil
}

func (q *queue) Bulk(ctx context.Context, req *coordv1.QueueBulkRequest) (*coordv1.QueueBulkResponse, error) {
	s := q.s
	sel, err := jobSelector(req.GetFilter())
	switch a := req.GetAction(); {
	case err != nil:
	case a != coordv1.BulkAction_BULK_ACTION_RETRY && a != coordv1.BulkAction_BULK_ACTION_CANCEL && a != coordv1.BulkAction_BULK_ACTION_DELETE:
		err = invalidArg("action", "one of RETRY, CANCEL, DELETE")
	case !req.GetDryRun() && req.GetRequestId() == "":
		err = invalidArg("request_id", "a bulk operation needs a request id (a repeat with it returns the same operation)")
	case len(req.GetRequestId()) > fsm.MaxBulkOpIDBytes || fsm.TextProblem(req.GetRequestId()) != "":
		err = invalidArg("request_id", "1 to %d bytes of UTF-8 without control characters", fsm.MaxBulkOpIDBytes)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return queueOnLeader(s, ctx, coordv1.QueueClient.Bulk, req, func() (*coordv1.QueueBulkResponse, error) {
		if err := s.authorizeBulk(ctx, sel.GetQueue()); err != nil {
			return nil, err
		}
		st, _, err := s.node.Read(ctx, true) // the leader's own state
		if err != nil {
			return nil, err
		}
		count := st.CountSelected(sel)
		if req.GetDryRun() {
			return &coordv1.QueueBulkResponse{Count: count}, nil
		}
		r, err := s.node.StartBulkJobs(ctx, &fsmv1.StartBulkJobs{OpId: req.GetRequestId(), Action: fsmv1.BulkAction(req.GetAction()),
			Selector: sel, Identity: auth.IdentityOf(ctx), Total: count})
		if err != nil {
			return nil, err
		}
		return &coordv1.QueueBulkResponse{Count: count, Op: bulkOpToProto(&r.Op), Duplicate: r.Duplicate}, nil
	})
}

// authorizeBulk: the job op on the queue (or the admin op); a bulk over
// every queue takes the admin op.
func (s *Server) authorizeBulk(ctx context.Context, queue string) error {
	if queue != "" {
		return s.authorizeManage(ctx, queue)
	}
	c := auth.CallerOf(ctx)
	if !s.authEnabled() || c.Member || s.adminAllowed(c) {
		return nil
	}
	return &auth.Error{Kind: auth.PermissionDenied, Msg: "a bulk action over every queue takes the admin op; name the queue (filter.queue) to act with the job op on it"}
}

func (q *queue) GetBulk(ctx context.Context, req *coordv1.QueueGetBulkRequest) (*coordv1.QueueGetBulkResponse, error) {
	if err := checkName("id", req.GetId(), true); err != nil {
		return nil, toStatus(err)
	}
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.GetBulk, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueGetBulkResponse, error) {
		o, ok := st.BulkOp(req.GetId())
		if !ok || q.s.authorizeQueue(ctx, auth.OpRead, o.Sel.GetQueue()) != nil {
			return nil, &notFoundError{msg: "no bulk operation " + req.GetId() + " (never started, or one of the oldest finished ones, which are dropped)"}
		}
		return &coordv1.QueueGetBulkResponse{Op: bulkOpToProto(&o)}, nil
	})
}

func (q *queue) ListBulk(ctx context.Context, req *coordv1.QueueListBulkRequest) (*coordv1.QueueListBulkResponse, error) {
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.ListBulk, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueListBulkResponse, error) {
		out := &coordv1.QueueListBulkResponse{}
		for _, o := range st.BulkOps(false) {
			if q.s.authorizeQueue(ctx, auth.OpRead, o.Sel.GetQueue()) == nil {
				out.Ops = append(out.Ops, bulkOpToProto(&o))
			}
		}
		return out, nil
	})
}

// Delete removes a final job (authorized on the leader against its queue).
func (q *queue) Delete(ctx context.Context, req *coordv1.QueueDeleteRequest) (*coordv1.QueueDeleteResponse, error) {
	return oneJobCall(q.s, ctx, coordv1.QueueClient.Delete, req, func(ids []uint64, identity string) *fsmv1.DeleteJobs {
		return &fsmv1.DeleteJobs{JobIds: ids, Identity: identity}
	}, q.s.node.DeleteJobs, func(_ *coordv1.QueueJob, duplicate bool) *coordv1.QueueDeleteResponse {
		return &coordv1.QueueDeleteResponse{Duplicate: duplicate}
	})
}

func bulkOpToProto(o *fsm.BulkOp) *coordv1.BulkOp {
	sel := o.Sel
	f := &coordv1.JobFilter{Queue: sel.GetQueue(), State: coordv1.JobState(sel.GetState()), Kind: sel.GetKind(), Ids: sel.GetIds()}
	if sel.GetLabelKey() != "" {
		f.Label = sel.GetLabelKey() + "=" + sel.GetLabelValue()
	}
	if ms := sel.GetCreatedAfterMs(); ms != 0 {
		f.CreatedAfter = pbtime.At(ms)
	}
	if ms := sel.GetCreatedBeforeMs(); ms != 0 {
		f.CreatedBefore = pbtime.At(ms)
	}
	if ms := sel.GetFinishedAfterMs(); ms != 0 {
		f.FinishedAfter = pbtime.At(ms)
	}
	if ms := sel.GetFinishedBeforeMs(); ms != 0 {
		f.FinishedBefore = pbtime.At(ms)
	}
	out := &coordv1.BulkOp{Id: o.ID, Action: coordv1.BulkAction(o.Action), Filter: f, CreatedBy: o.Identity,
		CreatedAt: pbtime.At(o.CreatedAt), UpdatedAt: pbtime.At(o.UpdatedAt), Done: o.Done, Skipped: o.Skipped, Total: o.Total,
		Finished: o.Finished(), Batches: o.Steps}
	if o.FinishedAt != 0 {
		out.FinishedAt = pbtime.At(o.FinishedAt)
	}
	return out
}

// jobSearch is a List's search (created range, args substring), and
// whether it has one.
func jobSearch(req *coordv1.QueueListRequest) (fsm.JobSearch, bool) {
	q := fsm.JobSearch{CreatedAfter: pbtime.AtMs(req.GetCreatedAfter()), CreatedBefore: pbtime.AtMs(req.GetCreatedBefore())}
	if a := req.GetArgsContains(); a != "" {
		q.ArgsContains = []byte(a)
	}
	return q, q.CreatedAfter != 0 || q.CreatedBefore != 0 || len(q.ArgsContains) > 0
}

// searchJobs answers a List page with a search: at most fsm.MaxSearchScan
// jobs looked at.
func searchJobs(st *fsm.FSM, fl fsm.JobFilter, q fsm.JobSearch, before uint64, size int) *coordv1.QueueListResponse {
	jobs, next, scanned := st.ScanQueueJobs(fl, q, before, size, fsm.MaxSearchScan)
	out := &coordv1.QueueListResponse{Jobs: make([]*coordv1.QueueJob, len(jobs)), Scanned: uint64(scanned)}
	for i := range jobs {
		out.Jobs[i] = queueJobToProto(&jobs[i], false, false)
	}
	if next != 0 {
		out.NextPageToken = jobPageToken(next)
	}
	return out
}

// Workers groups the running attempts by worker (from this replica's
// state: the leader's unless stale).
func (q *queue) Workers(ctx context.Context, req *coordv1.QueueWorkersRequest) (*coordv1.QueueWorkersResponse, error) {
	if err := checkName("queue", req.GetQueue(), false); err != nil {
		return nil, toStatus(err)
	}
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.Workers, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueWorkersResponse, error) {
		atts, more := st.RunningAttempts(req.GetQueue(), fsm.MaxWorkerAttempts)
		out := &coordv1.QueueWorkersResponse{Truncated: more, CalendarTime: pbtime.At(q.s.node.CalendarTime())}
		byWorker := map[string]*coordv1.QueueWorker{}
		for _, a := range atts {
			if q.s.authorizeQueue(ctx, auth.OpRead, a.Queue) != nil {
				continue
			}
			key := a.Attempt.WorkerID + "\x00" + a.Attempt.Identity
			w := byWorker[key]
			if w == nil {
				w = &coordv1.QueueWorker{WorkerId: a.Attempt.WorkerID, Identity: a.Attempt.Identity, Since: pbtime.At(a.Attempt.StartedAt)}
				byWorker[key] = w
				out.Workers = append(out.Workers, w)
			}
			if a.Attempt.StartedAt < w.GetSinceMs() {
				w.Since = pbtime.At(a.Attempt.StartedAt)
			}
			w.Attempts = append(w.Attempts, &coordv1.RunningAttempt{JobId: a.JobID, Queue: a.Queue, Kind: a.Kind, Attempt: a.Attempt.Number,
				StartedAt: pbtime.At(a.Attempt.StartedAt), Deadline: pbtime.At(a.Attempt.Deadline), Heartbeats: a.Attempt.Heartbeats})
		}
		slices.SortFunc(out.Workers, func(a, b *coordv1.QueueWorker) int {
			return strings.Compare(a.GetWorkerId()+"\x00"+a.GetIdentity(), b.GetWorkerId()+"\x00"+b.GetIdentity())
		})
		return out, nil
	})
}
