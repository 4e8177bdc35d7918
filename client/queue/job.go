package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/jsonvalid"
	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Job is one attempt of a job, as a Worker hands it to a handler.
type Job struct {
	ID    uint64
	Queue string
	Kind  string
	// Args are the job's parameters as submitted (JSON by convention; see
	// DecodeArgs and HandleJSON).
	Args []byte
	// Attempt is this attempt's number: 1 for the first, never reused.
	Attempt     uint32
	MaxAttempts int32
	Priority    int32
	// RunAt is when the job was (last) due, on the cluster's calendar clock.
	RunAt             time.Time
	CreatedAt         time.Time
	UniqueKey         string
	Labels            map[string]string
	SubmittedBy       string
	VisibilityTimeout time.Duration
	// Traceparent and Tracestate are the job's W3C trace context
	// (docs/tracing.md): what the handler's ctx continues, the Worker's
	// span of the attempt being its child. Empty: none.
	Traceparent, Tracestate string

	claimed *coordv1.ClaimedJob
	cl      *claim
	result  []byte
}

func newJob(cj *coordv1.ClaimedJob) *Job {
	j := cj.GetJob()
	vt := pbtime.Duration(j.GetVisibilityTimeout())
	if vt <= 0 {
		vt = DefaultVisibilityTimeout
	}
	return &Job{ID: j.GetId(), Queue: j.GetQueue(), Kind: j.GetKind(), Args: j.GetArgs(), Attempt: cj.GetAttempt().GetNumber(),
		MaxAttempts: j.GetMaxAttempts(), Priority: j.GetPriority(), RunAt: time.UnixMilli(j.GetRunAtMs()),
		CreatedAt: time.UnixMilli(j.GetCreatedAtMs()), UniqueKey: j.GetUniqueKey(), Labels: j.GetLabels(),
		SubmittedBy: j.GetSubmittedBy(), VisibilityTimeout: vt, Traceparent: j.GetTraceparent(), Tracestate: j.GetTracestate(),
		claimed: cj}
}

// DefaultVisibilityTimeout is the server's default, assumed for a job that
// does not say.
const DefaultVisibilityTimeout = 30 * time.Second

// Token is the attempt's fencing token, "job:<id>:<attempt>": the form
// Coordinator.FencedCommit accepts (client.Client.FencedCommit, or an API
// behind client/fencehttp given it in the Fencing-Token header). A write
// fenced by it is accepted only while this attempt is the job's live one,
// and a resource once fenced by the job accepts no lower attempt.
func (j *Job) Token() string { return Token(j.ID, j.Attempt) }

// Token is the fencing token of attempt of job id: "job:<id>:<attempt>".
func Token(id uint64, attempt uint32) string {
	return coorderr.FormatToken(TokenName(id), uint64(attempt))
}

// TokenName is the lease-name part of a job's tokens, "job:<id>" (lease
// names of that form are reserved for jobs).
func TokenName(id uint64) string { return "job:" + strconv.FormatUint(id, 10) }

// ParseToken reads a job attempt token; ok is false for anything else
// (a lease's token, a malformed one).
func ParseToken(tok string) (id uint64, attempt uint32, ok bool) {
	name, gen, err := coorderr.ParseToken(tok)
	digits, isJob := strings.CutPrefix(name, "job:")
	if err != nil || !isJob || digits == "" || digits[0] == '0' || gen == 0 || gen > uint64(^uint32(0)) {
		return 0, 0, false
	}
	id, err = strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return id, uint32(gen), true
}

// DecodeArgs decodes the job's JSON args into v.
func (j *Job) DecodeArgs(v any) error {
	if err := json.Unmarshal(j.Args, v); err != nil {
		return fmt.Errorf("args of %s job %d: %w", j.Kind, j.ID, err)
	}
	return nil
}

// SetResult sets the result recorded with a successful completion: a JSON
// value (as every API shows it), up to 64 KiB. A result that is not JSON,
// or is longer, fails the attempt permanently with an error that says so,
// instead of the completion being refused.
func (j *Job) SetResult(b []byte) { j.result = b }

// maxResultBytes is the server's limit on a result (fsm.MaxJobResultBytes).
const maxResultBytes = 64 << 10

// checkResult is why the result set with SetResult cannot be recorded, or
// nil.
func (j *Job) checkResult() error {
	switch {
	case len(j.result) > maxResultBytes:
		return Permanent(fmt.Errorf("job %d: the result is %d bytes; the limit is %d", j.ID, len(j.result), maxResultBytes))
	case len(j.result) > 0 && !jsonvalid.Valid(j.result):
		return Permanent(fmt.Errorf("job %d: the result is not JSON (SetResult takes a JSON value, e.g. json.Marshal of it)", j.ID))
	}
	return nil
}

// Claimed is the job and attempt as fetched.
func (j *Job) Claimed() *coordv1.ClaimedJob { return j.claimed }

// Deadline is the attempt's local deadline: the Worker considers the
// claim lost then (and cancels the handler's context) unless a heartbeat
// is acknowledged first. Zero for a job not run by a Worker.
func (j *Job) Deadline() time.Time {
	if j.cl == nil {
		return time.Time{}
	}
	return j.cl.localDeadline()
}

// OnDeadline calls f with the attempt's local deadline (Deadline) at once
// and again each time an acknowledged heartbeat moves it, until the claim
// ends: for a process that must act on the deadline itself, e.g. a
// watchdog of a child process (coordctl worker). The deadline only moves
// later, and f sees the moves in order. f runs on the worker's heartbeat
// goroutine: it must return quickly. A later call replaces f; nothing
// happens for a job not run by a Worker.
func (j *Job) OnDeadline(f func(time.Time)) {
	if j.cl == nil {
		return
	}
	j.cl.w.mu.Lock()
	j.cl.onDeadline = f
	j.cl.w.mu.Unlock()
	j.cl.notifyDeadline()
}

// FencedCommit records a write to resource fenced by this attempt's token
// (client.Client.FencedCommit with Token()): accepted only while the
// attempt is live. With an idempotency key (e.g. "job-<id>-<step>") a
// repeat returns the first outcome and the call is retried safely after an
// unknown outcome. A refusal that says the attempt is over (its claim
// lapsed, the job was cancelled, a later attempt exists) also ends the
// claim: the handler's context is cancelled.
func (j *Job) FencedCommit(ctx context.Context, resource, idempotencyKey string, payload []byte, opts ...client.CommitOption) (*client.Commit, error) {
	if j.cl == nil {
		return nil, fmt.Errorf("%w: job %d was not handed out by a Worker", client.ErrInvalidArgument, j.ID)
	}
	cm, err := j.cl.w.c.FencedCommit(ctx, resource, j.Token(), idempotencyKey, payload, opts...)
	if err != nil && attemptOver(err) {
		j.cl.w.lose(j.cl, fmt.Errorf("%w: job %d attempt %d: fenced commit refused: %w", ErrClaimLost, j.ID, j.Attempt, err))
	}
	return cm, err
}

// CheckToken answers whether FencedCommit with these arguments would be
// accepted, recording nothing (client.Client.CheckToken).
func (j *Job) CheckToken(ctx context.Context, resource, idempotencyKey string) (*client.Commit, error) {
	return j.FencedCommit(ctx, resource, idempotencyKey, nil, client.CommitDryRun())
}

// attemptOver reports whether a refusal means the attempt is no longer live.
func attemptOver(err error) bool {
	return errors.Is(err, client.ErrAttemptLost) || errors.Is(err, client.ErrJobCancelled) ||
		errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrJobNotFound)
}

// ErrClaimLost is the cause (context.Cause) of a handler's context
// cancelled because its attempt's claim is gone: a heartbeat or fenced
// commit was refused (the error also wraps the refusal, e.g.
// client.ErrAttemptLost or client.ErrJobCancelled), or no heartbeat was
// acknowledged before the local deadline. The job may be handed to another
// worker from then on: stop, and do not write unfenced effects.
var ErrClaimLost = errors.New("coordd: job claim lost")

// ErrWorkerShutdown is the cause of a handler's context cancelled because
// Worker.Stop's context ended before the handler returned: the attempt was
// failed (retryable) with reason "worker shutdown".
var ErrWorkerShutdown = errors.New("coordd: worker shutdown")

// Permanent marks a handler's error as not worth retrying: the job is dead
// at once, whatever attempts it has left. Every other error is retryable:
// the job is due again after its backoff while attempts remain. nil stays
// nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// maxErrorText is how much error text the server keeps (4 KiB).
const maxErrorText = 4096
