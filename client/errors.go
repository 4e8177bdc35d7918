package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
)

// Sentinel errors, for errors.Is. Errors from the server wrap one of them
// in an *Error that keeps the reason and metadata.
var (
	// ErrNotAcquired: someone else holds the lease (see *NotAcquiredError).
	ErrNotAcquired = errors.New("coordd: lease held by another owner")
	// ErrLeaseLost: the lease is gone — the server refused a renewal or an
	// operation (lost, expired, released) or the local deadline passed.
	ErrLeaseLost = errors.New("coordd: lease lost")
	// ErrLeaseReleased: the lease was released by its holder.
	ErrLeaseReleased = errors.New("coordd: lease released")
	// ErrStaleToken: a fencing token is not the current generation, or is
	// below the highest a resource accepted.
	ErrStaleToken = errors.New("coordd: stale fencing token")
	// ErrLeaseNotFound: no lease of that name exists.
	ErrLeaseNotFound = errors.New("coordd: lease not found")
	// ErrResourceLeaseMismatch: the resource is fenced by another lease.
	ErrResourceLeaseMismatch = errors.New("coordd: resource fenced by another lease")
	// ErrWindowCompleted: the window was completed by someone else.
	ErrWindowCompleted = errors.New("coordd: window already completed")
	// ErrWindowNotClaimed: complete needs a claim by the same holder first.
	ErrWindowNotClaimed = errors.New("coordd: window not claimed by this holder")
	// ErrInvalidArgument: the server rejected the input.
	ErrInvalidArgument = errors.New("coordd: invalid argument")
	// ErrNotFound: a read found nothing.
	ErrNotFound = errors.New("coordd: not found")
	// ErrUnavailable: no leader could be reached before the context ended.
	ErrUnavailable = errors.New("coordd: unavailable")
	// ErrInvalidToken: a token string is malformed (coorderr.ErrInvalidToken).
	ErrInvalidToken = coorderr.ErrInvalidToken
	// ErrUnknownOutcome: the call may have been applied (the connection or
	// leadership was lost after it was sent, or the context ended while it
	// was in flight). Retry it with the same request id (AcquireRequestID)
	// or idempotency key to learn the outcome without a second effect.
	ErrUnknownOutcome = errors.New("coordd: outcome unknown")
	// ErrUnauthenticated: the cluster runs mutual TLS and this client
	// presented no certificate it accepts.
	ErrUnauthenticated = errors.New("coordd: unauthenticated")
	// ErrPermissionDenied: the ACL does not allow this identity the call
	// (the *Error's Metadata["rule"] names the rule), or the lease is bound
	// to another identity.
	ErrPermissionDenied = errors.New("coordd: permission denied")
	// ErrResourceExhausted: a per-identity limit (live leases, request
	// rate, KeepAlive streams) refused the call.
	ErrResourceExhausted = errors.New("coordd: limit exceeded")
	// ErrTooEarly: a claim before its not-before time on the cluster's clock
	// (ClaimNotBefore); RetryAfter says how long until it.
	ErrTooEarly = errors.New("coordd: too early")

	// The job queue's refusals (proto/coord/v1/queue.proto).

	// ErrJobNotFound: no such job (never submitted, or pruned). It wraps
	// ErrNotFound, so errors.Is(err, ErrNotFound) holds too.
	ErrJobNotFound = fmt.Errorf("coordd: job not found: %w", ErrNotFound)
	// ErrAttemptLost: the attempt is not the job's live one: its
	// visibility timeout passed without a heartbeat (ATTEMPT_EXPIRED), a
	// later attempt was handed out, it already ended or was handed to
	// another worker (ATTEMPT_LOST).
	ErrAttemptLost = errors.New("coordd: job attempt lost")
	// ErrJobCancelled: the job was cancelled during the attempt.
	ErrJobCancelled = errors.New("coordd: job cancelled")
	// ErrJobFinished: Cancel of a succeeded or dead job, Retry of a
	// succeeded one.
	ErrJobFinished = errors.New("coordd: job finished")
	// ErrJobRunning: Retry of a running job.
	ErrJobRunning = errors.New("coordd: job running")

	// Schedules' refusals (proto/coord/v1/schedules.proto).

	// ErrScheduleNotFound: no schedule has that name (never created, or
	// its tombstone was pruned), or a pause, resume or trigger of a deleted
	// schedule. It wraps ErrNotFound.
	ErrScheduleNotFound = fmt.Errorf("coordd: schedule not found: %w", ErrNotFound)
	// ErrScheduleOverlap: a trigger of a FORBID schedule while the job of
	// its previous occurrence is not final.
	ErrScheduleOverlap = errors.New("coordd: schedule overlap")
	// ErrScheduleExists: a create (CreateSchedule, create_only) of a name
	// a live schedule has with another definition. Change it with
	// UpdateSchedule.
	ErrScheduleExists = errors.New("coordd: schedule exists")
	// ErrScheduleRevisionMismatch: a put with expected_revision of a
	// schedule that changed since it was read (the *Error's
	// Metadata["revision"] is the current revision).
	ErrScheduleRevisionMismatch = errors.New("coordd: schedule changed since it was read")
)

// RetryAfter is how long the server said to wait (ErrTooEarly), or 0.
func RetryAfter(err error) time.Duration {
	return time.Duration(metaUint(err, "wait_ms")) * time.Millisecond
}

// unknownOutcomeError marks a final error after an attempt whose outcome is
// unknown; it matches ErrUnknownOutcome and the underlying error.
type unknownOutcomeError struct{ err error }

func (e *unknownOutcomeError) Error() string   { return e.err.Error() + " (outcome unknown)" }
func (e *unknownOutcomeError) Unwrap() []error { return []error{ErrUnknownOutcome, e.err} }

// reasonSentinels maps server reasons to sentinels.
var reasonSentinels = map[coorderr.Reason]error{
	coorderr.LeaseLost:                ErrLeaseLost,
	coorderr.LeaseExpired:             ErrLeaseLost,
	coorderr.LeaseReleased:            ErrLeaseLost,
	coorderr.LeaseNotFound:            ErrLeaseNotFound,
	coorderr.StaleToken:               ErrStaleToken,
	coorderr.ResourceLeaseMismatch:    ErrResourceLeaseMismatch,
	coorderr.WindowCompleted:          ErrWindowCompleted,
	coorderr.WindowNotClaimed:         ErrWindowNotClaimed,
	coorderr.InvalidArgument:          ErrInvalidArgument,
	coorderr.NotFound:                 ErrNotFound,
	coorderr.Unauthenticated:          ErrUnauthenticated,
	coorderr.PermissionDenied:         ErrPermissionDenied,
	coorderr.IdentityMismatch:         ErrPermissionDenied,
	coorderr.LeaseLimit:               ErrResourceExhausted,
	coorderr.RateLimited:              ErrResourceExhausted,
	coorderr.StreamLimit:              ErrResourceExhausted,
	coorderr.WaitLimit:                ErrResourceExhausted,
	coorderr.TooEarly:                 ErrTooEarly,
	coorderr.JobNotFound:              ErrJobNotFound,
	coorderr.AttemptLost:              ErrAttemptLost,
	coorderr.AttemptExpired:           ErrAttemptLost,
	coorderr.JobCancelled:             ErrJobCancelled,
	coorderr.JobFinished:              ErrJobFinished,
	coorderr.JobRunning:               ErrJobRunning,
	coorderr.ScheduleNotFound:         ErrScheduleNotFound,
	coorderr.ScheduleOverlap:          ErrScheduleOverlap,
	coorderr.ScheduleExists:           ErrScheduleExists,
	coorderr.ScheduleRevisionMismatch: ErrScheduleRevisionMismatch,
	coorderr.WatchIndexCompacted:      ErrWatchCompacted,
}

// Error is a refusal from coordd: the gRPC code, the ErrorInfo reason
// (LEASE_LOST, STALE_TOKEN, …: a coord.v1.ErrorReason as sent, see
// coorderr) and its metadata (current_generation, max_generation,
// completed_by, field, …).
type Error struct {
	Code     codes.Code
	Reason   string
	Message  string
	Metadata map[string]string
	sentinel error
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("coordd: %s: %s", e.Reason, e.Message)
	}
	return fmt.Sprintf("coordd: %s: %s", e.Code, e.Message)
}

// Unwrap returns the sentinel, so errors.Is(err, ErrStaleToken) works.
func (e *Error) Unwrap() error { return e.sentinel }

// NotAcquiredError tells who holds a lease that could not be acquired.
type NotAcquiredError struct {
	Name       string
	Owner      string
	Generation uint64
	Remaining  time.Duration
}

func (e *NotAcquiredError) Error() string {
	return fmt.Sprintf("coordd: lease %q is held by %q (generation %d) for %s more", e.Name, e.Owner, e.Generation, e.Remaining)
}

func (e *NotAcquiredError) Unwrap() error { return ErrNotAcquired }

// fromStatus turns a gRPC error into an *Error wrapping its sentinel.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, info := coorderr.Info(err)
	if st == nil {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message()}
	if info != nil {
		e.Reason, e.Metadata = info.GetReason(), info.GetMetadata()
		e.sentinel = reasonSentinels[coorderr.ReasonOf(err)]
	}
	if e.sentinel == nil {
		switch st.Code() {
		case codes.Unavailable:
			e.sentinel = ErrUnavailable
			if tlsFailure(st) {
				e.sentinel = ErrUnauthenticated
			}
		case codes.InvalidArgument:
			e.sentinel = ErrInvalidArgument
		case codes.NotFound:
			e.sentinel = ErrNotFound
		case codes.Unauthenticated:
			e.sentinel = ErrUnauthenticated
		case codes.PermissionDenied:
			e.sentinel = ErrPermissionDenied
		case codes.ResourceExhausted:
			e.sentinel = ErrResourceExhausted
		}
	}
	return e
}

// tlsFailure reports whether a transport error is a failed TLS handshake
// (no certificate, one from another CA, an untrusted server).
func tlsFailure(st *status.Status) bool {
	if st.Code() != codes.Unavailable {
		return false
	}
	m := st.Message()
	return strings.Contains(m, "tls: ") || strings.Contains(m, "x509: ") || strings.Contains(m, "authentication handshake failed")
}

// metaUint reads a numeric metadata field of an *Error.
func metaUint(err error, key string) uint64 {
	var e *Error
	if errors.As(err, &e) {
		v, _ := strconv.ParseUint(e.Metadata[key], 10, 64)
		return v
	}
	return 0
}
