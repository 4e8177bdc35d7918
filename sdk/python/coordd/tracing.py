"""W3C trace context on jobs (docs/tracing.md).

Every job answer carries the job's ``traceparent`` (and ``tracestate``);
a submit takes one (``NewJob.traceparent``). When the ``opentelemetry``
package is importable (the SDK itself depends on nothing), it is used: a
submit without a traceparent takes the current span's, and the Worker runs
each handler in a consumer span, the child of the job's context, whose
context it reports with the outcome. Without it the strings are only
passed through.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


class TraceParent(NamedTuple):
    """The parts of a traceparent (version 00); ``flags`` bit 1: sampled."""

    trace_id: int
    span_id: int
    flags: int


def parse_traceparent(tp: Optional[str]) -> Optional[TraceParent]:
    """A W3C traceparent's parts; None when it is not valid syntax (W3C: ignore it)."""
    m = _TRACEPARENT.match(tp or "")
    if not m or m.group(1) == "ff" or (m.group(1) == "00" and m.group(5) is not None):
        return None
    trace_id, span_id = int(m.group(2), 16), int(m.group(3), 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, int(m.group(4), 16) & 1)


def format_traceparent(p: TraceParent) -> str:
    """A traceparent (version 00)."""
    return f"00-{p.trace_id:032x}-{p.span_id:016x}-{'01' if p.flags & 1 else '00'}"


_otel: Any = None
_tried = False


def otel() -> Any:
    """The ``opentelemetry.trace`` module if it is importable, else None (tried once)."""
    global _otel, _tried  # noqa: PLW0603 - a module-wide cache of an optional import
    if not _tried:
        _tried = True
        try:
            _otel = importlib.import_module("opentelemetry.trace")  # optional: not a dependency
        except ImportError:
            _otel = None
    return _otel


def current_traceparent() -> Optional[Tuple[str, str]]:
    """The current span's (traceparent, tracestate), if opentelemetry is importable and a span is current."""
    trace = otel()
    if trace is None:
        return None
    sc = trace.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    ts = ",".join(f"{k}={v}" for k, v in sc.trace_state.items()) if sc.trace_state else ""
    return format_traceparent(TraceParent(sc.trace_id, sc.span_id, int(sc.trace_flags))), ts


class AttemptSpan:
    """One attempt's consumer span; ``traceparent`` is sent with the outcome when the span records."""

    def __init__(self, trace: Any, span: Any, token: Any) -> None:
        self._trace, self.span, self._token = trace, span, token
        sc = span.get_span_context()
        self.traceparent = (format_traceparent(TraceParent(sc.trace_id, sc.span_id, int(sc.trace_flags)))
                            if span.is_recording() else "")

    def end(self, error: Optional[BaseException] = None) -> None:
        context = importlib.import_module("opentelemetry.context")  # present: the span exists
        if error is not None:
            self.span.record_exception(error)
            self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        self.span.end()
        context.detach(self._token)


def start_attempt(job: Any, attempt: int, worker_id: str, token: str) -> Optional[AttemptSpan]:
    """Starts the consumer span of one attempt as the current span, the child
    of the job's trace context (a new trace without one); None without opentelemetry."""
    trace = otel()
    if trace is None:
        return None
    context = importlib.import_module("opentelemetry.context")
    ctx = None
    p = parse_traceparent(getattr(job, "traceparent", ""))
    if p is not None:
        state = trace.TraceState(_state_pairs(getattr(job, "tracestate", "")))
        parent = trace.SpanContext(p.trace_id, p.span_id, is_remote=True, trace_flags=trace.TraceFlags(p.flags),
                                   trace_state=state)
        ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent))
    attrs: Dict[str, Any] = {"coordd.queue": job.queue, "coordd.job.kind": job.kind, "coordd.job.id": job.id,
                             "coordd.job.attempt": attempt, "coordd.fencing_token": token, "coordd.worker_id": worker_id}
    span = trace.get_tracer("coordd").start_span(f"coordd.job {job.kind}", context=ctx, kind=trace.SpanKind.CONSUMER,
                                                  attributes=attrs)
    return AttemptSpan(trace, span, context.attach(trace.set_span_in_context(span)))


def _state_pairs(ts: str) -> List[Tuple[str, str]]:
    out: List[Tuple[str, str]] = []
    for member in (ts or "").split(","):
        k, sep, v = member.strip().partition("=")
        if sep and k:
            out.append((k, v))
    return out
