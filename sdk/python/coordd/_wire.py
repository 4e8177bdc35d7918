"""Every conversion between Python values and coordd's HTTP/JSON encoding.

The contract (docs/http-api.md, "Conventions"; api/openapi/coordd.json):
field names are the proto names; 64-bit integers arrive as JSON strings;
instants are RFC 3339 strings (``"run_at": "2026-12-01T23:04:20.123Z"``),
durations strings of seconds (``"ttl": "30s"``); payloads (job args and
results, fenced commit payloads, window results, lease values) are JSON
values embedded as they are; enums are short upper-case names
(``"AVAILABLE"``). This module is the one place that knows the encodings.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Dict, Mapping, Optional, Union

Instant = Union[_dt.datetime, float, int]  # a datetime, or seconds since the epoch

_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


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
    """An RFC 3339 string as an aware UTC datetime; None when unset (null, or the epoch)."""
    if v is None or v == "":
        return None
    m = _RFC3339.match(str(v))
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {v!r}")
    frac = (m.group(2) or ".0")[1:7].ljust(6, "0")  # Python before 3.11 reads 3 or 6 digits only
    zone = "+00:00" if m.group(3) in ("Z", "z") else m.group(3)
    t = _dt.datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}")
    return None if t.timestamp() <= 0 else t.astimezone(_dt.timezone.utc)


def to_int(v: Any) -> int:
    """A protojson 64-bit integer (a string) or number; 0 when absent."""
    return 0 if v is None or v == "" else int(v)


def enum_out(prefix: str, name: str) -> str:
    """An enum for a request: its short upper-case name (``"available"`` → ``"AVAILABLE"``)."""
    n = name.upper()
    return n[len(prefix):] if n.startswith(prefix) else n


def enum_in(prefix: str, v: Any) -> str:
    """An enum of an answer as the short name (``"AVAILABLE"``); "" for unspecified."""
    s = str(v or "")
    if s.startswith(prefix):
        s = s[len(prefix):]
    return "" if s in ("UNSPECIFIED", "0") else s


class Wire:
    """Builds request fields and reads answer fields."""

    def duration(self, body: Dict[str, Any], key: str, seconds: Optional[float]) -> None:
        if seconds is not None:
            body[key] = fmt_duration(seconds)

    def instant(self, body: Dict[str, Any], key: str, t: Optional[Instant]) -> None:
        if t is not None:
            body[key] = fmt_instant(t)

    def payload(self, value: Any) -> Any:
        """A JSON value as a payload field's value."""
        if isinstance(value, (bytes, bytearray)):
            raise TypeError("payloads are JSON values: pass a str, number, list, dict, bool or None, not bytes")
        return value

    def read_duration(self, obj: Mapping[str, Any], key: str) -> Optional[float]:
        return parse_duration(obj.get(key))

    def read_instant(self, obj: Mapping[str, Any], key: str) -> Optional[_dt.datetime]:
        return parse_instant(obj.get(key))

    def read_payload(self, v: Any) -> Any:
        """A payload field's value (a JSON value; null when empty)."""
        return v
