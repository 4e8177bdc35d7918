"""A job worker: long-poll fetch, heartbeats, complete/fail, graceful stop.

::

    worker = coordd.Worker(client, "billing", concurrency=4)

    @worker.handle("close-day")
    def close_day(job, ctx):
        for store in job.args["stores"]:
            ctx.check()                           # raises once the attempt is lost
            ctx.fenced_commit(f"commissions/{store}", f"job-{job.id}-{store}", {"store": store})
        return {"stores": len(job.args["stores"])}  # the job's result

    worker.run()          # until SIGINT/SIGTERM; or worker.start() ... worker.stop()

A fetched attempt is a claim. Heartbeats go out at a third of the job's
visibility timeout (VT), for every running claim due at about the same time
in one call. The claim's local deadline is the send time of the last
acknowledged heartbeat (or of the fetch) + VT − margin (VT/10 within
[50 ms, 2 s]): when it passes, or a heartbeat is refused (``ATTEMPT_LOST``,
``ATTEMPT_EXPIRED``, ``JOB_CANCELLED``), ``ctx.cancelled`` is set before
the server could hand the job to another worker, and nothing more is sent
for it. A handler's return value completes the job (its result, a JSON
value); an exception fails the attempt, retryable unless it is
:class:`Permanent`. ``stop()`` stops fetching, lets running handlers finish
until its timeout, then hands back the attempts still running (failed,
retryable, ``worker shutdown``) so they are due again after their backoff.
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import signal
import socket
import threading
import time
import traceback
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from . import errors, tracing
from ._batch import Batcher
from .lease import Deadlines, margin_for
from .types import Commit, Job, JobAttempt

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("coordd.worker")

Handler = Callable[[Job, "JobContext"], Any]


class Permanent(Exception):
    """Raise it (or ``raise Permanent(...) from err``) to fail a job without a retry."""


class JobContext:
    """What a handler gets with its job: ``token`` (``job:<id>:<attempt>``) for
    fenced writes, ``cancelled`` (a :class:`threading.Event`) set when the
    attempt is lost, cancelled or handed back; ``check()`` raises then."""

    def __init__(self, worker: "Worker", job: Job, attempt: JobAttempt, sent: float) -> None:
        self.worker = worker
        self.job = job
        self.attempt = attempt.number
        self.token = attempt.token or f"job:{job.id}:{attempt.number}"
        self.cancelled = threading.Event()
        self.error: Optional[errors.CoorddError] = None
        self.vt = job.visibility_timeout or 30.0
        self.margin = margin_for(self.vt)
        self._mu = threading.Lock()
        self._deadline = sent + self.vt - self.margin
        # max_run: the attempt ends at its start + max_run, heartbeats or
        # not; the local deadline never passes sent + max_run - its margin.
        self.run_end: Optional[float] = None
        if attempt.run_until is not None and attempt.started_at is not None:
            mr = (attempt.run_until - attempt.started_at).total_seconds()
            self.run_end = sent + mr - margin_for(mr)
            self._deadline = min(self._deadline, self.run_end)
        self.next_heartbeat = sent + self.vt / 3
        self.state = "running"  # running, reporting, lost, handed-back, done
        #: The job's trace context (``job.traceparent``) is what the attempt continues; this is the
        #: attempt's own span's, sent with the outcome, when opentelemetry records it.
        self.traceparent = ""

    @property
    def deadline(self) -> float:
        """The claim's local deadline, on ``time.monotonic()``."""
        with self._mu:
            return self._deadline

    def renewal_due(self) -> Optional[float]:
        return None  # the worker's heartbeats extend claims, not the keeper

    def _begin_renewal(self) -> None:
        pass

    def _renew(self) -> None:
        pass

    def extend(self, sent: float) -> None:
        with self._mu:
            self._deadline = max(self._deadline, sent + self.vt - self.margin)
            if self.run_end is not None:
                self._deadline = min(self._deadline, self.run_end)
            self.next_heartbeat = sent + self.vt / 3

    def check(self) -> None:
        """Raises the reason the attempt ended (:class:`AttemptLost`,
        :class:`JobCancelled`, ...) once it has."""
        if time.monotonic() >= self.deadline:
            self._expire()
        if self.error is not None:
            raise self.error

    def fenced_commit(self, resource: str, key: Optional[str] = None, payload: Any = None) -> Commit:
        """A write fenced by this attempt's token; a refusal that says the attempt
        is over also ends the claim."""
        try:
            return self.worker.client.fenced_commit(resource, self.token, key, payload)
        except (errors.AttemptLost, errors.JobCancelled, errors.StaleToken, errors.JobNotFound) as e:
            self.end(e)
            raise

    def _expire(self) -> None:
        if self.run_end is not None and self.deadline >= self.run_end:
            self.end(errors.AttemptLost(f"job {self.job.id} attempt {self.attempt}: max_run exceeded: the server ends "
                                        "the attempt now", code="FAILED_PRECONDITION", reason="MAX_RUN_EXCEEDED"))
            return
        self.end(errors.AttemptLost(f"job {self.job.id} attempt {self.attempt}: no heartbeat acknowledged before "
                                    "the local deadline", code="FAILED_PRECONDITION", reason="LOCAL_DEADLINE"))

    def end(self, err: errors.CoorddError, state: str = "lost") -> None:
        """Ends the claim (once): nothing more is sent for it."""
        with self._mu:
            if self.state not in ("running", "reporting"):
                return
            self.state, self.error = state, err
        self.cancelled.set()
        self.worker._forget(self)
        if state == "lost":
            log.warning("job %s attempt %s lost: %s", self.job.id, self.attempt, err)


class Worker:
    """Runs jobs of ``queue`` with the handlers of their kinds, at most
    ``concurrency`` at a time; ``poll_wait`` is the long poll (seconds, ≤ 30).
    ``coalesce``: the outcomes of concurrent handlers share one
    ``/v1/queue/complete`` (and ``/fail``) request — group commit without a
    timer, as the client's submits (True: 1 request in flight; a number:
    that many; False: one request per outcome)."""

    def __init__(self, client: "Client", queue: str = "default", *, concurrency: int = 4,
                 worker_id: Optional[str] = None, poll_wait: float = 5.0, coalesce: Union[bool, int] = True) -> None:
        if not queue or concurrency < 1:
            raise errors.InvalidArgument(f"queue {queue!r} with concurrency {concurrency}", code="INVALID_ARGUMENT",
                                         reason="INVALID_ARGUMENT", metadata={"field": "queue"})
        self.client = client
        self.queue = queue
        self.concurrency = concurrency
        self.id = worker_id or client.owner
        self.poll_wait = min(max(poll_wait, 0.1), 30.0)
        self._handlers: Dict[str, Handler] = {}
        self._mu = threading.Condition()
        self._claims: Dict[Tuple[int, int], JobContext] = {}
        self._free = concurrency
        self._stopping = False
        self._stopped = threading.Event()
        self._running: List[threading.Thread] = []
        self._deadlines = Deadlines()
        self._threads: List[threading.Thread] = []
        self._fetch_tx = client._tx.clone()  # its long poll is cut short by stop()
        from .client import _in_flight  # noqa: PLC0415 - client imports this module

        k = _in_flight(coalesce)
        self._outcomes: Dict[str, Optional[Batcher[Dict[str, Any]]]] = {"completions": None, "failures": None}
        if k > 0:
            for key in self._outcomes:
                self._outcomes[key] = Batcher(functools.partial(self._send_outcomes, key), max_in_flight=k,
                                              name=f"coordd-worker-{key}:{queue}")

    def handle(self, kind: str) -> Callable[[Handler], Handler]:
        """A decorator registering ``fn(job, ctx)`` as the handler of ``kind``."""

        def register(fn: Handler) -> Handler:
            self._handlers[kind] = fn
            return fn

        return register

    # -- lifecycle
    def start(self) -> "Worker":
        for target, name in ((self._fetch_loop, "fetch"), (self._heartbeats, "heartbeat"), (self._watch_cancels, "cancels")):
            t = threading.Thread(target=target, name=f"coordd-worker-{name}:{self.queue}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def run(self, shutdown_timeout: float = 30.0) -> None:
        """Starts, then waits for SIGINT or SIGTERM and stops gracefully (main thread only)."""
        stop = threading.Event()
        old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            while not stop.wait(1.0):
                pass
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.stop(shutdown_timeout)

    def __enter__(self) -> "Worker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stops fetching (a long poll in flight is cut: jobs it was granted lapse
        after their visibility timeout, as if the worker had died), lets running handlers finish for up to
        ``timeout`` seconds, then hands back the attempts still running. True
        when every handler finished."""
        with self._mu:
            self._stopping = True
            self._mu.notify_all()
        self._fetch_tx.abort()
        deadline = time.monotonic() + timeout
        fetcher = self._threads[0] if self._threads else None
        if fetcher is not None:
            fetcher.join(max(deadline - time.monotonic(), 0) + self.poll_wait + 1)
        for t in list(self._running):
            t.join(max(deadline - time.monotonic(), 0))
        with self._mu:
            left = [c for c in self._claims.values() if c.state == "running"]
        for ctx in left:
            self._hand_back(ctx)
        with self._mu:
            self._stopped.set()
            self._mu.notify_all()
        for t in self._threads[1:]:
            t.join(2.0)
        self._fetch_tx.close()
        for b in self._outcomes.values():
            if b is not None:
                b.close()
        return not left

    @property
    def _requests(self) -> Dict[str, int]:
        """The complete and fail requests the coalesced outcomes took (tests)."""
        return {k: b.requests if b is not None else 0 for k, b in self._outcomes.items()}

    def _send_outcomes(self, key: str, items: List[Dict[str, Any]], timeout: Optional[float] = None) -> List[Any]:
        """One complete (key "completions") or fail ("failures") request: per item its
        result, or the error of an item the server refused (a stale attempt, ...)."""
        path = "/v1/queue/complete" if key == "completions" else "/v1/queue/fail"
        d = self.client._tx.call("POST", path, {"worker_id": self.id, key: items}, idempotent=True, timeout=timeout)
        return [errors.from_item(r.get("error")) or r for r in d.get("results") or []]

    # -- fetching
    def _fetch_loop(self) -> None:
        tx, w = self._fetch_tx, self.client._wire
        delay = 0.1
        while True:
            with self._mu:
                while self._free == 0 and not self._stopping:
                    self._mu.wait()
                if self._stopping:
                    return
                n = self._free
            body: Dict[str, Any] = {"queues": [self.queue], "max": min(n, 1000), "worker_id": self.id}
            w.duration(body, "wait", self.poll_wait)
            sent = time.monotonic()
            try:
                d = tx.call("POST", "/v1/queue/fetch", body, idempotent=False, timeout=self.poll_wait + 10,
                            attempt_timeout=self.poll_wait + 5)
            except errors.CoorddError as e:
                # Not repeated: a repeat would hand out more jobs. Jobs of a
                # lost answer (also one stop() cut) lapse after their
                # visibility timeout.
                if self._stopping:
                    return
                log.warning("fetch from %s failed: %s", self.queue, e)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            delay = 0.1
            for cj in d.get("jobs") or []:
                job, att = Job.of(w, cj.get("job") or {}), JobAttempt.of(w, cj.get("attempt"))
                self._start(JobContext(self, job, att, sent))

    def _start(self, ctx: JobContext) -> None:
        with self._mu:
            self._claims[(ctx.job.id, ctx.attempt)] = ctx
            self._free -= 1
            stopping = self._stopping
            if time.monotonic() - (ctx.deadline + ctx.margin - ctx.vt) > ctx.vt / 4:
                ctx.next_heartbeat = time.monotonic()  # a late long poll: heartbeat at once
            self._mu.notify_all()
        self._deadlines.add(ctx)
        if stopping:  # granted as stop began
            self._hand_back(ctx)
            return
        t = threading.Thread(target=self._run, args=(ctx,), name=f"coordd-job:{ctx.job.id}", daemon=True)
        with self._mu:
            self._running = [r for r in self._running if r.is_alive()] + [t]
        t.start()

    def _run(self, ctx: JobContext) -> None:
        fn = self._handlers.get(ctx.job.kind)
        result: Any = None
        failure: Optional[Tuple[str, bool]] = None
        # With opentelemetry importable: the attempt's span, current while the handler runs (coordd/tracing.py).
        span = tracing.start_attempt(ctx.job, ctx.attempt, self.id, ctx.token)
        ctx.traceparent = span.traceparent if span is not None else ""
        error: Optional[BaseException] = None
        if fn is None:
            failure = (f"no handler for kind {ctx.job.kind!r} on worker {self.id}", True)
        else:
            try:
                result = fn(ctx.job, ctx)
            except Permanent as e:
                failure, error = (_describe(e), False), e
            except Exception as e:  # noqa: BLE001 - any failure of the handler fails the attempt
                failure, error = (_describe(e) + "\n\n" + traceback.format_exc()[-3000:], True), e
        if span is not None:
            span.end(error)
        with ctx._mu:
            report = ctx.state == "running"
            if report:
                ctx.state = "reporting"
        with self._mu:
            self._free += 1
            self._mu.notify_all()
        if report:
            self._report(ctx, result, failure)

    def _watch_cancels(self) -> None:
        """Holds one watch (GET /v1/watch, a stream of JSON lines) on the jobs of
        the queue cancelled during an attempt handed to this worker (the
        server filters: job_states CANCELLED, job_worker_id), and ends those
        claims at once: a cancel reaches the handler within about a second,
        not at the next heartbeat. A broken stream resumes where it stopped,
        on the next endpoint; the heartbeats still end what it misses."""
        tx = self.client._tx
        resume: Optional[Tuple[str, str]] = None
        i = 0
        while not self._stopping:
            q = {"prefix": self.queue + "/", "families": "WATCH_FAMILY_QUEUE_JOB", "job_states": "JOB_STATE_CANCELLED",
                 "job_worker_id": self.id}
            if resume is not None:
                q["start_index"], q["start_position"] = resume
            scheme, host, port = tx.endpoints[i % len(tx.endpoints)]
            i += 1
            conn: http.client.HTTPConnection = (http.client.HTTPSConnection(host, port, timeout=1.0, context=tx.ssl)
                                                if scheme == "https" else http.client.HTTPConnection(host, port, timeout=1.0))
            try:
                conn.request("GET", "/v1/watch?" + urllib.parse.urlencode(q), headers={"Accept": "application/json"})
                r = conn.getresponse()
                if r.status != 200:
                    r.read()
                    raise OSError(f"watch answered {r.status}")
                while not self._stopping:
                    try:
                        line = r.readline()
                    except socket.timeout:
                        continue  # an idle watch sends nothing: look at _stopping each second
                    if not line:
                        break
                    msg = json.loads(line)
                    res = msg.get("result")
                    if res is None:
                        break  # the stream's last line, an error: resume
                    if res.get("resume_index") is not None:
                        resume = (str(res.get("resume_index")), str(res.get("resume_position", 0)))
                    for e in res.get("events") or []:
                        self._cancelled(e.get("queue_job") or {})
            except (OSError, http.client.HTTPException, ValueError) as e:
                if not self._stopping:
                    log.debug("job cancellation watch on %s:%s: %s (resuming)", host, port, e)
                    time.sleep(0.2)
            finally:
                conn.close()

    def _cancelled(self, j: Mapping[str, Any]) -> None:
        log_ = j.get("attempt_log") or []

        def short(v: Any, p: str) -> str:  # enums short or full
            return str(v or "").removeprefix(p)

        if j.get("queue") != self.queue or short(j.get("state"), "JOB_STATE_") != "CANCELLED" or not log_:
            return
        a = log_[-1]
        if a.get("worker_id") != self.id or short(a.get("outcome"), "ATTEMPT_OUTCOME_") != "CANCELLED":
            return
        with self._mu:
            ctx = self._claims.get((int(j.get("id", 0)), int(a.get("number", 0))))
        if ctx is not None:
            ctx.end(errors.JobCancelled(f"job {j.get('id')} attempt {a.get('number')} was cancelled: {a.get('error', '')}",
                                        code="FAILED_PRECONDITION", reason="JOB_CANCELLED"))

    def _report(self, ctx: JobContext, result: Any, failure: Optional[Tuple[str, bool]]) -> None:
        w = self.client._wire
        budget = max(ctx.deadline - time.monotonic(), 0.05)
        item: Dict[str, Any] = {"job_id": str(ctx.job.id), "attempt": ctx.attempt}
        if failure is None:
            key = "completions"
            if result is not None:
                item["result"] = w.payload(result)
        else:
            key = "failures"
            item["error"], item["retryable"] = failure[0][:4096], failure[1]
        if ctx.traceparent:
            item["traceparent"] = ctx.traceparent
        batcher = self._outcomes[key]
        try:
            if batcher is not None:
                batcher.call(item, len(json.dumps(item, separators=(",", ":"))), timeout=budget)
            else:
                r = self._send_outcomes(key, [item], timeout=budget)
                if r and isinstance(r[0], errors.CoorddError):
                    raise r[0]
        except errors.CoorddError as e:
            log.warning("job %s attempt %s: outcome not recorded: %s", ctx.job.id, ctx.attempt, e)
            ctx.end(e)
            return
        ctx.end(errors.CoorddError("the attempt ended", code="OK"), state="done")

    def _hand_back(self, ctx: JobContext) -> None:
        with ctx._mu:
            if ctx.state != "running":
                return
            ctx.state = "reporting"
        ctx.error = errors.CoorddError(f"job {ctx.job.id} attempt {ctx.attempt} handed back: worker shutdown",
                                       code="CANCELLED", reason="WORKER_SHUTDOWN")
        ctx.cancelled.set()
        self._report(ctx, None, ("worker shutdown", True))
        with ctx._mu:
            ctx.state = "handed-back"

    def _forget(self, ctx: JobContext) -> None:
        self._deadlines.remove(ctx)
        with self._mu:
            self._claims.pop((ctx.job.id, ctx.attempt), None)
            self._mu.notify_all()

    # -- heartbeats
    def _heartbeats(self) -> None:
        tx = self.client._tx
        while True:
            with self._mu:
                while True:
                    if self._stopped.is_set():
                        return
                    now = time.monotonic()
                    live = [c for c in self._claims.values() if c.state in ("running", "reporting")]
                    nxt = min((c.next_heartbeat for c in live), default=now + 3600)
                    if nxt <= now:
                        break
                    self._mu.wait(nxt - now)
                due = [c for c in live if c.next_heartbeat <= now + min(c.vt / 60, 0.05)]
            sent = time.monotonic()
            body = {"worker_id": self.id, "attempts": [{"job_id": str(c.job.id), "attempt": c.attempt} for c in due]}
            try:
                d = tx.call("POST", "/v1/queue/heartbeat", body, idempotent=True,
                            timeout=min(c.vt for c in due) / 3)
            except errors.CoorddError as e:
                if len(due) == 1 and e.reason in ("ATTEMPT_LOST", "ATTEMPT_EXPIRED", "JOB_CANCELLED",
                                                  "IDENTITY_MISMATCH", "JOB_NOT_FOUND"):
                    due[0].end(e)  # one item: its refusal is the call's answer
                    continue
                log.warning("heartbeat failed: %s", e)
                for c in due:
                    c.next_heartbeat = time.monotonic() + min(c.vt / 10, 0.25)
                continue
            results = d.get("results") or []
            for i, c in enumerate(due):
                r = results[i] if i < len(results) else {}
                err = errors.from_item(r.get("error"))
                if err is not None:
                    c.end(err)
                else:
                    c.extend(sent)


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"
