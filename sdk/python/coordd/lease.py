"""A held lease: renewed at TTL/3, lost at a local deadline.

The local deadline is the send time of the last acknowledged acquire or
renewal + TTL − margin (margin = TTL/10 within [50 ms, 2 s]). The server
applied that call after it was sent, so its own expiry is later: when the
deadline passes, ``lease.lost`` is set (and ``lease.check()`` raises
:class:`~coordd.LeaseLost`) before the server could grant the lease to
anyone else. A client-wide keeper thread fires the deadlines and starts
each renewal in a thread of its own, so a renewal stuck on a dead or
frozen node cannot delay them; ``check()``
also compares the clock itself, so a process that was frozen sees the loss
first thing when it runs again.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol

from . import errors
from .types import Commit, Window

if TYPE_CHECKING:
    from .client import Client


def margin_for(ttl: float) -> float:
    return min(max(ttl / 10, 0.05), 2.0)


def lease_path(name: str, verb: str = "") -> str:
    return "/v1/leases/" + urllib.parse.quote(name, safe="/") + ("/" + verb if verb else "")


class Claim:
    """A claimed window (``lease.claim_window``). ``claimed`` is False when the
    window was completed already: ``window`` is then what completed it."""

    def __init__(self, lease: "Lease", claimed: bool, attempts: int, window: Window) -> None:
        self.lease, self.claimed, self.attempts, self.window = lease, claimed, attempts, window

    def complete(self, result: Any = None, *, release: bool = False) -> Window:
        """Completes the window with ``result`` (a JSON value), at most once; with
        ``release`` also releases the lease in the same log entry."""
        return self.lease.complete_window(self.window.job, self.window.window, result, release=release)

    def __repr__(self) -> str:
        return f"Claim(claimed={self.claimed}, attempts={self.attempts}, window={self.window!r})"


class Lease:
    """A held lease. Use it as a context manager (released at the end)::

        with client.lease("daily-close", ttl=30) as lease:
            ...                      # lease.check() raises once it is lost
            lease.fenced_commit(resource, key, payload)

    ``lost`` is a :class:`threading.Event` set the moment the lease is lost;
    ``done`` is set when it is lost or released. ``token`` is
    ``"name:generation"`` for fenced writes elsewhere.
    """

    def __init__(self, client: "Client", name: str, owner: str, generation: int, ttl: float, sent: float,
                 claim: Optional[Dict[str, Any]] = None) -> None:
        self.client = client
        self.name = name
        self.owner = owner
        self.generation = generation
        self.ttl = ttl
        self.margin = margin_for(ttl)
        self.lost = threading.Event()
        self.done = threading.Event()
        self.renewals = 0
        self.reason = ""  # why it was lost: LOCAL_DEADLINE, LEASE_LOST, LEASE_EXPIRED, ...
        self.lost_at: Optional[float] = None  # time.monotonic() of the loss
        self._err: Optional[errors.CoorddError] = None
        self._mu = threading.Condition()
        self._deadline = sent + ttl - self.margin
        self._next = sent + ttl / 3
        self._ended = False
        self._renewing = False
        self._callbacks: List[Callable[["Lease"], None]] = []
        self.claim: Optional[Claim] = None
        if claim is not None:
            self.claim = Claim(self, bool(claim.get("claimed")), int(claim.get("attempts") or 0),
                               Window.of(client._wire, claim.get("window")))
        client._deadlines.add(self)

    # -- state
    @property
    def token(self) -> str:
        return f"{self.name}:{self.generation}"

    @property
    def deadline(self) -> float:
        """The local deadline, on ``time.monotonic()``."""
        with self._mu:
            return self._deadline

    def remaining(self) -> float:
        """Seconds until the local deadline (negative once past)."""
        return self.deadline - time.monotonic()

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease is lost (or its local deadline
        passed), :class:`LeaseLost` with reason ``LEASE_RELEASED`` after release."""
        if time.monotonic() >= self.deadline:
            self._expire()
        if self._err is not None:
            raise self._err

    def on_lost(self, fn: Callable[["Lease"], None]) -> None:
        """Calls ``fn(lease)`` (in the thread that notices) when the lease is lost;
        at once if it is lost already."""
        with self._mu:
            if not self.lost.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    # -- renewal (the client's keeper thread starts each one when it is due)
    def renewal_due(self) -> Optional[float]:
        """When the next renewal is due (monotonic), or None while one is in flight or the lease ended."""
        with self._mu:
            return None if self._ended or self._renewing else self._next

    def _begin_renewal(self) -> None:
        with self._mu:
            self._renewing = True

    def _renew(self) -> None:
        """One renewal, in a thread of its own: a slow node delays no other lease."""
        body = {"owner": self.owner, "generation": str(self.generation)}
        self.client._wire.duration(body, "ttl", self.ttl)
        stall = min(self.ttl / 3, 2.0)
        sent = time.monotonic()
        retry_in: Optional[float] = None
        try:
            self.client._tx.call("POST", lease_path(self.name, "renew"), body, idempotent=True, timeout=stall,
                                 attempt_timeout=stall)
        except errors.LeaseLost as e:
            self._lose(e.reason, e)
        except (errors.Unavailable, errors.OutcomeUnknown):
            retry_in = 0.02  # the transport backed off; the local deadline bounds how long this goes on
        except errors.ResourceExhausted:
            retry_in = min(0.25, stall / 4)  # a rate limit: try again, until the local deadline
        except errors.CoorddError as e:  # a refusal that cannot change on retry
            self._lose(e.reason or e.code, e)
        else:
            with self._mu:
                if not self._ended:
                    self.renewals += 1
                    self._deadline = max(self._deadline, sent + self.ttl - self.margin)
                    self._next = sent + self.ttl / 3
        with self._mu:
            if retry_in is not None:
                self._next = time.monotonic() + retry_in
            self._renewing = False
        self.client._deadlines.wake()

    def _expire(self) -> None:
        self._lose("LOCAL_DEADLINE", errors.LeaseLost(
            f"no renewal of {self.name!r} generation {self.generation} acknowledged before the local deadline",
            code="FAILED_PRECONDITION", reason="LOCAL_DEADLINE"))

    def _lose(self, reason: str, err: errors.CoorddError) -> None:
        with self._mu:
            if self._ended:
                return
            self._ended = True
            self._err = err if isinstance(err, errors.LeaseLost) else errors.LeaseLost(
                str(err), code=err.code, reason=err.reason, metadata=err.metadata)
            self.reason, self.lost_at = reason, time.monotonic()
            callbacks, self._callbacks = self._callbacks, []
            self._mu.notify_all()
        self.lost.set()
        self.done.set()
        self.client._deadlines.remove(self)
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # noqa: BLE001 - a callback's failure is not the lease's
                pass

    def _end(self) -> Optional[errors.CoorddError]:
        """Stops renewing; returns the loss recorded before, if any."""
        with self._mu:
            lost = self._err
            if not self._ended:
                self._ended = True
                self._err = errors.LeaseLost(f"lease {self.name!r} was released", code="FAILED_PRECONDITION",
                                             reason="LEASE_RELEASED")
                self._mu.notify_all()
        self.done.set()
        self.client._deadlines.remove(self)
        return lost

    def release(self, timeout: float = 5.0) -> None:
        """Stops renewing and releases the lease on the server. Raises
        :class:`LeaseLost` if it had been lost before."""
        lost = self._end()
        try:
            self.client._tx.call("POST", lease_path(self.name, "release"),
                                 {"owner": self.owner, "generation": str(self.generation)},
                                 idempotent=True, timeout=timeout)
        except errors.LeaseLost:
            if lost is None:
                raise
        if lost is not None:
            raise lost

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # A loss while the block ran is an error even if the block returned:
        # work done after it may not have been fenced.
        try:
            self.release()
        except errors.LeaseLost:
            if exc_type is None:
                raise
        except errors.CoorddError:
            if exc_type is None:
                raise

    # -- fenced work
    def fenced_commit(self, resource: str, key: Optional[str] = None, payload: Any = None, *,
                      dry_run: bool = False) -> Commit:
        """A write to ``resource`` checked against this lease's token (see
        :meth:`Client.fenced_commit`). It does not check the local deadline
        first: the fence decides (call :meth:`check` before doing the work)."""
        return self.client._fenced_commit({"resource": resource, "lease_name": self.name,
                                           "generation": str(self.generation)}, key, payload, dry_run)

    def claim_window(self, job: str, window: str) -> Claim:
        """Claims the window ``job/window`` for this lease. A completed window is
        not an error: ``claim.claimed`` is False. Repeats by the holder are safe."""
        d = self.client._tx.call("POST", window_path(job, window, "claim"),
                                 {"lease_name": self.name, "owner": self.owner, "generation": str(self.generation)},
                                 idempotent=True)
        return Claim(self, bool(d.get("claimed")), int(d.get("attempts") or 0), Window.of(self.client._wire, d.get("window")))

    def complete_window(self, job: str, window: str, result: Any = None, *, release: bool = False) -> Window:
        """Completes a window this lease claimed, with ``result`` (a JSON value);
        ``release`` also releases the lease, in the same log entry."""
        if release:
            lost = self._end()
            if lost is not None:
                raise lost
        body = {"lease_name": self.name, "owner": self.owner, "generation": str(self.generation),
                "result": self.client._wire.payload(result), "release": release}
        d = self.client._tx.call("POST", window_path(job, window, "complete"), body, idempotent=True)
        return Window.of(self.client._wire, d.get("window"))

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "ended" if self.done.is_set() else "held"
        return f"Lease({self.name!r}, generation={self.generation}, owner={self.owner!r}, {state})"


def window_path(job: str, window: str, verb: str = "") -> str:
    return ("/v1/windows/" + urllib.parse.quote(job, safe="/") + "/" + urllib.parse.quote(window, safe="")
            + ("/" + verb if verb else ""))


class Expiring(Protocol):
    """What has a local deadline (a lease, a job attempt's claim), and maybe renewals."""

    @property
    def deadline(self) -> float: ...

    def _expire(self) -> None: ...

    def renewal_due(self) -> Optional[float]: ...

    def _begin_renewal(self) -> None: ...

    def _renew(self) -> None: ...


class Deadlines:
    """One thread per client (or worker) that fires the local deadlines of its
    leases (or claims) and starts each lease's renewal when it is due, in a
    thread of its own: an acquire starts no thread, a renewal stuck on a
    frozen node delays no deadline and no other renewal."""

    def __init__(self) -> None:
        self._mu = threading.Condition()
        self._leases: "set[Expiring]" = set()
        self._thread: Optional[threading.Thread] = None
        self._wake_at = 0.0  # when the keeper wakes next (monotonic); 0 while it runs

    def add(self, lease: Expiring) -> None:
        with self._mu:
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="coordd-keeper", daemon=True)
                self._thread.start()
            r = lease.renewal_due()
            if min(lease.deadline, r if r is not None else lease.deadline) < self._wake_at:
                self._mu.notify()  # due before the keeper wakes anyway (waking it costs a thread switch)

    def remove(self, lease: Expiring) -> None:
        with self._mu:
            self._leases.discard(lease)

    def wake(self) -> None:
        with self._mu:
            self._mu.notify()

    def _run(self) -> None:
        while True:
            with self._mu:
                now = time.monotonic()
                expired, renew, nxt = [], [], now + 3600
                for l in self._leases:
                    d = l.deadline
                    if d <= now:
                        expired.append(l)
                        continue
                    r = l.renewal_due()
                    if r is not None and r <= now:
                        renew.append(l)
                        l._begin_renewal()
                    nxt = min(nxt, d, r if r is not None and r > now else nxt)
                if not expired and not renew:
                    self._wake_at = nxt
                    self._mu.wait(max(nxt - now, 0.001))
                    self._wake_at = 0.0
                    continue
                for l in expired:
                    self._leases.discard(l)
            for l in expired:
                l._expire()
            for l in renew:
                threading.Thread(target=l._renew, name="coordd-renew", daemon=True).start()
