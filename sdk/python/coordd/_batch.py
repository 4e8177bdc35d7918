"""Group commit without a timer: concurrent calls of one client (submits,
a worker's completions and failures) share one HTTP request.

While fewer than ``max_in_flight`` requests are in flight and nobody
waits, a call leaves at once, alone, from the caller's thread (with the
caller's timeout: what it would be without coalescing). Otherwise it is
queued and joins the next request, which a sender thread (started when
needed, gone after a minute idle) sends as soon as one returns. A lone call
never waits nor changes threads; under load the requests fill up by
themselves.

Each caller gets its own answer: its item of a per-item response, or —
when the server refuses the whole request (all or nothing) — its own
refusal, learned by sending again: the member the refusal names
(``metadata["index"]``) alone and the others together, or, without an
index, every member alone. An outcome-unknown error (and a failure to reach
any node) is every member's: the transport already retried the request as it
would a lone call. A caller's ``timeout`` ends its own wait only.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Deque, Generic, List, Optional, TypeVar

from . import errors

I = TypeVar("I")  # noqa: E741 - an item

#: The default bound of requests in flight, measured (README, "Performance").
DEFAULT_MAX_IN_FLIGHT = 1
IDLE_EXIT = 60.0  # seconds a sender thread waits for work before it ends


class _Member(Generic[I]):
    __slots__ = ("item", "size", "solo", "sent", "settled", "value", "error", "done")

    def __init__(self, item: I, size: int) -> None:
        self.item = item
        self.size = size
        self.solo = False  # send alone (after a refusal of a request it shared)
        self.sent = False  # in a request whose answer has not come
        self.settled = False
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()


class Batcher(Generic[I]):
    """``send(items, timeout)`` makes one request and returns one result per
    item (an exception instance for a refused item), or raises for the whole
    request; ``timeout`` is the call's budget (None: the client's)."""

    def __init__(self, send: Callable[[List[I], Optional[float]], List[Any]], *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_items: int = 1000, max_bytes: int = 1 << 20, name: str = "coordd-batch") -> None:
        self._send = send
        self._max_in_flight = max(1, max_in_flight)
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._name = name
        self._cv = threading.Condition()
        self._pending: Deque[_Member[I]] = deque()
        self._in_flight = 0  # requests sent or granted to a sender thread
        self._grants = 0  # requests granted to sender threads, not yet taken
        self._senders = 0
        self._idle = 0
        self._closed = False
        #: HTTP requests sent (a request the transport retried counts once).
        self.requests = 0

    def call(self, item: I, size: int, timeout: Optional[float] = None) -> Any:
        """Sends item in the next request and returns its result (raises its error).
        ``timeout``: how long this caller waits; then :class:`Unavailable`
        (``DEADLINE_EXCEEDED``, nothing was sent) or :class:`OutcomeUnknown`
        (its request was sent and goes on for the others)."""
        m: _Member[I] = _Member(item, size)
        with self._cv:
            if self._closed:
                raise errors.Unavailable("the client is closed", code="CANCELLED")
            direct = not self._pending and self._in_flight < self._max_in_flight
            if direct:
                self._in_flight += 1
                self.requests += 1
            else:
                self._pending.append(m)
                self._kick()
        if direct:
            try:
                r = self._send([item], timeout)
            finally:
                with self._cv:
                    self._in_flight -= 1
                    self._kick()
            if not r:
                raise errors.CoorddError("the answer has no item for a request of 1", code="INTERNAL")
            if isinstance(r[0], BaseException):
                raise r[0]
            return r[0]
        if not m.done.wait(timeout):
            with self._cv:
                if not m.settled:
                    m.settled = True
                    if m.sent:
                        raise errors.OutcomeUnknown(f"no answer within the caller's timeout ({timeout}s): the request it "
                                                    "shares was sent, its outcome is unknown", code="DEADLINE_EXCEEDED")
                    self._pending.remove(m)
                    raise errors.Unavailable(f"not sent within the caller's timeout ({timeout}s): nothing was done",
                                             code="DEADLINE_EXCEEDED")
        if m.error is not None:
            raise m.error
        return m.value

    def close(self) -> None:
        """Refuses new calls and those still waiting to be sent; requests in flight finish."""
        with self._cv:
            self._closed = True
            left, self._pending = list(self._pending), deque()
            for m in left:
                self._settle(m, None, errors.Unavailable("the client was closed before the call was sent", code="CANCELLED"))
            self._cv.notify_all()

    def _kick(self) -> None:
        """Grants the waiting calls the requests free now (the lock held)."""
        while self._pending and self._in_flight < self._max_in_flight and self._grants < len(self._pending):
            self._in_flight += 1
            self._grants += 1
            if self._idle > 0:
                self._cv.notify()
            elif self._senders < self._max_in_flight:
                self._senders += 1
                threading.Thread(target=self._sender, name=self._name, daemon=True).start()

    def _sender(self) -> None:
        with self._cv:
            while True:
                while self._grants == 0:
                    if self._closed:
                        self._senders -= 1
                        return
                    self._idle += 1
                    woke = self._cv.wait(IDLE_EXIT)
                    self._idle -= 1
                    if not woke and self._grants == 0:
                        self._senders -= 1
                        return
                self._grants -= 1
                if not self._pending:  # they left (timeouts, close)
                    self._in_flight -= 1
                    continue
                group = self._take()
                self.requests += 1
                self._cv.release()
                try:
                    self._flush(group)
                finally:
                    self._cv.acquire()
                    self._in_flight -= 1
                    self._kick()

    def _take(self) -> List[_Member[I]]:
        """The next request's members: from the front, up to the bounds; a solo member alone."""
        first = self._pending.popleft()
        group = [first]
        size = first.size
        while not first.solo and len(group) < self._max_items and self._pending:
            m = self._pending[0]
            if m.solo or size + m.size > self._max_bytes:
                break
            group.append(self._pending.popleft())
            size += m.size
        for m in group:
            m.sent = True
        return group

    def _flush(self, group: List[_Member[I]]) -> None:
        try:
            results = self._send([m.item for m in group], None)
        except errors.CoorddError as e:
            with self._cv:
                self._refused(group, e)
            return
        except Exception as e:  # noqa: BLE001 - every member's
            with self._cv:
                for m in group:
                    self._settle(m, None, e)
            return
        with self._cv:
            for i, m in enumerate(group):
                r = results[i] if i < len(results) else errors.CoorddError(
                    f"the answer has {len(results)} items for a request of {len(group)}", code="INTERNAL")
                if isinstance(r, BaseException):
                    self._settle(m, None, r)
                else:
                    self._settle(m, r, None)

    def _refused(self, group: List[_Member[I]], e: errors.CoorddError) -> None:
        """The whole request failed (the lock held): its error is every member's,
        unless it was a refusal another request could tell apart."""
        if len(group) == 1 or e.outcome_unknown or e.http_status == 0:
            for m in group:
                self._settle(m, None, e)
            return
        # Refused, so nothing of it was applied: send again, each member to learn its own answer.
        idx = e.metadata.get("index", "")
        if idx.isdigit() and int(idx) < len(group):
            culprit = group[int(idx)]
            culprit.solo = True
            again = [culprit] + [m for m in group if m is not culprit]
        else:
            for m in group:
                m.solo = True
            again = group
        for m in reversed(again):
            m.sent = False
            if not m.settled:
                self._pending.appendleft(m)

    def _settle(self, m: _Member[I], value: Any, error: Optional[BaseException]) -> None:
        if m.settled:
            return
        m.settled, m.value, m.error = True, value, error
        m.done.set()
