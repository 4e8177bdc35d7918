"""The job queue (``client.jobs``) and schedules (``client.schedules``).

Retried after an unknown outcome: submit (every job has a unique key — the
caller's, or ``auto:<random>`` generated here — and a repeat answers the
first job, ``duplicate``), get, list, cancel, schedule put/pause/resume.
Not retried once sent: ``retry`` (a repeat after the job died again would
revive it twice) and ``trigger``.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence

from . import _wire, tracing
from ._batch import Batcher
from ._wire import Instant, enum_out, to_int
from .types import Job, Schedule, SubmittedJob

if TYPE_CHECKING:
    from .client import Client

MAX_BATCH = 1000


@dataclass
class NewJob:
    """A job to submit. ``at`` (a datetime or epoch seconds) or ``after``
    (seconds) delay it; neither: now. Durations are seconds."""

    queue: str
    kind: str
    args: Any = None
    at: Optional[Instant] = None
    after: Optional[float] = None
    unique_key: str = ""
    priority: int = 0
    max_attempts: int = 0
    visibility_timeout: Optional[float] = None
    backoff_initial: Optional[float] = None
    backoff_max: Optional[float] = None
    backoff_factor: float = 0.0
    labels: Dict[str, str] = field(default_factory=dict)
    target: Optional["Target"] = None
    max_run: Optional[float] = None  # seconds: each attempt ends at its start + max_run, heartbeats or not
    #: The job's W3C trace context (docs/tracing.md), which its attempts continue. Default:
    #: the current span's when ``opentelemetry`` is importable, else none. Malformed: InvalidArgument.
    traceparent: str = ""
    tracestate: str = ""


@dataclass
class Target:
    """Deliver the job as an HTTP request instead of to a worker (docs/delivery.md):
    ``secret`` names a signing secret of the servers' --delivery-secrets,
    ``timeout`` is one request's (seconds)."""

    url: str
    secret: str = ""
    method: str = ""
    timeout: Optional[float] = None
    headers: Dict[str, str] = field(default_factory=dict)
    retryable_status: List[int] = field(default_factory=list)


def _target_body(w: _wire.Wire, t: Target) -> Dict[str, Any]:
    body: Dict[str, Any] = {"url": t.url}
    for k, v in (("secret", t.secret), ("method", t.method), ("headers", dict(t.headers)),
                 ("retryable_status", list(t.retryable_status))):
        if v:
            body[k] = v
    w.duration(body, "timeout", t.timeout)
    return body


def _job_body(w: _wire.Wire, j: NewJob) -> Dict[str, Any]:
    from .client import new_request_id  # noqa: PLC0415

    body: Dict[str, Any] = {"queue": j.queue, "kind": j.kind, "unique_key": j.unique_key or "auto:" + new_request_id()}
    if j.args is not None:
        body["args"] = w.payload(j.args)
    w.instant(body, "run_at", j.at)
    w.duration(body, "delay", j.after)
    w.duration(body, "visibility_timeout", j.visibility_timeout)
    w.duration(body, "backoff_initial", j.backoff_initial)
    w.duration(body, "backoff_max", j.backoff_max)
    w.duration(body, "max_run", j.max_run)
    if j.priority:
        body["priority"] = j.priority
    if j.max_attempts:
        body["max_attempts"] = j.max_attempts
    if j.backoff_factor:
        body["backoff_factor"] = j.backoff_factor
    if j.labels:
        body["labels"] = dict(j.labels)
    if j.target is not None:
        body["target"] = _target_body(w, j.target)
    if j.traceparent or j.tracestate:
        body["traceparent"], body["tracestate"] = j.traceparent, j.tracestate
    else:
        current = tracing.current_traceparent()
        if current is not None:
            body["traceparent"], body["tracestate"] = current
    return body


class Jobs:
    def __init__(self, client: "Client", coalesce: int = 0) -> None:
        """``coalesce``: how many submit requests may be in flight before
        concurrent submits queue up and share the next one (0: off)."""
        self._c = client
        self._batcher: Optional[Batcher[Dict[str, Any]]] = None
        if coalesce > 0:
            self._batcher = Batcher(self._send, max_in_flight=coalesce, name="coordd-submit")

    def _send(self, jobs: List[Dict[str, Any]], timeout: Optional[float]) -> List[Any]:
        d = self._c._tx.call("POST", "/v1/queue/jobs", {"jobs": jobs}, idempotent=True, timeout=timeout)
        return list(d.get("jobs") or [])

    def submit(self, queue: str, kind: str, args: Any = None, *, timeout: Optional[float] = None,
               **options: Any) -> SubmittedJob:
        """Submits one job (options: the fields of :class:`NewJob`: ``at``,
        ``after``, ``unique_key``, ``max_attempts``, ``visibility_timeout``, ...).

        Concurrent calls (threads) of one client share one request (the
        client's ``coalesce``), each with its own answer or error.
        ``timeout`` (seconds) bounds this call's wait: :class:`Unavailable`
        if its request had not left (nothing submitted), else
        :class:`OutcomeUnknown` (submit again: the unique key answers the job)."""
        job = NewJob(queue, kind, args, **options)
        if self._batcher is None:
            w = self._c._wire
            d = self._c._tx.call("POST", "/v1/queue/jobs", {"jobs": [_job_body(w, job)]}, idempotent=True, timeout=timeout)
            return SubmittedJob.of(w, (d.get("jobs") or [{}])[0])
        body = _job_body(self._c._wire, job)  # in the caller's thread: its trace context
        return SubmittedJob.of(self._c._wire, self._batcher.call(body, len(json.dumps(body, separators=(",", ":"))), timeout))

    def _close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()

    def submit_batch(self, jobs: Sequence[NewJob]) -> List[SubmittedJob]:
        """Submits jobs in calls of up to 1,000, in order; each call is all or
        nothing (one bad job refuses it, ``metadata["index"]`` says which)."""
        w = self._c._wire
        out: List[SubmittedJob] = []
        for i in range(0, len(jobs), MAX_BATCH):
            body = {"jobs": [_job_body(w, j) for j in jobs[i:i + MAX_BATCH]]}
            d = self._c._tx.call("POST", "/v1/queue/jobs", body, idempotent=True)
            out += [SubmittedJob.of(w, s) for s in d.get("jobs") or []]
        return out

    def get(self, job_id: int, *, stale: bool = False) -> Job:
        d = self._c._tx.call("GET", f"/v1/queue/jobs/{int(job_id)}", query={"stale": stale or None}, idempotent=True)
        return Job.of(self._c._wire, d.get("job") or {})

    def list(self, queue: str = "", *, state: str = "", kind: str = "", label: str = "",
             page_size: int = 0) -> Iterator[Job]:
        """Jobs by queue, state (``"available"``, ``"DEAD"``, ...), kind, label (``k=v``)."""
        q = {"queue": queue or None, "state": enum_out("JOB_STATE_", state) if state else None,
             "kind": kind or None, "label": label or None, "page_size": page_size or None}
        for d in self._c._pages("/v1/queue/jobs", "jobs", q):
            yield Job.of(self._c._wire, d)

    def cancel(self, job_id: int) -> Job:
        d = self._c._tx.call("POST", f"/v1/queue/jobs/{int(job_id)}/cancel", {}, idempotent=True)
        return Job.of(self._c._wire, d.get("job") or {})

    def retry(self, job_id: int) -> Job:
        """Makes a dead, cancelled or retryable job available again (not retried
        after an unknown outcome)."""
        d = self._c._tx.call("POST", f"/v1/queue/jobs/{int(job_id)}/retry", {}, idempotent=False)
        return Job.of(self._c._wire, d.get("job") or {})

    def stats(self, queue: str = "") -> List[Dict[str, Any]]:
        d = self._c._tx.call("GET", "/v1/queue/stats", query={"queue": queue or None}, idempotent=True)
        return [{k: (to_int(v) if isinstance(v, str) and v.isdigit() else v) for k, v in s.items()}
                for s in d.get("queues") or []]


class Schedules:
    def __init__(self, client: "Client") -> None:
        self._c = client

    def put(self, name: str, schedule: str, *, queue: str, kind: str, args: Any = None, time_zone: str = "",
            overlap: str = "", window_layout: str = "", window_shift_days: int = 0,
            starting_deadline: Optional[float] = None, catch_up: Optional[float] = None,
            complete_within: Optional[float] = None, max_attempts: int = 0,
            visibility_timeout: Optional[float] = None, labels: Optional[Dict[str, str]] = None,
            create_only: bool = False, expected_revision: int = 0) -> Schedule:
        """Creates or replaces the schedule ``name`` (cron ``schedule`` in
        ``time_zone``) of jobs ``queue``/``kind`` with ``args``. ``overlap``:
        ``"forbid"``, ``"allow"``, ``"replace"``."""
        w = self._c._wire
        job: Dict[str, Any] = {"queue": queue, "kind": kind}
        if args is not None:
            job["args"] = w.payload(args)
        if max_attempts:
            job["max_attempts"] = max_attempts
        w.duration(job, "visibility_timeout", visibility_timeout)
        if labels:
            job["labels"] = dict(labels)
        spec: Dict[str, Any] = {"name": name, "schedule": schedule, "job": job}
        if time_zone:
            spec["time_zone"] = time_zone
        if overlap:
            spec["overlap"] = enum_out("SCHEDULE_OVERLAP_", overlap)
        if window_layout:
            spec["window_layout"] = window_layout
        if window_shift_days:
            spec["window_shift_days"] = window_shift_days
        w.duration(spec, "starting_deadline", starting_deadline)
        w.duration(spec, "catch_up", catch_up)
        w.duration(spec, "complete_within", complete_within)
        q = {"create_only": create_only or None, "expected_revision": expected_revision or None}
        d = self._c._tx.call("POST", "/v1/schedules", spec, query=q, idempotent=True)
        return Schedule.of(w, d.get("schedule"))

    def get(self, name: str, *, next: int = 0) -> Schedule:  # noqa: A002 - the API's parameter
        """The schedule; with ``next`` its next occurrences are in ``raw["next"]``."""
        d = self._c._tx.call("GET", self._path(name), query={"next": next or None}, idempotent=True)
        s = Schedule.of(self._c._wire, d.get("schedule"))
        s.raw = d
        return s

    def list(self, prefix: str = "", *, show_deleted: bool = False) -> Iterator[Schedule]:
        q = {"prefix": prefix or None, "show_deleted": show_deleted or None}
        for d in self._c._pages("/v1/schedules", "schedules", q):
            yield Schedule.of(self._c._wire, d)

    def pause(self, name: str) -> Schedule:
        return self._action(name, "pause", True)

    def resume(self, name: str) -> Schedule:
        return self._action(name, "resume", True)

    def trigger(self, name: str) -> Schedule:
        """An extra occurrence now (not retried after an unknown outcome)."""
        return self._action(name, "trigger", False)

    def delete(self, name: str) -> None:
        self._c._tx.call("DELETE", self._path(name), idempotent=True)

    def _action(self, name: str, verb: str, idempotent: bool) -> Schedule:
        d = self._c._tx.call("POST", self._path(name) + "/" + verb, {}, idempotent=idempotent)
        return Schedule.of(self._c._wire, d.get("schedule"))

    @staticmethod
    def _path(name: str) -> str:
        return "/v1/schedules/" + urllib.parse.quote(name, safe="")
