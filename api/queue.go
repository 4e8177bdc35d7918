package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordd/coordd/internal/jsonvalid"
	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// queue implements coord.v1.Queue (proto/coord/v1/queue.proto is the
// contract). Like the Coordinator: validate, run on the leader (forward
// from a follower), build the fsm command with the caller's identity, hand
// it to the node, convert the typed result. The FSM decides every state
// change; the node runs long polls and the dispatcher.
type queue struct {
	coordv1.UnimplementedQueueServer
	s *Server
}

// MaxFetchWait bounds a long poll (QueueFetchRequest.wait_ms).
const MaxFetchWait = 30 * time.Second

func (q *queue) Submit(ctx context.Context, req *coordv1.QueueSubmitRequest) (*coordv1.QueueSubmitResponse, error) {
	s := q.s
	if n := len(req.GetJobs()); n == 0 || n > fsm.MaxSubmitBatch {
		return nil, toStatus(invalidArg("jobs", "a submit carries 1 to %d jobs, not %d; nothing was submitted", fsm.MaxSubmitBatch, n))
	}
	// Checked here first, so bad input never travels: every rule that
	// does not depend on time (a node's calendar may be stale: a follower's
	// is its last applied stamp, 0 just after a restart). The leader checks
	// again, resolves delay_ms at its calendar, and the FSM judges how far
	// ahead run_at_ms is at the leader's calendar stamp.
	s.submitTraceDefaults(ctx, req)
	specs, err := s.jobSpecs(req)
	if err != nil {
		return nil, toStatus(err)
	}
	// On the leader these specs are the ones proposed (jobSpecs depends on
	// the request and this node's configuration only); a follower forwards
	// the request, and the leader's own Submit makes its own.
	return queueOnLeader(s, ctx, coordv1.QueueClient.Submit, req, func() (*coordv1.QueueSubmitResponse, error) {
		cal, err := s.node.LeaderCalendarTime(ctx)
		if err != nil {
			return nil, err
		}
		resolveDelays(req, specs, cal)
		n := 0
		for _, sp := range specs {
			n += len(sp.GetArgs())
		}
		if err := s.allowJobBytes(ctx, n); err != nil {
			return nil, err
		}
		spans := s.submitSpans(ctx, specs)
		r, err := s.node.SubmitJobs(ctx, &fsmv1.SubmitJobs{Jobs: specs, Identity: auth.IdentityOf(ctx), SpecRules: fsm.JobSpecRules,
			MaxLiveJobs: s.cfg.Limits.LiveJobsPerIdentity})
		if rej := (*fsm.Rejection)(nil); errors.As(err, &rej) && rej.Reason == coorderr.JobQuota {
			s.metrics.limited.WithLabelValues("live_jobs").Inc()
		}
		if err != nil {
			for _, sp := range spans {
				endJobSpan(sp, err.Error())
			}
			return nil, err
		}
		out := &coordv1.QueueSubmitResponse{Jobs: make([]*coordv1.SubmittedJob, len(r.Jobs))}
		for i, j := range r.Jobs {
			out.Jobs[i] = &coordv1.SubmittedJob{Id: j.ID, State: coordv1.JobState(j.State), RunAt: pbtime.At(j.RunAt), Duplicate: j.Duplicate}
			if spans != nil {
				endJobSpan(spans[i], "", attrJobID.Int64(int64(j.ID)), attrDup.Bool(j.Duplicate), attrState.String(j.State.String()))
			}
		}
		return out, nil
	})
}

// jobSpecs converts and checks every job of a submit: the first bad one
// refuses the whole batch, naming its index and field (a target also
// against this server's delivery configuration).
func (s *Server) jobSpecs(req *coordv1.QueueSubmitRequest) ([]*fsmv1.QueueJobSpec, error) {
	specs := make([]*fsmv1.QueueJobSpec, len(req.GetJobs()))
	for i, j := range req.GetJobs() {
		spec, err := jobSpec(i, j)
		if err != nil {
			return nil, err
		}
		if field, problem := s.checkDelivery(spec.GetTarget()); field != "" {
			return nil, invalidItem(i, field, "%s %s", field, problem)
		}
		specs[i] = spec
	}
	return specs, nil
}

func checkJobID(field string, id uint64) error {
	if id == 0 {
		return invalidArg(field, "must be a job id (at least 1)")
	}
	return nil
}

func (q *queue) Get(ctx context.Context, req *coordv1.QueueGetRequest) (*coordv1.QueueGetResponse, error) {
	if err := checkJobID("id", req.GetId()); err != nil {
		return nil, toStatus(err)
	}
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.Get, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueGetResponse, error) {
		j, ok := st.QueueJob(req.GetId())
		if !ok {
			return nil, jobNotFound(req.GetId())
		}
		if err := hideName(q.s.authorizeQueue(ctx, auth.OpRead, j.Queue), fmt.Sprintf("job %d", j.ID)); err != nil {
			return nil, err
		}
		return &coordv1.QueueGetResponse{Job: queueJobToProto(&j, true, true), CalendarTime: pbtime.At(q.s.node.CalendarTime())}, nil
	})
}

func jobNotFound(id uint64) error {
	rej := fsm.JobNotFound(id) // one wording for every call that finds no job
	return &notFoundError{msg: rej.Message, reason: rej.Reason, meta: rej.Metadata}
}

func (q *queue) List(ctx context.Context, req *coordv1.QueueListRequest) (*coordv1.QueueListResponse, error) {
	size, err := pageSize(req.GetPageSize())
	fl, ferr := jobFilter(req)
	before, terr := decodeJobPageToken(req.GetPageToken())
	if err = firstErr(err, ferr, terr); err != nil {
		return nil, toStatus(err)
	}
	search, searching := jobSearch(req)
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.List, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueListResponse, error) {
		if searching {
			return searchJobs(st, fl, search, before, size), nil
		}
		jobs, more := st.ListQueueJobs(fl, before, size)
		out := &coordv1.QueueListResponse{Jobs: make([]*coordv1.QueueJob, len(jobs))}
		for i := range jobs {
			out.Jobs[i] = queueJobToProto(&jobs[i], false, false)
		}
		if more {
			out.NextPageToken = jobPageToken(jobs[len(jobs)-1].ID)
		}
		return out, nil
	})
}

// Cancel and Retry are authorized on the leader, where the job's queue is
// known (op job on it).
func (q *queue) Cancel(ctx context.Context, req *coordv1.QueueCancelRequest) (*coordv1.QueueCancelResponse, error) {
	return oneJobCall(q.s, ctx, coordv1.QueueClient.Cancel, req, func(ids []uint64, identity string) *fsmv1.CancelJobs {
		return &fsmv1.CancelJobs{JobIds: ids, Identity: identity}
	}, q.s.node.CancelJobs, func(job *coordv1.QueueJob, duplicate bool) *coordv1.QueueCancelResponse {
		return &coordv1.QueueCancelResponse{Job: job, Duplicate: duplicate}
	})
}

func (q *queue) Retry(ctx context.Context, req *coordv1.QueueRetryRequest) (*coordv1.QueueRetryResponse, error) {
	return oneJobCall(q.s, ctx, coordv1.QueueClient.Retry, req, func(ids []uint64, identity string) *fsmv1.RetryJobs {
		return &fsmv1.RetryJobs{JobIds: ids, Identity: identity}
	}, q.s.node.RetryJobs, func(job *coordv1.QueueJob, duplicate bool) *coordv1.QueueRetryResponse {
		return &coordv1.QueueRetryResponse{Job: job, Duplicate: duplicate}
	})
}

// oneJobCall serves Cancel and Retry: on the leader, the one-item command
// cmd builds (with the job's id and the caller's identity), committed by
// commit, answered with the job after it.
func oneJobCall[Req interface{ GetId() uint64 }, Cmd, Resp any](s *Server, ctx context.Context,
	call func(coordv1.QueueClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	cmd func(ids []uint64, identity string) Cmd, commit func(context.Context, Cmd) (fsm.JobResults, error),
	resp func(job *coordv1.QueueJob, duplicate bool) Resp) (Resp, error) {
	if err := checkJobID("id", req.GetId()); err != nil {
		var zero Resp
		return zero, toStatus(err)
	}
	return queueOnLeader(s, ctx, call, req, func() (Resp, error) {
		o, err := s.oneJob(ctx, req.GetId(), func() (fsm.JobResults, error) {
			return commit(ctx, cmd([]uint64{req.GetId()}, auth.IdentityOf(ctx)))
		})
		if err != nil {
			var zero Resp
			return zero, err
		}
		return resp(queueJobToProto(o.Job, true, true), o.Duplicate), nil
	})
}

// oneJob authorizes the action on job id (authorizeManage) and commits a
// one-item Cancel or Retry; the item's refusal is the error.
func (s *Server) oneJob(ctx context.Context, id uint64, commit func() (fsm.JobResults, error)) (*fsm.JobOutcome, error) {
	if s.aclActive() {
		st, _, err := s.node.Read(ctx, true) // the leader's own state: a job's queue never changes
		if err != nil {
			return nil, err
		}
		if j, ok := st.QueueJob(id); ok {
			if err := s.authorizeExisting(ctx, j.Queue, fmt.Sprintf("job %d", id)); err != nil {
				return nil, err
			}
		}
	}
	res, err := commit()
	if err != nil {
		return nil, err
	}
	if len(res) != 1 {
		return nil, fmt.Errorf("one job answered with %d results", len(res))
	}
	o, rej := jobItem(res[0])
	if rej != nil {
		return nil, rej
	}
	if o == nil {
		return nil, fmt.Errorf("job answered with %T", res[0])
	}
	return o, nil
}

// jobItem types one item of a JobResults: its outcome, or its refusal
// (neither for an unexpected answer).
func jobItem(r any) (*fsm.JobOutcome, *fsm.Rejection) {
	switch v := r.(type) {
	case *fsm.JobOutcome:
		return v, nil
	case *fsm.Rejection:
		return nil, v
	}
	return nil, nil
}

func (q *queue) Fetch(ctx context.Context, req *coordv1.QueueFetchRequest) (*coordv1.QueueFetchResponse, error) {
	s := q.s
	if err := firstErr(s.checkTargetedFetch(ctx, req), checkFetch(req)); err != nil {
		return nil, toStatus(err)
	}
	return queueOnLeader(s, ctx, coordv1.QueueClient.Fetch, req, func() (*coordv1.QueueFetchResponse, error) {
		cmd := &fsmv1.FetchJobs{Queues: req.GetQueues(), Max: req.GetMax(), WorkerId: req.GetWorkerId(), Identity: auth.IdentityOf(ctx),
			Targeted: req.GetTargeted()}
		r, err := s.node.Fetch(ctx, cmd, time.Duration(req.GetWaitMs())*time.Millisecond)
		if err != nil {
			return nil, err
		}
		out := &coordv1.QueueFetchResponse{Jobs: make([]*coordv1.ClaimedJob, len(r.Jobs))}
		for i := range r.Jobs {
			j := r.Jobs[i]
			a, _ := j.Current()
			out.Jobs[i] = &coordv1.ClaimedJob{Job: queueJobToProto(j, true, false), Attempt: attemptToProto(j.ID, a)}
			s.queueMetrics.observeStart(j, a)
			s.dispatchSpan(ctx, j, a)
		}
		return out, nil
	})
}

func checkFetch(req *coordv1.QueueFetchRequest) error {
	if n := len(req.GetQueues()); (n == 0 && !req.GetTargeted()) || n > fsm.MaxFetchQueues {
		return invalidArg("queues", "fetch from 1 to %d queues, not %d", fsm.MaxFetchQueues, n)
	}
	for i, name := range req.GetQueues() {
		if err := checkName("queues", name, true); err != nil {
			return invalidItem(i, "queues", "%v", err)
		}
		if len(name) > fsm.MaxQueueNameBytes {
			return invalidItem(i, "queues", "a queue name is at most %d bytes", fsm.MaxQueueNameBytes)
		}
	}
	switch {
	case req.GetMax() == 0 || req.GetMax() > fsm.MaxFetchBatch:
		return invalidArg("max", "must be 1 to %d, not %d", fsm.MaxFetchBatch, req.GetMax())
	case req.GetWaitMs() < 0 || req.GetWaitMs() > MaxFetchWait.Milliseconds():
		return invalidArg("wait", "%s is outside [0s, %s]", fsm.Dur(req.GetWaitMs()), MaxFetchWait)
	}
	return checkName("worker_id", req.GetWorkerId(), true)
}

// checkAttemptRefs checks the items of Heartbeat, Complete and Fail:
// malformed input refuses the whole call (nothing is applied).
func checkAttemptRef(i int, jobID uint64, attempt uint32) error {
	switch {
	case jobID == 0:
		return invalidItem(i, "job_id", "must be a job id (at least 1)")
	case attempt == 0:
		return invalidItem(i, "attempt", "must be an attempt number (at least 1)")
	}
	return nil
}

func checkItems(field string, n int) error {
	if n == 0 || n > fsm.MaxJobBatch {
		return invalidArg(field, "1 to %d items, not %d", fsm.MaxJobBatch, n)
	}
	return nil
}

// attemptRef is an item of Heartbeat, Complete or Fail.
type attemptRef interface {
	GetJobId() uint64
	GetAttempt() uint32
}

// attemptCall serves Heartbeat, Complete and Fail. It checks the worker and
// the items (check adds an item's own checks; malformed input refuses the
// whole call), then on the leader commits (commit) the command cmd builds
// (with the caller's identity) and answers one result per item: result
// builds it from the item's outcome, or from its refusal (o nil).
func attemptCall[Req interface{ GetWorkerId() string }, Item attemptRef, Cmd, Result, Resp any](q *queue, ctx context.Context,
	call func(coordv1.QueueClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	field string, items []Item, check func(i int, it Item) error,
	cmd func(identity string) Cmd, commit func(context.Context, Cmd) (fsm.JobResults, error),
	result func(it Item, o *fsm.JobOutcome, refused *coordv1.JobItemError) Result, resp func([]Result) Resp) (Resp, error) {
	var zero Resp
	err := firstErr(checkName("worker_id", req.GetWorkerId(), true), checkItems(field, len(items)))
	for i, it := range items {
		err = firstErr(err, checkAttemptRef(i, it.GetJobId(), it.GetAttempt()))
		if check != nil {
			err = firstErr(err, check(i, it))
		}
	}
	if err != nil {
		return zero, toStatus(err)
	}
	return queueOnLeader(q.s, ctx, call, req, func() (Resp, error) {
		res, err := commit(ctx, cmd(auth.IdentityOf(ctx)))
		if err != nil {
			return zero, err
		}
		out := make([]Result, len(res))
		for i, r := range res {
			o, rej := jobItem(r)
			var refused *coordv1.JobItemError
			if rej != nil {
				refused = itemError(rej)
				q.s.queueMetrics.refused(rej)
			}
			out[i] = result(items[i], o, refused)
		}
		return resp(out), nil
	})
}

func (q *queue) Heartbeat(ctx context.Context, req *coordv1.QueueHeartbeatRequest) (*coordv1.QueueHeartbeatResponse, error) {
	return attemptCall(q, ctx, coordv1.QueueClient.Heartbeat, req, "attempts", req.GetAttempts(), nil,
		func(identity string) *fsmv1.HeartbeatJobs {
			return &fsmv1.HeartbeatJobs{WorkerId: req.GetWorkerId(), Identity: identity,
				Attempts: convertAll(req.GetAttempts(), func(a *coordv1.JobAttemptRef) *fsmv1.JobAttemptRef {
					return &fsmv1.JobAttemptRef{JobId: a.GetJobId(), Attempt: a.GetAttempt()}
				})}
		}, q.s.node.HeartbeatJobs,
		func(a *coordv1.JobAttemptRef, o *fsm.JobOutcome, refused *coordv1.JobItemError) *coordv1.HeartbeatResult {
			hr := &coordv1.HeartbeatResult{JobId: a.GetJobId(), Attempt: a.GetAttempt(), Error: refused}
			if o != nil {
				if cur, ok := o.Job.Current(); ok {
					hr.Deadline = pbtime.At(cur.Deadline)
				}
			}
			return hr
		},
		func(rs []*coordv1.HeartbeatResult) *coordv1.QueueHeartbeatResponse {
			return &coordv1.QueueHeartbeatResponse{Results: rs}
		})
}

func (q *queue) Complete(ctx context.Context, req *coordv1.QueueCompleteRequest) (*coordv1.QueueCompleteResponse, error) {
	start := q.s.spanStart()
	return attemptCall(q, ctx, coordv1.QueueClient.Complete, req, "completions", req.GetCompletions(),
		func(i int, c *coordv1.JobCompletion) error {
			if len(c.GetResult()) > fsm.MaxJobResultBytes {
				return invalidItem(i, "result", "is %d bytes; the limit is %d", len(c.GetResult()), fsm.MaxJobResultBytes)
			}
			if r := c.GetResult(); len(r) > 0 && !jsonvalid.Valid(r) {
				return invalidItem(i, "result", "must be a JSON value (a string, a number, an object, ...)")
			}
			return firstErr(checkItemTraceparent(i, c.GetTraceparent()),
				q.s.checkDeliveryReport(ctx, i, c.GetDeliveryStatus(), c.GetDeliveryLatency()))
		},
		func(identity string) *fsmv1.CompleteJobs {
			return &fsmv1.CompleteJobs{WorkerId: req.GetWorkerId(), Identity: identity,
				Completions: convertAll(req.GetCompletions(), func(c *coordv1.JobCompletion) *fsmv1.JobCompletion {
					return &fsmv1.JobCompletion{JobId: c.GetJobId(), Attempt: c.GetAttempt(), Result: c.GetResult(),
						DeliveryStatus: c.GetDeliveryStatus(), DeliveryLatencyMs: c.GetDeliveryLatencyMs()}
				})}
		}, q.s.node.CompleteJobs,
		func(c *coordv1.JobCompletion, o *fsm.JobOutcome, refused *coordv1.JobItemError) *coordv1.CompleteResult {
			q.s.outcomeSpan(ctx, "coordd.job.complete", start, c, c.GetTraceparent(), o, refused)
			return &coordv1.CompleteResult{JobId: c.GetJobId(), Attempt: c.GetAttempt(), Duplicate: o != nil && o.Duplicate, Error: refused}
		},
		func(rs []*coordv1.CompleteResult) *coordv1.QueueCompleteResponse {
			return &coordv1.QueueCompleteResponse{Results: rs}
		})
}

func (q *queue) Fail(ctx context.Context, req *coordv1.QueueFailRequest) (*coordv1.QueueFailResponse, error) {
	start := q.s.spanStart()
	return attemptCall(q, ctx, coordv1.QueueClient.Fail, req, "failures", req.GetFailures(),
		func(i int, f *coordv1.JobFailure) error {
			return firstErr(checkItemTraceparent(i, f.GetTraceparent()),
				q.s.checkDeliveryReport(ctx, i, f.GetDeliveryStatus(), f.GetDeliveryLatency()))
		},
		func(identity string) *fsmv1.FailJobs {
			// The node draws each failure's retry jitter.
			return &fsmv1.FailJobs{WorkerId: req.GetWorkerId(), Identity: identity,
				Failures: convertAll(req.GetFailures(), func(f *coordv1.JobFailure) *fsmv1.JobFailure {
					return &fsmv1.JobFailure{JobId: f.GetJobId(), Attempt: f.GetAttempt(), Error: f.GetError(), Retryable: f.GetRetryable(),
						RetryAfterMs: retryAfterMs(f.GetRetryAfter()), DeliveryStatus: f.GetDeliveryStatus(), DeliveryLatencyMs: f.GetDeliveryLatencyMs()}
				})}
		}, q.s.node.FailJobs,
		func(f *coordv1.JobFailure, o *fsm.JobOutcome, refused *coordv1.JobItemError) *coordv1.FailResult {
			q.s.outcomeSpan(ctx, "coordd.job.fail", start, f, f.GetTraceparent(), o, refused)
			fr := &coordv1.FailResult{JobId: f.GetJobId(), Attempt: f.GetAttempt(), Error: refused}
			if o != nil {
				fr.State, fr.RunAt, fr.Duplicate = coordv1.JobState(o.Job.State), pbtime.At(o.Job.RunAt), o.Duplicate
			}
			return fr
		},
		func(rs []*coordv1.FailResult) *coordv1.QueueFailResponse {
			return &coordv1.QueueFailResponse{Results: rs}
		})
}

func (q *queue) Stats(ctx context.Context, req *coordv1.QueueStatsRequest) (*coordv1.QueueStatsResponse, error) {
	if err := checkName("queue", req.GetQueue(), false); err != nil {
		return nil, toStatus(err)
	}
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.Stats, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueStatsResponse, error) {
		cal := q.s.node.CalendarTime()
		stats := st.QueueStats(req.GetQueue(), cal)
		out := &coordv1.QueueStatsResponse{Queues: make([]*coordv1.QueueStats, len(stats)), CalendarTime: pbtime.At(cal)}
		lims := st.QueueLimitsOf(req.GetQueue())
		for i, x := range stats {
			out.Queues[i] = queueStatsToProto(x)
			statsLimits(out.Queues[i], lims, cal) // queue_limits.go
		}
		return out, nil
	})
}

// authorizeQueue applies the ACL to op on a queue for the caller in ctx
// (members are the cluster: no ACL).
func (s *Server) authorizeQueue(ctx context.Context, op auth.Op, queue string) error {
	c := auth.CallerOf(ctx)
	if c.Member {
		return nil
	}
	return s.authorize(c, op, queue, false)
}

// authorizeManage authorizes an operator's action on an existing job or
// schedule (cancel, retry, pause, resume, trigger, delete): the job op on
// its queue, or the admin op (operators manage every queue).
func (s *Server) authorizeManage(ctx context.Context, queue string) error {
	c := auth.CallerOf(ctx)
	if c.Member || s.adminAllowed(c) {
		return nil
	}
	return s.authorize(c, auth.OpJob, queue, false)
}

// allowJobBytes takes n job args bytes of the caller's rate on this node,
// the leader (members are the cluster: no limit).
func (s *Server) allowJobBytes(ctx context.Context, n int) error {
	c := auth.CallerOf(ctx)
	if c.Member {
		return nil
	}
	err := s.limits.AllowJobBytes(c.Identity, n)
	if err != nil {
		s.metrics.limited.WithLabelValues("job_bytes").Inc()
	}
	return err
}

// adminAllowed reports whether the ACL lets caller c administer the
// cluster (without logging or counting a denial).
func (s *Server) adminAllowed(c auth.Caller) bool {
	return s.allowed(c, auth.OpAdmin, "", false)
}

// allowed reports whether the ACL lets caller c do op on name (without
// logging or counting a denial).
func (s *Server) allowed(c auth.Caller, op auth.Op, name string, list bool) bool {
	acl := s.acl.Load()
	return !s.authEnabled() || acl == nil || acl.Authorize(c, op, name, list).Allowed
}

// aclActive reports whether calls are checked against an ACL.
func (s *Server) aclActive() bool { return s.authEnabled() && s.acl.Load() != nil }

// errJobTokenName refuses lease names reserved for job attempt tokens.
var errJobTokenName = errors.New(`lease names of the form "job:<digits>" are reserved for job attempt tokens (FencedCommit with token "job:<id>:<attempt>")`)
