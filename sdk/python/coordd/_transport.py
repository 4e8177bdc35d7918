"""HTTP to the nodes: endpoints, TLS, leader routing and the retry policy.

Any node serves every call (a follower forwards to the leader), so the
transport only prefers the leader to save a hop: a lookup asks every
endpoint's ``GET /v1/cluster/status`` (in parallel, 0.5 s) and keeps the one
that says it leads. Each failed attempt is classified as the Go SDK does
(client/DESIGN.md):

- nothing was sent (connection refused, no route): next endpoint at once;
  back off once every endpoint refused in a row;
- 503 with ``NO_LEADER``, ``NOT_LEADER``, ``SHUTTING_DOWN``, or a follower
  that could not dial the leader: nothing was done; look the leader up,
  back off (50 ms doubling to 1 s), retry;
- the answer was lost after the request was sent (timeout, reset), 504
  ``TIMEOUT``, 503 ``LEADERSHIP_LOST`` or another 503 (a follower's forward
  that broke): the outcome is unknown; retried only
  when the call is idempotent (the caller says so), else :class:`OutcomeUnknown`;
- anything else is final.

Retries go on until the call's budget (``timeout``) ends; each attempt is
bounded by ``attempt_timeout``. One ``http.client`` connection per endpoint
and thread, kept alive.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import ssl
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import errors

RETRY_REASONS = {"NO_LEADER", "NOT_LEADER", "SHUTTING_DOWN"}
UNKNOWN_REASONS = {"LEADERSHIP_LOST", "TIMEOUT"}
IDLE_REUSE = 30.0  # a kept-alive connection idle longer is replaced before use (the server closes idle ones)


def endpoints_from_env() -> List[str]:
    """``COORD_HTTP_ENDPOINTS``, else ``COORD_ENDPOINTS`` (as coordctl; it must then
    hold the nodes' HTTP addresses), else ``127.0.0.1:7401``."""
    raw = os.environ.get("COORD_HTTP_ENDPOINTS") or os.environ.get("COORD_ENDPOINTS") or "127.0.0.1:7401"
    return [e.strip() for e in raw.split(",") if e.strip()]


def tls_context(ca: Optional[str], cert: Optional[str] = None, key: Optional[str] = None) -> Optional[ssl.SSLContext]:
    """A client context trusting the CA bundle ``ca`` and presenting ``cert``/``key``
    (mutual TLS), or None without a CA. Defaults: ``COORD_TLS_CA``, ``COORD_TLS_CERT``,
    ``COORD_TLS_KEY``, as coordctl."""
    if not ca:
        return None
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key or None)
    return ctx


class _Refused(Exception):
    """The connection was never made: nothing was sent."""


class _Lost(Exception):
    """The request may have been sent, no answer came."""


class Transport:
    def __init__(self, endpoints: List[str], ssl_context: Optional[ssl.SSLContext] = None,
                 attempt_timeout: float = 5.0, timeout: float = 15.0) -> None:
        if not endpoints:
            raise errors.InvalidArgument("no endpoints", code="INVALID_ARGUMENT", metadata={"field": "endpoints"})
        self.ssl = ssl_context
        scheme = "https" if ssl_context is not None else "http"
        self.endpoints: List[Tuple[str, str, int]] = []
        for e in endpoints:
            u = urllib.parse.urlsplit(e if "://" in e else f"{scheme}://{e}")
            self.endpoints.append((u.scheme, u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80)))
        self.attempt_timeout = attempt_timeout
        self.timeout = timeout
        self._local = threading.local()
        self._mu = threading.Lock()
        self._current = 0
        self._known = False  # the current endpoint said it leads
        self._lookup_mu = threading.Lock()
        self._last_lookup = 0.0
        self._looked = False
        self._all: "set[http.client.HTTPConnection]" = set()  # every thread's, for close()

    # -- connections
    def _conns(self) -> Dict[int, Tuple[http.client.HTTPConnection, float]]:
        c = getattr(self._local, "conns", None)
        if c is None:
            c = self._local.conns = {}
        return c

    def _conn(self, i: int, timeout: float) -> http.client.HTTPConnection:
        conns = self._conns()
        now = time.monotonic()
        held = conns.get(i)
        if held is not None and now - held[1] < IDLE_REUSE:
            conn = held[0]
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
                return conn
        if held is not None:
            held[0].close()
            with self._mu:
                self._all.discard(held[0])
        scheme, host, port = self.endpoints[i]
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self.ssl)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.connect()
        except ssl.SSLError as e:
            conn.close()
            raise errors.Unauthenticated(f"TLS handshake with {host}:{port} failed: {e}", code="UNAUTHENTICATED") from e
        except OSError as e:
            conn.close()
            raise _Refused(f"{host}:{port}: {e}") from e
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns[i] = (conn, now)
        with self._mu:
            self._all.add(conn)
        return conn

    def _drop(self, i: int) -> None:
        held = self._conns().pop(i, None)
        if held is not None:
            held[0].close()
            with self._mu:
                self._all.discard(held[0])

    def attempt(self, i: int, method: str, path: str, body: Optional[bytes], headers: Mapping[str, str],
                timeout: float) -> Tuple[int, http.client.HTTPResponse, bytes]:
        """One HTTP exchange with endpoint i."""
        held = self._conns().get(i)
        conn = self._conn(i, timeout)
        fresh = held is None or held[0] is not conn
        try:
            conn.request(method, path, body=body, headers=dict(headers))
            resp = conn.getresponse()
            data = resp.read()
        except ssl.SSLError as e:
            self._drop(i)
            if fresh:
                # TLS 1.3 checks the client certificate after the client's
                # side of the handshake: a refusal (another CA) arrives as an
                # alert or a closed connection on the first request.
                raise errors.Unauthenticated(f"TLS: {e} (the client certificate was refused?)",
                                             code="UNAUTHENTICATED") from e
            raise _Lost(f"{self.endpoints[i][1]}:{self.endpoints[i][2]}: {e!r}") from e
        except (OSError, http.client.HTTPException) as e:
            self._drop(i)
            raise _Lost(f"{self.endpoints[i][1]}:{self.endpoints[i][2]}: {e!r}") from e
        self._conns()[i] = (conn, time.monotonic())
        if resp.getheader("Connection", "").lower() == "close":
            self._drop(i)
        return resp.status, resp, data

    # -- routing
    def _pick(self) -> int:
        with self._mu:
            return self._current

    def _suspect(self, i: int, refused: bool) -> None:
        """Endpoint i failed an attempt: move on (a lookup may move back)."""
        with self._mu:
            if self._current == i:
                self._current = (i + 1) % len(self.endpoints)
                self._known = False
        if not refused:
            self.locate()

    def locate(self) -> None:
        """Asks every endpoint who leads; keeps the one that says it does."""
        if len(self.endpoints) == 1:
            return
        if not self._lookup_mu.acquire(blocking=False):
            with self._lookup_mu:  # another caller's lookup: share its answer
                return
        try:
            if time.monotonic() - self._last_lookup < 0.05:
                return

            def ask(i: int) -> Optional[str]:
                try:
                    st, _, data = self._plain_get(i, "/v1/cluster/status", 0.5)
                    return json.loads(data).get("state") if st == 200 else None
                except Exception:  # noqa: BLE001 - a node that does not answer is no candidate
                    return None

            with ThreadPoolExecutor(len(self.endpoints)) as ex:
                states = list(ex.map(ask, range(len(self.endpoints))))
            self._last_lookup = time.monotonic()
            with self._mu:
                if "Leader" in states:
                    self._current, self._known = states.index("Leader"), True
                elif states[self._current] is None:
                    answered = [i for i, s in enumerate(states) if s is not None]
                    if answered:
                        self._current = random.choice(answered)
        finally:
            self._lookup_mu.release()

    def _plain_get(self, i: int, path: str, timeout: float) -> Tuple[int, http.client.HTTPResponse, bytes]:
        # A lookup runs on its own connection: it must not disturb a
        # caller's kept-alive one (it runs on pool threads anyway).
        scheme, host, port = self.endpoints[i]
        if scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=timeout, context=self.ssl)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r, r.read()
        finally:
            conn.close()

    # -- calls
    def call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, *,
             query: Optional[Mapping[str, Any]] = None, idempotent: bool, timeout: Optional[float] = None,
             attempt_timeout: Optional[float] = None, server_timeout: Optional[float] = None) -> Dict[str, Any]:
        """Sends the call until it has a final answer or its budget ends.

        ``server_timeout`` is sent as ``Grpc-Timeout`` (the node answers 504
        ``TIMEOUT`` by then: a waiting acquire). Returns the JSON answer.
        """
        budget = self.timeout if timeout is None else timeout
        per_attempt = attempt_timeout or self.attempt_timeout
        deadline = time.monotonic() + budget
        if query:
            pairs = []
            for k, v in query.items():
                for x in (v if isinstance(v, (list, tuple)) else [v]):
                    if x is not None:
                        pairs.append((k, str(x).lower() if isinstance(x, bool) else str(x)))
            if pairs:
                path += "?" + urllib.parse.urlencode(pairs)
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if not self._looked:
            self._looked = True
            self.locate()
        delay = 0.05
        refused_in_row = 0
        unknown: Optional[BaseException] = None
        last: Optional[errors.CoorddError] = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if server_timeout is not None:
                st = max(min(server_timeout, left) - 0.05, 0.01)
                headers["Grpc-Timeout"] = f"{max(int(st * 1000), 1)}m"
                att = st + 2.0
            else:
                att = min(per_attempt, left)
            i = self._pick()
            backoff = False
            try:
                status, resp, data = self.attempt(i, method, path, payload, headers, att)
            except _Refused as e:
                last = errors.Unavailable(f"cannot reach coordd: {e}", code="UNAVAILABLE")
                refused_in_row += 1
                self._suspect(i, refused=True)
                if refused_in_row >= len(self.endpoints):
                    refused_in_row, backoff = 0, True
                else:
                    continue
            except _Lost as e:
                refused_in_row = 0
                unknown = e
                last = errors.OutcomeUnknown(f"no answer: {e}", code="UNAVAILABLE")
                if not idempotent:
                    raise last from e
                self._suspect(i, refused=False)
                backoff = True
            else:
                refused_in_row = 0
                try:
                    answer = json.loads(data) if data else {}
                except ValueError:
                    answer = {"code": "UNKNOWN", "message": data[:200].decode(errors="replace")}
                if 200 <= status < 300:
                    return answer if isinstance(answer, dict) else {"value": answer}
                err = errors.from_answer(status, answer)
                if status == 503 and (err.reason in RETRY_REASONS or not err.reason and "while dialing" in err.message):
                    last = err
                    self._suspect(i, refused=False)
                    backoff = True
                elif status in (503, 504) or err.reason in UNKNOWN_REASONS:
                    unknown = err
                    last = err if isinstance(err, errors.OutcomeUnknown) else errors.OutcomeUnknown(
                        err.message, code=err.code, reason=err.reason, metadata=err.metadata, http_status=status)
                    if not idempotent:
                        raise last
                    if status == 503:
                        self._suspect(i, refused=False)
                    backoff = status == 503
                else:
                    raise err
            if backoff:
                time.sleep(max(0.0, min(delay * random.uniform(0.5, 1.0), deadline - time.monotonic())))
                delay = min(delay * 2, 1.0)
        if last is None:
            last = errors.Unavailable("the call's time ran out before it was sent", code="UNAVAILABLE")
        if unknown is not None and not isinstance(last, errors.OutcomeUnknown):
            last = errors.OutcomeUnknown(f"{last.message} (after an attempt whose outcome is unknown)",
                                         code=last.code, reason=last.reason, metadata=last.metadata,
                                         http_status=last.http_status)
        raise last

    def clone(self) -> "Transport":
        """A transport to the same endpoints with connections of its own (a long poll that abort() can end)."""
        t = Transport(["%s://%s:%d" % e for e in self.endpoints], self.ssl, self.attempt_timeout, self.timeout)
        with self._mu:
            t._current, t._known, t._looked = self._current, self._known, True
        return t

    def abort(self) -> None:
        """Ends the calls in flight on this transport's connections (their answers are lost)."""
        with self._mu:
            conns = list(self._all)
        for conn in conns:
            if conn.sock is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Closes every thread's connections (a later call opens new ones)."""
        with self._mu:
            conns, self._all = self._all, set()
        for conn in conns:
            conn.close()
        self._conns().clear()
