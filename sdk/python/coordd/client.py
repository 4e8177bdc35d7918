"""The client: leases, fenced writes, windows, reads; ``client.jobs`` and
``client.schedules`` (``coordd.jobs``)."""

from __future__ import annotations

import os
import secrets
import socket
import ssl
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import errors
from ._wire import Instant, Wire
from ._transport import Transport, endpoints_from_env, tls_context
from .lease import Deadlines, Lease, lease_path, window_path
from .types import Commit, LeaseInfo, Resource, Window


def new_request_id() -> str:
    """A random id for a request that must not be applied twice."""
    return secrets.token_hex(16)


def check_token(token: str) -> Tuple[str, int]:
    """Splits ``"name:generation"`` at its last colon; :class:`InvalidToken` if malformed."""
    name, sep, gen = token.rpartition(":")
    if not sep or not name or not (gen.isascii() and gen.isdigit()) or int(gen) == 0:
        raise errors.InvalidToken(f"token {token!r} is not lease_name:generation", code="INVALID_ARGUMENT",
                                  reason="INVALID_ARGUMENT", metadata={"field": "token"})
    return name, int(gen)


def _in_flight(coalesce: Union[bool, int]) -> int:
    """The bound of requests in flight of a ``coalesce`` option (0: off)."""
    from ._batch import DEFAULT_MAX_IN_FLIGHT  # noqa: PLC0415

    if coalesce is True:
        return DEFAULT_MAX_IN_FLIGHT
    if coalesce is False:
        return 0
    if not isinstance(coalesce, int) or coalesce < 0:
        raise _local_invalid("coalesce", f"want True, False or a number of requests in flight, not {coalesce!r}")
    return coalesce


def _local_invalid(field: str, msg: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(f"{field}: {msg}", code="INVALID_ARGUMENT", reason="INVALID_ARGUMENT",
                                  metadata={"field": field})


class Client:
    """A connection to a coordd cluster over its HTTP/JSON API.

    ``endpoints``: the nodes' HTTP addresses (``host:port`` or URLs); default
    ``COORD_HTTP_ENDPOINTS``, else ``COORD_ENDPOINTS``. TLS: ``tls_ca`` (turns
    HTTPS on), ``tls_cert``/``tls_key`` for mutual TLS, default
    ``COORD_TLS_CA``/``COORD_TLS_CERT``/``COORD_TLS_KEY``; or an ``ssl_context``.
    ``owner``: the owner id of leases (default ``host:pid:random``).
    ``timeout``: how long a call may retry (seconds); each attempt gets at
    most ``attempt_timeout``. ``coalesce``: concurrent ``jobs.submit`` calls
    (threads) share one request — group commit without a timer: a call
    leaves at once while fewer than ``coalesce`` submit requests are in
    flight (True: 1), else joins the next; False: one request per call.
    """

    def __init__(self, endpoints: Optional[Union[str, Sequence[str]]] = None, *, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, owner: Optional[str] = None,
                 timeout: float = 15.0, attempt_timeout: float = 5.0, coalesce: Union[bool, int] = True) -> None:
        if endpoints is None:
            eps = endpoints_from_env()
        elif isinstance(endpoints, str):
            eps = [e.strip() for e in endpoints.split(",") if e.strip()]
        else:
            eps = list(endpoints)
        if ssl_context is None:
            ssl_context = tls_context(tls_ca or os.environ.get("COORD_TLS_CA"),
                                      tls_cert or os.environ.get("COORD_TLS_CERT"),
                                      tls_key or os.environ.get("COORD_TLS_KEY"))
        self._tx = Transport(eps, ssl_context, attempt_timeout=attempt_timeout, timeout=timeout)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._deadlines = Deadlines()
        self._wire = Wire()
        from .jobs import Jobs, Schedules  # noqa: PLC0415 - they import this module

        self.jobs = Jobs(self, _in_flight(coalesce))
        self.schedules = Schedules(self)

    def close(self) -> None:
        self.jobs._close()
        self._tx.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- leases
    def acquire(self, name: str, ttl: float = 30.0, *, wait: Union[bool, float] = False,
                owner: Optional[str] = None, request_id: Optional[str] = None, value: Any = None,
                claim: Optional[Tuple[str, str]] = None, not_before: Optional[Instant] = None) -> Lease:
        """Takes the lease ``name`` for ``ttl`` seconds and keeps it alive (renewed
        at TTL/3) until released or lost. Held by another owner:
        :class:`NotAcquired`, or with ``wait`` (True, or seconds) wait until
        granted (holders are served in arrival order). ``claim=(job, window)``
        grants the lease only with a claim of that window (``lease.claim``).
        Retries carry the same ``request_id``: never a second grant."""
        if not name:
            raise _local_invalid("name", "a lease name is required")
        if ttl <= 0:
            raise _local_invalid("ttl", "must be positive")
        w = self._wire
        owner = owner or self.owner
        body: Dict[str, Any] = {"owner": owner, "request_id": request_id or new_request_id()}
        w.duration(body, "ttl", ttl)
        if value is not None:
            body["value"] = w.payload(value)
        if claim is not None:
            ref: Dict[str, Any] = {"job": claim[0], "window": claim[1]}
            w.instant(ref, "not_before", not_before)
            body["claim"] = ref
        sent = time.monotonic()
        if wait:
            body["wait"] = True
            budget = 365 * 86400.0 if wait is True else float(wait)
            # The node answers 504 TIMEOUT by the Grpc-Timeout deadline; the
            # transport repeats with the same request id until the budget ends.
            try:
                d = self._tx.call("POST", lease_path(name, "acquire"), body, idempotent=True, timeout=budget,
                                  server_timeout=min(budget, 25.0))
            except errors.OutcomeUnknown:
                # The wait ran out: it may have been granted as it did. Ask
                # once more without waiting, with the same request id: the
                # grant if there was one, else a definite answer.
                body["wait"] = False
                d = self._tx.call("POST", lease_path(name, "acquire"), body, idempotent=True)
        else:
            d = self._tx.call("POST", lease_path(name, "acquire"), body, idempotent=True)
        cl = d.get("claim")
        if cl is not None and not cl.get("claimed"):
            win = Window.of(w, cl.get("window"))
            raise errors.WindowCompleted(f"window {win.job}/{win.window} is already completed (by {win.owner})",
                                         code="FAILED_PRECONDITION", reason="WINDOW_COMPLETED",
                                         metadata={"completed_by": win.owner,
                                                   "completed_generation": str(win.generation)})
        info = LeaseInfo.of(w, d.get("lease") or {})
        if not d.get("acquired"):
            raise errors.NotAcquired(name, info.owner, info.generation, info.expires_in or 0.0)
        if wait and time.monotonic() - sent > ttl / 4:
            # The local deadline is safe only from the send time, which a
            # wait ate into: renew once so the lease starts with a full one.
            rs = time.monotonic()
            rb = {"owner": owner, "generation": str(info.generation)}
            w.duration(rb, "ttl", ttl)
            self._tx.call("POST", lease_path(name, "renew"), rb, idempotent=True)
            sent = rs
        return Lease(self, name, owner, info.generation, ttl, sent, claim=cl)

    lease = acquire

    def get_lease(self, name: str, *, stale: bool = False) -> LeaseInfo:
        d = self._tx.call("GET", lease_path(name), query={"stale": stale or None}, idempotent=True)
        return LeaseInfo.of(self._wire, d.get("lease") or {})

    def list_leases(self, prefix: str = "", *, page_size: int = 0) -> Iterator[LeaseInfo]:
        for d in self._pages("/v1/leases", "leases", {"prefix": prefix or None, "page_size": page_size or None}):
            yield LeaseInfo.of(self._wire, d)

    # -- fenced writes
    def fenced_commit(self, resource: str, token: str, key: Optional[str] = None, payload: Any = None, *,
                      dry_run: bool = False) -> Commit:
        """Validates ``token`` (``"lease:generation"``) for a write to ``resource``
        and records it: a stale token is :class:`StaleToken`; a repeated
        idempotency ``key`` answers the first outcome (``duplicate``, the
        first ``payload``). With a key (or ``dry_run``) the call is retried
        after an unknown outcome; without one it is not (:class:`OutcomeUnknown`)."""
        check_token(token)
        return self._fenced_commit({"resource": resource, "token": token}, key, payload, dry_run)

    def check_token(self, resource: str, token: str, key: Optional[str] = None) -> Commit:
        """Would :meth:`fenced_commit` be accepted? Records nothing (a dry run)."""
        return self.fenced_commit(resource, token, key, dry_run=True)

    def _fenced_commit(self, body: Dict[str, Any], key: Optional[str], payload: Any, dry_run: bool) -> Commit:
        if key:
            body["idempotency_key"] = key
        if payload is not None:
            body["payload"] = self._wire.payload(payload)
        if dry_run:
            body["dry_run"] = True
        d = self._tx.call("POST", "/v1/fence/commit", body, idempotent=bool(key) or dry_run)
        return Commit.of(self._wire, d)

    def get_resource(self, resource: str, *, stale: bool = False) -> Resource:
        d = self._tx.call("GET", "/v1/resources/" + urllib.parse.quote(resource, safe="/"),
                          query={"stale": stale or None}, idempotent=True)
        return Resource.of(d.get("resource") or {})

    # -- windows
    def get_window(self, job: str, window: str, *, stale: bool = False) -> Window:
        d = self._tx.call("GET", window_path(job, window), query={"stale": stale or None}, idempotent=True)
        return Window.of(self._wire, d.get("window"))

    def list_windows(self, job: str, *, page_size: int = 0) -> Iterator[Window]:
        for d in self._pages("/v1/windows", "windows", {"job": job, "page_size": page_size or None}):
            yield Window.of(self._wire, d)

    # -- cluster
    def status(self) -> Dict[str, Any]:
        """``GET /v1/cluster/status`` of the node the client talks to (as JSON)."""
        return self._tx.call("GET", "/v1/cluster/status", idempotent=True)

    def _pages(self, path: str, key: str, query: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        token = None
        while True:
            d = self._tx.call("GET", path, query={**query, "page_token": token}, idempotent=True)
            yield from d.get(key) or []
            token = d.get("next_page_token")
            if not token:
                return

    def raw(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, *, idempotent: bool = False,
            **query: Any) -> Dict[str, Any]:
        """Any route of the API, with the client's routing, retries and typed errors."""
        return self._tx.call(method, path, body, query=query or None, idempotent=idempotent)


_default: Optional[Client] = None


def default_client() -> Client:
    """The client of the module-level helpers, from the environment."""
    global _default
    if _default is None:
        _default = Client()
    return _default


def lease(name: str, ttl: float = 30.0, **kw: Any) -> Lease:
    """``with coordd.lease(name, ttl=30) as lease:`` on the default client."""
    return default_client().acquire(name, ttl, **kw)


__all__: List[str] = ["Client", "default_client", "lease", "new_request_id", "check_token"]
