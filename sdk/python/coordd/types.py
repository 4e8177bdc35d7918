"""The records coordd answers with, as Python values: ints for 64-bit
integers, aware UTC datetimes for instants, seconds (float) for durations,
JSON values for payloads, short upper-case names for enums. ``raw`` keeps
the answer's JSON object as it came."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ._wire import Wire, enum_in, to_int


@dataclass
class LeaseInfo:
    """A lease record (``GET /v1/leases/{name}``)."""

    name: str
    owner: str
    generation: int
    ttl: Optional[float]
    expires_in: Optional[float]
    released: bool
    expired: bool
    renewals: int
    acquired_at: Optional[_dt.datetime]
    value: Any
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def token(self) -> str:
        return f"{self.name}:{self.generation}"

    @classmethod
    def of(cls, w: Wire, d: Mapping[str, Any]) -> "LeaseInfo":
        return cls(name=d.get("name", ""), owner=d.get("owner", ""), generation=to_int(d.get("generation")),
                   ttl=w.read_duration(d, "ttl"), expires_in=w.read_duration(d, "expires_in"),
                   released=bool(d.get("released")), expired=bool(d.get("expired")),
                   renewals=to_int(d.get("renewals")), acquired_at=w.read_instant(d, "acquired_at"),
                   value=w.read_payload(d.get("value")), raw=d)


@dataclass
class Commit:
    """An accepted fenced commit. ``duplicate``: the key was accepted before;
    ``payload`` and ``generation`` are then the first commit's."""

    accepted: bool
    duplicate: bool
    generation: int
    max_generation: int
    payload: Any
    dry_run: bool

    @classmethod
    def of(cls, w: Wire, d: Mapping[str, Any]) -> "Commit":
        return cls(accepted=bool(d.get("accepted")), duplicate=bool(d.get("duplicate")),
                   generation=to_int(d.get("generation")), max_generation=to_int(d.get("max_generation")),
                   payload=w.read_payload(d.get("payload")), dry_run=bool(d.get("dry_run")))


@dataclass
class Window:
    """A job's named run (``daily-close/2026-09-25``), claimed under a lease."""

    job: str
    window: str
    state: str  # INCOMPLETE, COMPLETED
    owner: str
    generation: int
    attempts: int
    result: Any
    started_at: Optional[_dt.datetime]
    completed_at: Optional[_dt.datetime]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def of(cls, w: Wire, d: Optional[Mapping[str, Any]]) -> "Window":
        d = d or {}
        return cls(job=d.get("job", ""), window=d.get("window", ""), state=enum_in("WINDOW_STATE_", d.get("state")),
                   owner=d.get("owner", ""), generation=to_int(d.get("generation")), attempts=to_int(d.get("attempts")),
                   result=w.read_payload(d.get("result")),
                   started_at=w.read_instant(d, "started_at"), completed_at=w.read_instant(d, "completed_at"), raw=d)


@dataclass
class Resource:
    """A fenced resource: the highest generation it accepted, its commits."""

    resource: str
    lease_name: str
    max_generation: int
    commits: int
    last_idempotency_key: str
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "Resource":
        return cls(resource=d.get("resource", ""), lease_name=d.get("lease_name", ""),
                   max_generation=to_int(d.get("max_generation")), commits=to_int(d.get("commits")),
                   last_idempotency_key=d.get("last_idempotency_key", ""), raw=d)


@dataclass
class JobAttempt:
    number: int
    outcome: str  # RUNNING, SUCCEEDED, FAILED, LAPSED, CANCELLED
    worker_id: str
    error: str
    token: str
    result: Any
    started_at: Optional[_dt.datetime]
    deadline: Optional[_dt.datetime]
    run_until: Optional[_dt.datetime] = None  # max_run: when the server ends the attempt

    @classmethod
    def of(cls, w: Wire, d: Optional[Mapping[str, Any]]) -> "JobAttempt":
        d = d or {}
        return cls(number=to_int(d.get("number")), outcome=enum_in("ATTEMPT_OUTCOME_", d.get("outcome")),
                   worker_id=d.get("worker_id", ""), error=d.get("error", ""), token=d.get("token", ""),
                   result=w.read_payload(d.get("result")), started_at=w.read_instant(d, "started_at"),
                   deadline=w.read_instant(d, "deadline"), run_until=w.read_instant(d, "run_until"))


@dataclass
class Job:
    """A queued job (``GET /v1/queue/jobs/{id}``)."""

    id: int
    queue: str
    kind: str
    args: Any
    state: str  # SCHEDULED, AVAILABLE, RUNNING, RETRYABLE, SUCCEEDED, CANCELLED, DEAD
    run_at: Optional[_dt.datetime]
    attempts: int
    max_attempts: int
    unique_key: str
    visibility_timeout: Optional[float]
    labels: Dict[str, str]
    attempt_log: List[JobAttempt]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)
    #: The job's W3C trace context (docs/tracing.md); "": none.
    traceparent: str = ""
    tracestate: str = ""

    @classmethod
    def of(cls, w: Wire, d: Mapping[str, Any]) -> "Job":
        return cls(id=to_int(d.get("id")), queue=d.get("queue", ""), kind=d.get("kind", ""),
                   args=w.read_payload(d.get("args")), state=enum_in("JOB_STATE_", d.get("state")),
                   run_at=w.read_instant(d, "run_at"), attempts=to_int(d.get("attempts")),
                   max_attempts=to_int(d.get("max_attempts")), unique_key=d.get("unique_key", ""),
                   visibility_timeout=w.read_duration(d, "visibility_timeout"), labels=dict(d.get("labels") or {}),
                   attempt_log=[JobAttempt.of(w, a) for a in d.get("attempt_log") or []], raw=d,
                   traceparent=d.get("traceparent", ""), tracestate=d.get("tracestate", ""))


@dataclass
class SubmittedJob:
    """The answer for one submitted job: ``duplicate`` when its unique key was used before."""

    id: int
    state: str
    run_at: Optional[_dt.datetime]
    duplicate: bool

    @classmethod
    def of(cls, w: Wire, d: Mapping[str, Any]) -> "SubmittedJob":
        return cls(id=to_int(d.get("id")), state=enum_in("JOB_STATE_", d.get("state")),
                   run_at=w.read_instant(d, "run_at"), duplicate=bool(d.get("duplicate")))


@dataclass
class Schedule:
    """A schedule: its spec (as sent, ``raw["spec"]``) and its state."""

    name: str
    schedule: str
    time_zone: str
    revision: int
    paused: bool
    deleted: bool
    next_due: Optional[_dt.datetime]
    jobs_created: int
    spec: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def of(cls, w: Wire, d: Optional[Mapping[str, Any]]) -> "Schedule":
        d = d or {}
        spec = d.get("spec") or {}
        return cls(name=spec.get("name", ""), schedule=spec.get("schedule", ""), time_zone=spec.get("time_zone", ""),
                   revision=to_int(d.get("revision")), paused=bool(d.get("paused")), deleted=bool(d.get("deleted")),
                   next_due=w.read_instant(d, "next_due"), jobs_created=to_int(d.get("jobs_created")), spec=spec, raw=d)
