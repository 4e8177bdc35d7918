"""Every conversion between Python values and coordd's HTTP/JSON encoding.

The contract (docs/http-api.md, api/openapi/coordd.json): field names are
the proto names; 64-bit integers arrive as JSON strings; instants are RFC
3339 strings (``"run_at": "2026-12-01T23:04:20.123Z"``), durations strings
of seconds (``"ttl": "30s"``); payloads (job args and results, fenced
commit payloads, window results, lease values) are JSON values embedded as
they are; enums are short upper-case names (``"AVAILABLE"``).

Servers built before that contract (issue 25, item 2) used ``<name>_ms``
integer fields, base64 payloads and full enum names; :func:`detect` tells
them apart from the OpenAPI document a node serves, and :class:`Wire`
speaks either. This module is the one place that knows the encodings.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import re
from typing import Any, Dict, Mapping, Optional, Union

Instant = Union[_dt.datetime, float, int]  # a datetime, or seconds since the epoch

_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


def detect(openapi: Mapping[str, Any]) -> bool:
    """True when the OpenAPI document is the legacy contract (``ttl_ms``)."""
    try:
        props = openapi["components"]["schemas"]["CoordinatorAcquireBody"]["properties"]
    except (KeyError, TypeError):
        return False
    return "ttl_ms" in props


def fmt_duration(seconds: float) -> str:
    """Seconds as protojson's Duration (``"2s"``, ``"0.500s"``), to the millisecond."""
    ms = int(round(seconds * 1000))
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    return f"{sign}{ms // 1000}s" if ms % 1000 == 0 else f"{sign}{ms // 1000}.{ms % 1000:03d}s"


def parse_duration(v: Any) -> Optional[float]:
    """A protojson Duration (``"1.5s"``) in seconds; None when absent."""
    if v is None or v == "":
        return None
    s = str(v)
    return float(s[:-1]) if s.endswith("s") else float(s)


def fmt_instant(t: Instant) -> str:
    """A datetime (naive = UTC) or epoch seconds as RFC 3339 UTC with milliseconds."""
    if not isinstance(t, _dt.datetime):
        t = _dt.datetime.fromtimestamp(float(t), _dt.timezone.utc)
    elif t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    t = t.astimezone(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_instant(v: Any) -> Optional[_dt.datetime]:
    """An RFC 3339 string (or, legacy, epoch milliseconds) as an aware UTC datetime; None when unset."""
    if v is None or v == "" or v == "0":
        return None
    s = str(v)
    if "T" not in s:
        ms = int(s)
        return None if ms == 0 else _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc)
    m = _RFC3339.match(s)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {s!r}")
    frac = (m.group(2) or ".0")[1:7].ljust(6, "0")  # Python before 3.11 reads 3 or 6 digits only
    zone = "+00:00" if m.group(3) in ("Z", "z") else m.group(3)
    t = _dt.datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}")
    return None if t.year <= 1970 and t.timestamp() <= 0 else t.astimezone(_dt.timezone.utc)


def to_int(v: Any) -> int:
    """A protojson 64-bit integer (a string) or number; 0 when absent."""
    return 0 if v is None or v == "" else int(v)


def enum_out(prefix: str, name: str) -> str:
    """A short enum name (``"available"``) as the full name both contracts accept."""
    n = name.upper()
    return n if n.startswith(prefix) else prefix + n


def enum_in(prefix: str, v: Any) -> str:
    """An enum as the short name (``"AVAILABLE"``); "" for unspecified."""
    s = str(v or "")
    if s.startswith(prefix):
        s = s[len(prefix):]
    return "" if s in ("UNSPECIFIED", "0") else s


class Wire:
    """Builds request bodies and reads answers in one contract."""

    def __init__(self, legacy: bool = False) -> None:
        self.legacy = legacy

    # -- requests
    def duration(self, body: Dict[str, Any], key: str, seconds: Optional[float]) -> None:
        if seconds is None:
            return
        if self.legacy:
            body[key + "_ms"] = str(int(round(seconds * 1000)))
        else:
            body[key] = fmt_duration(seconds)

    def instant(self, body: Dict[str, Any], key: str, t: Optional[Instant]) -> None:
        if t is None:
            return
        if self.legacy:
            if isinstance(t, _dt.datetime):
                if t.tzinfo is None:
                    t = t.replace(tzinfo=_dt.timezone.utc)
                t = t.timestamp()
            body[key + "_ms"] = str(int(round(float(t) * 1000)))
        else:
            body[key] = fmt_instant(t)

    def payload(self, value: Any) -> Any:
        """A JSON value as the payload field's value (bytes are sent as they are, legacy only)."""
        if self.legacy:
            raw = value if isinstance(value, (bytes, bytearray)) else json.dumps(value, separators=(",", ":")).encode()
            return base64.b64encode(raw).decode()
        if isinstance(value, (bytes, bytearray)):
            raise TypeError("payloads are JSON values: pass a str, number, list, dict, bool or None, not bytes")
        return value

    # -- answers
    def read_duration(self, obj: Mapping[str, Any], key: str) -> Optional[float]:
        if self.legacy:
            v = obj.get(key + "_ms")
            return None if v is None else to_int(v) / 1000
        return parse_duration(obj.get(key))

    def read_instant(self, obj: Mapping[str, Any], key: str, legacy_key: Optional[str] = None) -> Optional[_dt.datetime]:
        if self.legacy:
            return parse_instant(obj.get(legacy_key or key + "_ms"))
        return parse_instant(obj.get(key))

    def read_payload(self, v: Any) -> Any:
        """A payload field's value as a JSON value (legacy: base64 of JSON, else the bytes)."""
        if not self.legacy:
            return v
        if not v:
            return None
        raw = base64.b64decode(v)
        try:
            return json.loads(raw)
        except ValueError:
            return raw
