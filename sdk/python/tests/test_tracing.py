"""Trace context on jobs (coordd/tracing.py, docs/tracing.md), without a server."""

from __future__ import annotations

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from coordd import _wire, tracing  # noqa: E402
from coordd.jobs import NewJob, _job_body  # noqa: E402
from coordd.types import Job  # noqa: E402

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Tracing(unittest.TestCase):
    def test_parse_format(self) -> None:
        p = tracing.parse_traceparent(TP)
        self.assertEqual(p, tracing.TraceParent(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 1))
        assert p is not None
        self.assertEqual(tracing.format_traceparent(p), TP)
        self.assertTrue(tracing.format_traceparent(p._replace(flags=0)).endswith("-00"))
        self.assertIsNotNone(tracing.parse_traceparent("cc" + TP[2:] + "-future"), "a later version reads as 00")
        for bad in ("", "garbage", TP.upper(), TP + "-x", "ff" + TP[2:],
                    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"):
            self.assertIsNone(tracing.parse_traceparent(bad), bad)

    def test_round_trip(self) -> None:
        w = _wire.Wire()
        body = _job_body(w, NewJob(queue="q", kind="k", traceparent=TP, tracestate="vendor=x"))
        self.assertEqual((body["traceparent"], body["tracestate"]), (TP, "vendor=x"))
        job = Job.of(w, {"id": "7", "queue": "q", "kind": "k", "traceparent": TP, "tracestate": "vendor=x"})
        self.assertEqual((job.traceparent, job.tracestate), (TP, "vendor=x"))
        self.assertEqual(Job.of(w, {"id": "8"}).traceparent, "")

    @unittest.skipIf(tracing.otel() is not None, "opentelemetry is installed")
    def test_without_opentelemetry(self) -> None:
        # Only the strings: no span, nothing taken from a current span.
        self.assertIsNone(tracing.start_attempt(Job.of(_wire.Wire(), {"id": "7", "traceparent": TP}), 1, "w", "job:7:1"))
        self.assertIsNone(tracing.current_traceparent())
        self.assertNotIn("traceparent", _job_body(_wire.Wire(), NewJob(queue="q", kind="k")))


if __name__ == "__main__":
    unittest.main()
