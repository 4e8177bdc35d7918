"""Typed errors: every refusal of coordd is a :class:`CoorddError` subclass
chosen by its reason (``proto/coord/v1/errors.proto`` lists them), with the
gRPC code name, the reason, the message and the metadata of the answer.

``except coordd.StaleToken``, ``except coordd.LeaseLost``, ... or read
``err.reason`` / ``err.metadata``. :class:`OutcomeUnknown` (and
``err.outcome_unknown``) marks a call that may have been applied: retry it
with the same request id / idempotency key / unique key to learn the outcome.
"""

from __future__ import annotations

from typing import Dict, Optional, Type


class CoorddError(Exception):
    """A refusal from coordd, or a failure to reach it.

    ``code``: the gRPC code name (``FAILED_PRECONDITION``); ``reason``: the
    ErrorReason without its prefix (``STALE_TOKEN``; ``""`` when the answer
    carried none); ``metadata``: the ErrorInfo metadata (strings);
    ``http_status``: the HTTP status (0 when no answer came);
    ``outcome_unknown``: the call may have been applied.
    """

    outcome_unknown = False

    def __init__(self, message: str, *, code: str = "UNKNOWN", reason: str = "",
                 metadata: Optional[Dict[str, str]] = None, http_status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.http_status = http_status

    def __str__(self) -> str:
        head = self.reason or self.code
        facts = ", ".join(f"{k}={v}" for k, v in sorted(self.metadata.items()))
        return f"{head}: {self.message}" + (f" ({facts})" if facts else "")

    @property
    def field(self) -> Optional[str]:
        """The request field at fault (``metadata["field"]``), if named."""
        return self.metadata.get("field")


class InvalidArgument(CoorddError):
    """Bad input (``INVALID_ARGUMENT``); ``field`` names the field when known."""


class InvalidToken(InvalidArgument):
    """A fencing token string is malformed (checked locally, before any call)."""


class NotFound(CoorddError):
    """A read found nothing, or no such route."""


class LeaseNotFound(NotFound):
    """No lease of that name exists."""


class JobNotFound(NotFound):
    """No job has that id."""


class ScheduleNotFound(NotFound):
    """No schedule has that name."""


class NotAcquired(CoorddError):
    """The lease is held by another owner (acquire without ``wait``).

    ``holder``, ``generation`` and ``remaining`` (seconds) describe the holder.
    """

    def __init__(self, name: str, holder: str, generation: int, remaining: float) -> None:
        super().__init__(f"lease {name!r} is held by {holder!r} (generation {generation}) for {remaining:.3f}s more",
                         code="OK", reason="NOT_ACQUIRED",
                         metadata={"current_owner": holder, "current_generation": str(generation)})
        self.name, self.holder, self.generation, self.remaining = name, holder, generation, remaining


class LeaseLost(CoorddError):
    """The lease is gone: a renewal or an operation was refused (``LEASE_LOST``,
    ``LEASE_EXPIRED``, ``LEASE_RELEASED``), or its local deadline passed
    (``reason == "LOCAL_DEADLINE"``) before a renewal was acknowledged."""


class StaleToken(CoorddError):
    """The fencing token is not current, or below the resource's highest."""


class ResourceLeaseMismatch(CoorddError):
    """The resource is fenced by another lease."""


class WindowCompleted(CoorddError):
    """The window was completed by someone else."""


class WindowNotClaimed(CoorddError):
    """Completing a window needs a claim by the same holder first."""


class TooEarly(CoorddError):
    """A claim before its not-before time; ``retry_after`` is in seconds."""

    @property
    def retry_after(self) -> float:
        try:
            return int(self.metadata.get("wait_ms", "0")) / 1000
        except ValueError:
            return 0.0


class Unauthenticated(CoorddError):
    """The cluster runs mutual TLS and no accepted client certificate was
    presented (also a failed TLS handshake)."""


class PermissionDenied(CoorddError):
    """The ACL denies the call (``metadata["rule"]``), or the lease is bound to
    another identity (``IDENTITY_MISMATCH``)."""


class ResourceExhausted(CoorddError):
    """A per-identity limit or quota refused the call."""


class Unavailable(CoorddError):
    """No leader could be reached before the call's time ran out; nothing was
    done (a call that may have been applied raises :class:`OutcomeUnknown`)."""


class OutcomeUnknown(Unavailable):
    """The call may have been applied: the answer was lost after it was sent
    (a timeout, a lost connection, ``TIMEOUT``, ``LEADERSHIP_LOST``). Repeat it
    with the same request id / idempotency key to learn the outcome."""

    outcome_unknown = True


class AttemptLost(CoorddError):
    """The job attempt is not the live one (``ATTEMPT_LOST``, ``ATTEMPT_EXPIRED``)."""


class JobCancelled(CoorddError):
    """The job was cancelled during the attempt."""


class JobFinished(CoorddError):
    """Cancel of a finished job, or retry of a succeeded one."""


class JobRunning(CoorddError):
    """Retry of a running job."""


class ScheduleOverlap(CoorddError):
    """A trigger of a FORBID schedule whose previous job is not final."""


class ScheduleExists(CoorddError):
    """A create of a name a live schedule has with another definition."""


class ScheduleRevisionMismatch(CoorddError):
    """The schedule changed since it was read (``metadata["revision"]``)."""


_BY_REASON: Dict[str, Type[CoorddError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "LEASE_NOT_FOUND": LeaseNotFound,
    "LEASE_LOST": LeaseLost,
    "LEASE_EXPIRED": LeaseLost,
    "LEASE_RELEASED": LeaseLost,
    "STALE_TOKEN": StaleToken,
    "RESOURCE_LEASE_MISMATCH": ResourceLeaseMismatch,
    "WINDOW_COMPLETED": WindowCompleted,
    "WINDOW_NOT_CLAIMED": WindowNotClaimed,
    "IDENTITY_MISMATCH": PermissionDenied,
    "PERMISSION_DENIED": PermissionDenied,
    "UNAUTHENTICATED": Unauthenticated,
    "LEASE_LIMIT": ResourceExhausted,
    "RATE_LIMITED": ResourceExhausted,
    "STREAM_LIMIT": ResourceExhausted,
    "WAIT_LIMIT": ResourceExhausted,
    "WATCH_LIMIT": ResourceExhausted,
    "JOB_QUOTA": ResourceExhausted,
    "SCHEDULE_QUOTA": ResourceExhausted,
    "TOO_EARLY": TooEarly,
    "NOT_LEADER": Unavailable,
    "NO_LEADER": Unavailable,
    "SHUTTING_DOWN": Unavailable,
    "LEADERSHIP_LOST": OutcomeUnknown,
    "TIMEOUT": OutcomeUnknown,
    "JOB_NOT_FOUND": JobNotFound,
    "ATTEMPT_LOST": AttemptLost,
    "ATTEMPT_EXPIRED": AttemptLost,
    "JOB_CANCELLED": JobCancelled,
    "JOB_FINISHED": JobFinished,
    "JOB_RUNNING": JobRunning,
    "SCHEDULE_NOT_FOUND": ScheduleNotFound,
    "SCHEDULE_OVERLAP": ScheduleOverlap,
    "SCHEDULE_EXISTS": ScheduleExists,
    "SCHEDULE_REVISION_MISMATCH": ScheduleRevisionMismatch,
}

_BY_CODE: Dict[str, Type[CoorddError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": OutcomeUnknown,
}


def from_answer(http_status: int, body: object) -> CoorddError:
    """The typed error of an error answer (``{"code","reason","message","metadata"}``)."""
    b = body if isinstance(body, dict) else {}
    code = str(b.get("code") or "UNKNOWN")
    reason = str(b.get("reason") or "")
    meta = {str(k): str(v) for k, v in (b.get("metadata") or {}).items()}
    msg = str(b.get("message") or f"HTTP {http_status}")
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code) or CoorddError
    return cls(msg, code=code, reason=reason, metadata=meta, http_status=http_status)


def from_item(item: object) -> Optional[CoorddError]:
    """The typed error of a batch item's ``error`` (``{"reason","message","metadata"}``), or None."""
    if not isinstance(item, dict) or not item.get("reason"):
        return None
    return from_answer(200, {"code": "FAILED_PRECONDITION", **item})
