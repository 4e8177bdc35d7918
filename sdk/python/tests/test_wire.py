"""The wire conversions (coordd/_wire.py), without a server."""

from __future__ import annotations

import datetime as dt
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from coordd import _wire  # noqa: E402
from coordd.client import check_token  # noqa: E402
from coordd.errors import InvalidToken, LeaseLost, OutcomeUnknown, StaleToken, from_answer  # noqa: E402


class Wire(unittest.TestCase):
    def test_durations(self) -> None:
        for seconds, text in ((30, "30s"), (0.5, "0.500s"), (1.25, "1.250s"), (0, "0s"), (86400, "86400s")):
            self.assertEqual(_wire.fmt_duration(seconds), text)
            self.assertEqual(_wire.parse_duration(text), seconds)
        self.assertIsNone(_wire.parse_duration(None))

    def test_instants(self) -> None:
        t = dt.datetime(2026, 12, 1, 23, 4, 20, 123000, tzinfo=dt.timezone.utc)
        self.assertEqual(_wire.fmt_instant(t), "2026-12-01T23:04:20.123Z")
        self.assertEqual(_wire.fmt_instant(t.timestamp()), "2026-12-01T23:04:20.123Z")
        self.assertEqual(_wire.parse_instant("2026-12-01T23:04:20.123Z"), t)
        self.assertEqual(_wire.parse_instant("2026-12-01T23:04:20.123456789Z"), t.replace(microsecond=123456))
        self.assertEqual(_wire.parse_instant("2026-12-02T01:04:20.123+02:00"), t)
        for unset in (None, "", "1970-01-01T00:00:00Z"):
            self.assertIsNone(_wire.parse_instant(unset))
        with self.assertRaises(ValueError):
            _wire.parse_instant("1796166599893")  # epoch milliseconds: the contract before issue 25

    def test_fields(self) -> None:
        w = _wire.Wire()
        b: dict = {}
        w.duration(b, "ttl", 2)
        w.duration(b, "wait", None)
        w.instant(b, "run_at", 0.001)
        self.assertEqual(b, {"ttl": "2s", "run_at": "1970-01-01T00:00:00.001Z"})
        self.assertEqual(w.payload({"a": 1}), {"a": 1})
        with self.assertRaises(TypeError):
            w.payload(b"raw")
        self.assertEqual(w.read_duration({"expires_in": "1.500s"}, "expires_in"), 1.5)
        self.assertIsNone(w.read_duration({"expires_in": None}, "expires_in"))
        self.assertEqual(_wire.enum_in("JOB_STATE_", "DEAD"), "DEAD")
        self.assertEqual(_wire.enum_in("JOB_STATE_", "JOB_STATE_DEAD"), "DEAD")
        self.assertEqual(_wire.enum_in("JOB_STATE_", "UNSPECIFIED"), "")
        self.assertEqual(_wire.enum_out("JOB_STATE_", "dead"), "DEAD")
        self.assertEqual(_wire.enum_out("JOB_STATE_", "JOB_STATE_DEAD"), "DEAD")

    def test_errors_by_reason(self) -> None:
        e = from_answer(409, {"code": "FAILED_PRECONDITION", "reason": "STALE_TOKEN", "message": "m",
                              "metadata": {"current_generation": "8"}})
        self.assertIsInstance(e, StaleToken)
        self.assertEqual((e.code, e.reason, e.metadata, e.http_status), ("FAILED_PRECONDITION", "STALE_TOKEN",
                                                                         {"current_generation": "8"}, 409))
        self.assertIsInstance(from_answer(409, {"reason": "LEASE_EXPIRED"}), LeaseLost)
        unknown = from_answer(504, {"code": "DEADLINE_EXCEEDED", "reason": "TIMEOUT"})
        self.assertIsInstance(unknown, OutcomeUnknown)
        self.assertTrue(unknown.outcome_unknown)

    def test_tokens(self) -> None:
        self.assertEqual(check_token("billing/close:day:7"), ("billing/close:day", 7))
        for bad in ("no-colon", ":7", "x:", "x:y", "x:0"):
            with self.assertRaises(InvalidToken):
                check_token(bad)


class Signatures(unittest.TestCase):
    """Standard Webhooks signatures (coordd.delivery), on the spec's test vector."""

    secret, wid, ts, body = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
    signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

    def headers(self, sig: str, ts: int = 0) -> dict:
        return {"Webhook-Id": self.wid, "webhook-timestamp": str(ts or self.ts), "webhook-signature": sig,
                "Coordd-Fencing-Token": "job:7:2", "Idempotency-Key": "k", "Coordd-Job-Id": "7", "Coordd-Attempt": "2"}

    def test_vector(self) -> None:
        from coordd import delivery

        self.assertEqual(delivery.sign(self.secret, self.wid, self.ts, self.body), self.signature)
        d = delivery.verify(self.secret, self.body, self.headers(self.signature), now=self.ts + 10)
        self.assertEqual((d.job_id, d.attempt, d.token, d.idempotency_key, d.args), (7, 2, "job:7:2", "k", {"test": 2432232314}))
        rotated = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + self.signature  # one per key during a rotation
        delivery.verify(["whsec_" + "A" * 32, self.secret], self.body, self.headers(rotated), now=self.ts)
        for why, body, hdrs, now in (("tampered body", b'{"test": 1}', self.headers(self.signature), self.ts),
                                     ("old timestamp", self.body, self.headers(self.signature), self.ts + 301),
                                     ("v2 only", self.body, self.headers("v2," + self.signature[3:]), self.ts),
                                     ("no signature", self.body, {}, self.ts)):
            with self.subTest(why), self.assertRaises(delivery.SignatureInvalid):
                delivery.verify(self.secret, body, hdrs, now=now)
        with self.assertRaises(delivery.SignatureInvalid):
            delivery.parse_secret("whsec_" + "A" * 8)


if __name__ == "__main__":
    unittest.main()
