"""submit_coalesced (sdk/CONFORMANCE.md): concurrent submits of one client
share requests, each caller with its own answer; a worker's concurrent
completions share requests. Against a real 3-node cluster."""

from __future__ import annotations

import os
import sys
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import coordd  # noqa: E402
from cluster import Cluster  # noqa: E402

CLUSTER: Optional[Cluster] = None


def setUpModule() -> None:
    global CLUSTER
    CLUSTER = Cluster().start()


def tearDownModule() -> None:
    if CLUSTER is not None:
        CLUSTER.close()


def poll(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Counted:
    """A client whose submit requests are counted (the number of jobs each carried);
    ``gate``, when set, holds a submit request before it leaves."""

    def __init__(self, **options: Any) -> None:
        assert CLUSTER is not None
        self.client = coordd.Client(",".join(CLUSTER.urls), owner="coalesce", **options)
        self.sizes: List[int] = []
        self.gate: Optional[threading.Event] = None
        call = self.client._tx.call

        def counted(method: str, path: str, body: Any = None, **kw: Any) -> Dict[str, Any]:
            if method == "POST" and path == "/v1/queue/jobs":
                self.sizes.append(len(body["jobs"]))
                gate = self.gate
                if gate is not None:
                    gate.wait(10)
            return call(method, path, body, **kw)

        self.client._tx.call = counted  # type: ignore[method-assign]

    def close(self) -> None:
        self.client.close()


def concurrently(n: int, fn: Callable[[int], Any]) -> List[Any]:
    """fn(0..n-1) on n threads started together; each result or its exception."""
    start = threading.Barrier(n)

    def run(i: int) -> Any:
        start.wait()
        try:
            return fn(i)
        except Exception as e:  # noqa: BLE001 - the caller's own answer
            return e

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(run, range(n)))


class Conformance(unittest.TestCase):
    def counted(self, **options: Any) -> Counted:
        c = Counted(**options)
        self.addCleanup(c.close)
        return c

    def behind_held(self, c: Counted, queue: str, n: int, fn: Callable[[int], Any]) -> List[Any]:
        """fn(0..n-1) on n threads while a first submit's request is held, so all n
        wait for the next request; the held one is let go once they all wait."""
        gate = c.gate = threading.Event()
        first = threading.Thread(target=lambda: c.client.jobs.submit(queue, "first"))
        first.start()
        poll(lambda: c.sizes, 5, "the first request")
        out: List[Any] = [None] * n

        def run(i: int) -> None:
            try:
                out[i] = fn(i)
            except Exception as e:  # noqa: BLE001 - the caller's own answer
                out[i] = e

        ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        b = c.client.jobs._batcher
        poll(lambda: b is not None and len(b._pending) == n, 10, f"{n} callers waiting")
        c.gate = None
        gate.set()
        for t in ts + [first]:
            t.join(30)
        return out

    # submit_coalesced
    def test_submit_coalesced(self) -> None:
        with self.subTest("the server answers two jobs of one unique key in one request as two calls would"):
            c = self.counted()
            a, b = c.client.jobs.submit_batch([coordd.NewJob("co-key", "k", unique_key="same"),
                                               coordd.NewJob("co-key", "k", unique_key="same")])
            self.assertEqual((a.duplicate, b.duplicate, b.id), (False, True, a.id))

        with self.subTest("concurrent submits share requests, each caller gets its own job"):
            c = self.counted()
            n = 64
            subs = concurrently(n, lambda i: c.client.jobs.submit("co-many", "k", {"i": i}))
            self.assertEqual(len({s.id for s in subs}), n, subs[:3])
            self.assertEqual(sum(c.sizes), n)
            self.assertLessEqual(len(c.sizes), n // 4, c.sizes)
            c = self.counted()  # the same, every caller waiting behind a held request: one request for all
            subs = self.behind_held(c, "co-many", n, lambda i: c.client.jobs.submit("co-many", "k", {"i": i}))
            self.assertEqual(len({s.id for s in subs}), n)
            self.assertEqual(c.sizes, [1, n])
            for i, s in enumerate(subs):
                self.assertEqual(c.client.jobs.get(s.id).args, {"i": i})

        with self.subTest("each job of a shared request keeps its own traceparent"):
            c = self.counted()

            def tp(i: int) -> str:
                return f"00-{i + 1:032d}-{i + 1:016d}-01"

            subs = self.behind_held(c, "co-trace", 3, lambda i: c.client.jobs.submit("co-trace", "k", traceparent=tp(i)))
            self.assertEqual(c.sizes, [1, 3])
            for i, s in enumerate(subs):
                self.assertEqual(c.client.jobs.get(s.id).traceparent, tp(i))

        with self.subTest("a lone submit goes out at once, alone"):
            c = self.counted()
            c.gate = threading.Event()  # held: the request is seen before any answer
            t = threading.Thread(target=lambda: c.client.jobs.submit("co-lone", "k"))
            t.start()
            poll(lambda: c.sizes, 5, "the request")
            self.assertEqual(c.sizes, [1])
            c.gate.set()
            t.join(10)

        with self.subTest("one invalid job among valid ones: its own InvalidArgument, the others submitted"):
            c = self.counted()
            res = self.behind_held(c, "co-bad", 12, lambda i: c.client.jobs.submit("co-bad", "k", {"i": i},
                                                                                 priority=1000 if i == 9 else 0))
            for i, r in enumerate(res):
                if i != 9:
                    self.assertIsInstance(r, coordd.SubmittedJob, f"caller {i}: {r!r}")
            e = res[9]
            self.assertIsInstance(e, coordd.InvalidArgument)
            self.assertEqual((e.http_status, e.field, e.metadata.get("index"), e.outcome_unknown), (400, "priority", "0", False))
            self.assertEqual(c.sizes, [1, 12, 1, 11], "refused together; the bad one alone, then the others")

        with self.subTest("two concurrent callers with one unique key: one created, the other its duplicate"):
            c = self.counted()
            subs = self.behind_held(c, "co-dup", 8, lambda i: c.client.jobs.submit("co-dup", "k", {"i": i},
                                                                                 unique_key="twice" if i >= 6 else ""))
            self.assertEqual(subs[6].id, subs[7].id)
            self.assertEqual(sorted([subs[6].duplicate, subs[7].duplicate]), [False, True])
            self.assertEqual(sum(s.duplicate for s in subs), 1)
            self.assertEqual(c.sizes, [1, 8], "in one request")

        with self.subTest("a caller whose timeout ends while it waits: nothing sent; the others submitted"):
            c = self.counted()
            c.gate = threading.Event()
            first = threading.Thread(target=lambda: c.client.jobs.submit("co-abort", "k"))
            first.start()
            poll(lambda: c.sizes, 5, "the first request")  # in flight, held: the next calls wait
            with self.assertRaises(coordd.Unavailable) as cm:
                c.client.jobs.submit("co-abort", "k", unique_key="abort-waiting", timeout=0.2)
            self.assertFalse(cm.exception.outcome_unknown, cm.exception)
            c.gate.set()
            first.join(10)
            self.assertFalse(c.client.jobs.submit("co-abort", "k", unique_key="abort-waiting").duplicate,
                             "nothing was submitted for it")

        with self.subTest("a caller whose timeout ends while its shared request is in flight: outcome unknown"):
            c = self.counted()
            gate1 = c.gate = threading.Event()
            first = threading.Thread(target=lambda: c.client.jobs.submit("co-abort2", "k"))
            first.start()
            poll(lambda: c.sizes, 5, "the first request")
            out: Dict[int, Any] = {}

            def submit(i: int, timeout: Optional[float]) -> None:
                try:
                    out[i] = c.client.jobs.submit("co-abort2", "k", unique_key=f"abort2-{i}", timeout=timeout)
                except coordd.CoorddError as e:
                    out[i] = e

            ts = [threading.Thread(target=submit, args=(i, 1.0 if i == 1 else None)) for i in range(3)]
            for t in ts:
                t.start()
            poll(lambda: c.client.jobs._batcher is not None and len(c.client.jobs._batcher._pending) == 3, 5,
                 "the three waiting behind the held request")
            gate2 = c.gate = threading.Event()  # the next request is held too
            gate1.set()
            first.join(10)
            poll(lambda: len(c.sizes) == 2, 5, "the shared request")
            self.assertEqual(c.sizes, [1, 3])
            ts[1].join(5)
            self.assertIsInstance(out.get(1), coordd.OutcomeUnknown, out)
            gate2.set()
            for t in ts:
                t.join(10)
            self.assertTrue(isinstance(out[0], coordd.SubmittedJob) and isinstance(out[2], coordd.SubmittedJob), out)
            self.assertTrue(c.client.jobs.submit("co-abort2", "k", unique_key="abort2-1").duplicate,
                            "the request went on: it was submitted")

        with self.subTest("coalescing off: one request per call"):
            c = self.counted(coalesce=False)
            concurrently(16, lambda i: c.client.jobs.submit("co-off", "k"))
            self.assertEqual(c.sizes, [1] * 16)

        with self.subTest("a worker's concurrent completions share requests; every job succeeds once"):
            c = self.counted()
            queue, n = "co-worker", 200
            subs = concurrently(32, lambda i: [c.client.jobs.submit(queue, "w", {"i": i * 100 + k}) for k in range(n // 32 + 1)])
            ids = [s.id for batch in subs for s in batch]
            runs: Dict[int, int] = {}
            mu = threading.Lock()
            worker = coordd.Worker(c.client, queue, concurrency=32, worker_id="co-worker", poll_wait=0.5)

            @worker.handle("w")
            def w(job: coordd.Job, ctx: coordd.JobContext) -> Any:
                with mu:
                    runs[job.id] = runs.get(job.id, 0) + 1
                return {"i": job.args["i"]}

            worker.start()
            try:
                poll(lambda: len(list(c.client.jobs.list(queue, state="SUCCEEDED", page_size=1000))) >= len(ids),
                     30, "every job succeeded", every=0.1)
            finally:
                worker.stop(5)
            for i in ids:
                j = c.client.jobs.get(i)
                self.assertEqual((j.state, j.attempts), ("SUCCEEDED", 1))
                self.assertEqual(runs.get(i), 1, f"job {i} ran once")
            self.assertLess(worker._requests["completions"], len(ids) / 2, worker._requests)
