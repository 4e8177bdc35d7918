"""The endpoint's side of coordd's HTTP delivery (docs/delivery.md).

A node delivers a job to an HTTP target as one signed request per attempt
(Standard Webhooks 1.0: ``webhook-id``, ``webhook-timestamp``,
``webhook-signature``: ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``,
one per key during a rotation) with the attempt's fencing token
(``Coordd-Fencing-Token``) and the job's ``Idempotency-Key``::

    def charge(body: bytes, headers) -> int:            # your framework's handler
        d = coordd.delivery.verify(SECRET, body, headers)   # SignatureInvalid: answer 401
        try:
            client.fenced_commit("invoices/42/charge", d.token, d.idempotency_key, d.args)
        except (coordd.StaleToken, coordd.AttemptLost):
            return 409                                    # a stale delivery: its write was refused
        return 200
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from . import errors

TOLERANCE = 300.0  # seconds a request's timestamp may be from this machine's clock


class SignatureInvalid(errors.CoorddError):
    """The request is not signed by a known secret, or its timestamp is too old or new."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="UNAUTHENTICATED", reason="SIGNATURE_INVALID")


@dataclass
class Delivery:
    """A verified delivery: the job, the attempt, its token and key, the args (JSON)."""

    job_id: int
    attempt: int
    token: str
    idempotency_key: str
    webhook_id: str
    args: Any
    window: str
    occurrence: str
    deadline: str
    #: The traceparent header (W3C, docs/tracing.md): the deliverer's span of this request, or the job's context.
    traceparent: str = ""
    tracestate: str = ""


def parse_secret(secret: str) -> bytes:
    """A ``whsec_<base64>`` secret (the prefix optional) as its key bytes."""
    raw = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except ValueError as e:
        raise SignatureInvalid(f"secret is not whsec_ + base64: {e}") from e
    if not 24 <= len(key) <= 64:
        raise SignatureInvalid(f"secret has {len(key)} bytes of key, want 24 to 64")
    return key


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,`` signature of a request (what a node sends)."""
    mac = hmac.new(parse_secret(secret), f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def _header(headers: Mapping[str, str], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return ""


def verify(secrets: Union[str, Sequence[str]], body: bytes, headers: Mapping[str, str], *,
           tolerance: float = TOLERANCE, now: Optional[float] = None) -> Delivery:
    """Checks a delivery's signature against ``secrets`` (one, or several during a
    rotation) and its timestamp against the clock; returns what it carries.
    :class:`SignatureInvalid` otherwise."""
    keys = [parse_secret(s) for s in ([secrets] if isinstance(secrets, str) else secrets)]
    wid, ts, sigs = (_header(headers, h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not wid or not ts or not sigs:
        raise SignatureInvalid("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        t = int(ts)
    except ValueError:
        raise SignatureInvalid(f"webhook-timestamp {ts!r} is not Unix seconds") from None
    skew = (time.time() if now is None else now) - t
    if tolerance > 0 and abs(skew) > tolerance:
        raise SignatureInvalid(f"webhook-timestamp is {skew:.0f}s from now (tolerance {tolerance:.0f}s)")
    signed = f"{wid}.{t}.".encode() + body
    wants = [base64.b64encode(hmac.new(k, signed, hashlib.sha256).digest()) for k in keys]
    for sig in sigs.split():
        version, _, value = sig.partition(",")
        if version == "v1" and any(hmac.compare_digest(value.encode(), w) for w in wants):
            break
    else:
        raise SignatureInvalid("no valid v1 signature")
    try:
        args = json.loads(body) if body else None
    except ValueError:
        args = None
    job = _header(headers, "coordd-job-id")
    att = _header(headers, "coordd-attempt")
    return Delivery(job_id=int(job) if job.isdigit() else 0, attempt=int(att) if att.isdigit() else 0,
                    token=_header(headers, "coordd-fencing-token"),
                    idempotency_key=_header(headers, "idempotency-key"), webhook_id=wid, args=args,
                    window=_header(headers, "coordd-window"), occurrence=_header(headers, "coordd-occurrence"),
                    deadline=_header(headers, "coordd-deadline"), traceparent=_header(headers, "traceparent"),
                    tracestate=_header(headers, "tracestate"))
