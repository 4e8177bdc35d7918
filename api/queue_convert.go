package api

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/tracectx"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Conversion between coord.v1.Queue's wire types and the fsm's queue
// records and commands, and the checks of a submitted job.

// jobFields are the fields a submitted job (NewJob) and a schedule's job
// template (JobTemplate) share.
type jobFields interface {
	GetQueue() string
	GetKind() string
	GetArgs() []byte
	GetPriority() int32
	GetMaxAttempts() int32
	GetBackoffInitialMs() int64
	GetBackoffMaxMs() int64
	GetBackoffFactor() float64
	GetVisibilityTimeoutMs() int64
	GetLabels() map[string]string
	GetTarget() *coordv1.HttpTarget
}

// wireJobSpec converts the shared fields of a job or a template into the
// FSM's spec, defaults filled in (fsm.FillJobDefaults) and checked by the
// one job-spec check (fsm.CheckJobSpec) after what only the wire form can
// get wrong (a factor that is not a number in [1, 100]); more may set the
// fields only a submitted job has, before the check. It returns the spec,
// or the offending field and what is wrong. No rule here depends on time.
func wireJobSpec(j jobFields, more func(*fsmv1.QueueJobSpec)) (spec *fsmv1.QueueJobSpec, field, problem string) {
	f := j.GetBackoffFactor()
	if math.IsNaN(f) || math.IsInf(f, 0) || (f != 0 && (f < 1 || f > fsm.MaxBackoffPermille/1000)) {
		return nil, "backoff_factor", fmt.Sprintf("%v is outside [1, %d]", f, fsm.MaxBackoffPermille/1000)
	}
	spec = &fsmv1.QueueJobSpec{Queue: j.GetQueue(), Kind: j.GetKind(), Args: j.GetArgs(), Priority: j.GetPriority(),
		MaxAttempts: j.GetMaxAttempts(), BackoffInitialMs: j.GetBackoffInitialMs(), BackoffMaxMs: j.GetBackoffMaxMs(),
		BackoffFactorPermille: uint32(math.Round(f * 1000)), VisibilityTimeoutMs: j.GetVisibilityTimeoutMs()}
	for k, v := range j.GetLabels() {
		spec.Labels = append(spec.Labels, &fsmv1.JobLabel{Key: k, Value: v})
	}
	sort.Slice(spec.Labels, func(a, b int) bool { return spec.Labels[a].GetKey() < spec.Labels[b].GetKey() })
	if spec.Target, field, problem = wireTarget(j.GetTarget()); field != "" {
		return nil, field, problem
	}
	if more != nil {
		more(spec)
	}
	fsm.FillJobDefaults(spec)
	if field, problem := fsm.CheckJobSpec(spec); field != "" {
		return nil, field, problem
	}
	return spec, "", ""
}

// jobSpec turns job i of a Submit into the FSM's spec (wireJobSpec, plus
// run_at_ms, delay_ms and unique_key). Nothing here depends on time, so
// any node can check it as it enters: a delay_ms is resolved later, on the
// leader (resolveDelays), and how far ahead run_at_ms may be is judged by
// the FSM at the leader's calendar stamp (fsm.CheckRunAhead). Errors name
// the field and the index.
func jobSpec(i int, j *coordv1.NewJob) (*fsmv1.QueueJobSpec, error) {
	switch {
	case j.GetDelayMs() < 0:
		return nil, invalidItem(i, "delay", "delay must not be negative")
	case j.GetDelayMs() > 0 && j.GetRunAtMs() > 0:
		return nil, invalidItem(i, "delay", "set run_at or delay, not both")
	case j.GetDelayMs() > fsm.MaxRunAheadMs:
		return nil, invalidItem(i, "delay", "delay is %s; the limit is %s", fsm.Days(j.GetDelayMs()), fsm.Days(fsm.MaxRunAheadMs))
	}
	if _, err := tracectx.Parse(j.GetTraceparent(), j.GetTracestate()); err != nil {
		field := "traceparent"
		if errors.Is(err, tracectx.ErrTraceState) {
			field = "tracestate"
		}
		return nil, invalidItem(i, field, "%s %v", field, err)
	}
	spec, field, problem := wireJobSpec(j, func(sp *fsmv1.QueueJobSpec) {
		sp.RunAtMs, sp.UniqueKey, sp.MaxRunMs = j.GetRunAtMs(), j.GetUniqueKey(), j.GetMaxRunMs()
		sp.TraceParent, sp.TraceState = j.GetTraceparent(), j.GetTracestate()
	})
	if field != "" {
		return nil, invalidItem(i, field, "%s %s", field, problem)
	}
	return spec, nil
}

// resolveDelays sets the run_at of the jobs submitted with a delay_ms to
// calendar time cal + delay (on the leader, at its calendar).
func resolveDelays(req *coordv1.QueueSubmitRequest, specs []*fsmv1.QueueJobSpec, cal int64) {
	for i, j := range req.GetJobs() {
		if d := j.GetDelayMs(); d > 0 {
			specs[i].RunAtMs = cal + d
		}
	}
}

// attemptToken is an attempt's fencing token: "job:<id>:<n>".
func attemptToken(id uint64, n uint32) string {
	return coorderr.FormatToken(fsm.JobTokenName(id), uint64(n))
}

// queueJobToProto converts a job; full adds args and the attempt log
// (Get), otherwise they are left out (List).
func queueJobToProto(j *fsm.QueueJob, args, log bool) *coordv1.QueueJob {
	out := &coordv1.QueueJob{Id: j.ID, Queue: j.Queue, Kind: j.Kind, State: coordv1.JobState(j.State), RunAt: pbtime.At(j.RunAt),
		Priority: j.Priority, MaxAttempts: j.MaxAttempts, Attempts: j.Attempts, BackoffInitial: pbtime.Dur(j.BackoffMs),
		BackoffMax: pbtime.Dur(j.BackoffMaxMs), BackoffFactor: float64(j.BackoffPermille) / 1000, VisibilityTimeout: pbtime.Dur(j.VisibilityMs),
		UniqueKey: j.UniqueKey, SubmittedBy: j.Identity, CreatedAt: pbtime.At(j.CreatedAt), UpdatedAt: pbtime.At(j.UpdatedAt),
		FinishedAt: pbtime.At(j.FinishedAt), Target: targetToProto(j.Target), Traceparent: j.TraceParent, Tracestate: j.TraceState}
	if j.MaxRunMs > 0 {
		out.MaxRun = pbtime.Dur(j.MaxRunMs)
	}
	if len(j.Labels) > 0 {
		out.Labels = make(map[string]string, len(j.Labels))
		for _, l := range j.Labels {
			out.Labels[l.Key] = l.Value
		}
	}
	if args {
		out.Args = j.Args
	}
	if log {
		out.AttemptLog = make([]*coordv1.JobAttempt, len(j.Log))
		for i := range j.Log {
			out.AttemptLog[i] = attemptToProto(j.ID, &j.Log[i])
		}
	}
	return out
}

func attemptToProto(id uint64, a *fsm.Attempt) *coordv1.JobAttempt {
	out := &coordv1.JobAttempt{Number: a.Number, Outcome: coordv1.AttemptOutcome(a.Outcome), WorkerId: a.WorkerID,
		Identity: a.Identity, StartedAt: pbtime.At(a.StartedAt), Deadline: pbtime.At(a.Deadline), FinishedAt: pbtime.At(a.FinishedAt),
		Heartbeats: a.Heartbeats, Error: a.Error, Result: a.Result, Token: attemptToken(id, a.Number), DeliveryStatus: a.DeliveryStatus,
		RunUntil: pbtime.At(a.RunUntil)}
	if a.DeliveryStatus != 0 || a.DeliveryLatencyMs != 0 {
		out.DeliveryLatency = pbtime.Dur(a.DeliveryLatencyMs)
	}
	return out
}

// itemError is a refused item of a batch call.
func itemError(rej *fsm.Rejection) *coordv1.JobItemError {
	return &coordv1.JobItemError{Reason: coorderr.Name(rej.Reason), Message: rej.Message, Metadata: rej.Metadata}
}

func queueStatsToProto(st fsm.QueueStats) *coordv1.QueueStats {
	return pauseToStats(&coordv1.QueueStats{Queue: st.Queue, Scheduled: st.Scheduled, Available: st.Available, Running: st.Running,
		Retryable: st.Retryable, Succeeded: st.Succeeded, Cancelled: st.Cancelled, Dead: st.Dead,
		OldestAvailableAge: pbtime.Dur(st.OldestAvailableAgeMs), OldestAvailableRunAt: pbtime.At(st.OldestAvailableRunAt)}, st.Pause)
}

// jobFilter reads List's filters.
func jobFilter(req *coordv1.QueueListRequest) (fsm.JobFilter, error) {
	fl := fsm.JobFilter{Queue: req.GetQueue(), Kind: req.GetKind()}
	if s := req.GetState(); s != coordv1.JobState_JOB_STATE_UNSPECIFIED {
		if _, known := coordv1.JobState_name[int32(s)]; !known {
			return fl, invalidArg("state", "unknown state %d", s)
		}
		fl.State = fsm.JobState(s)
	}
	if l := req.GetLabel(); l != "" {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fl, invalidArg("label", "want key=value, not %q", l)
		}
		if !utf8.ValidString(v) || fsm.TextProblem(k) != "" {
			return fl, invalidArg("label", "%q: keys are UTF-8 without control characters, values UTF-8", l)
		}
		fl.Label = &fsm.Label{Key: k, Value: v}
	}
	return fl, firstErr(checkName("queue", req.GetQueue(), false), checkName("kind", req.GetKind(), false))
}

// jobPageToken encodes the id a List page ends at; the next page starts
// below it.
func jobPageToken(id uint64) string { return encodePageToken(strconv.FormatUint(id, 10)) }

func decodeJobPageToken(tok string) (uint64, error) {
	if tok == "" {
		return 0, nil
	}
	s, err := decodePageToken(tok)
	if err != nil {
		return 0, err
	}
	id, perr := strconv.ParseUint(s, 10, 64)
	if perr != nil || id == 0 {
		return 0, invalidArg("page_token", "not a token this list returned")
	}
	return id, nil
}
