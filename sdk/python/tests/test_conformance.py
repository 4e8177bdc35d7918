"""The SDK conformance scenarios (sdk/CONFORMANCE.md) against real 3-node clusters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import coordd  # noqa: E402
from cluster import Cluster, binary  # noqa: E402
from proxy import Proxy  # noqa: E402

CLUSTER: Optional[Cluster] = None


def setUpModule() -> None:
    global CLUSTER
    CLUSTER = Cluster().start()


def tearDownModule() -> None:
    if CLUSTER is not None:
        CLUSTER.close()


def poll(cond, timeout: float, what: str, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Child:
    """A child process of tests/child.py, stopped by its PID at the end."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "child.py"), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lines: List[Dict[str, Any]] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(json.loads(line))
                self._cv.notify_all()

    def event(self, name: str, timeout: float = 20.0) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        exited = False
        with self._cv:
            while True:
                for e in self.lines:
                    if e.get("event") == name:
                        return e
                if exited or time.monotonic() > deadline:
                    raise AssertionError(f"child sent no {name!r} event (exit {self.proc.poll()}): {self.lines}")
                exited = self.proc.poll() is not None
                self._cv.wait(0.2)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


class Conformance(unittest.TestCase):
    def setUp(self) -> None:
        assert CLUSTER is not None
        self.urls = ",".join(CLUSTER.urls)
        self.client = coordd.Client(self.urls, owner=f"test-{self._testMethodName}")
        self.prefix = self._testMethodName.removeprefix("test_")

    def tearDown(self) -> None:
        self.client.close()

    def child(self, *args: str) -> Child:
        ch = Child(*args)
        self.addCleanup(ch.stop)
        return ch

    # acquire_renew_release
    def test_acquire_renew_release(self) -> None:
        name = self.prefix + "/lease"
        with self.client.lease(name, ttl=1.5) as lease:
            self.assertEqual(lease.token, f"{name}:{lease.generation}")
            first = lease.generation
            time.sleep(3.5)  # more than 2 TTLs: only renewals at TTL/3 keep it
            self.assertFalse(lease.lost.is_set())
            lease.check()
            info = self.client.get_lease(name)
            self.assertEqual((info.generation, info.owner, info.released), (first, lease.owner, False))
            self.assertGreaterEqual(info.renewals, 5)  # every 0.5 s for 3.5 s
            self.assertAlmostEqual(info.ttl, 1.5)
        self.assertTrue(lease.done.is_set())
        self.assertFalse(lease.lost.is_set())
        self.assertTrue(self.client.get_lease(name).released)
        with self.assertRaises(coordd.LeaseLost) as cm:
            lease.check()
        self.assertEqual(cm.exception.reason, "LEASE_RELEASED")
        with self.client.lease(name, ttl=1.5) as again:
            self.assertEqual(again.generation, first + 1)

    def test_held_lease_wait(self) -> None:
        name = self.prefix + "/lease"
        holder = self.client.lease(name, ttl=5, owner="holder")
        with self.assertRaises(coordd.NotAcquired) as cm:
            self.client.lease(name, ttl=5, owner="other")
        self.assertEqual((cm.exception.holder, cm.exception.generation), ("holder", holder.generation))
        t0 = time.monotonic()
        with self.assertRaises(coordd.NotAcquired):  # a wait that runs out is a definite answer
            self.client.lease(name, ttl=5, owner="other", wait=1)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        threading.Timer(0.5, holder.release).start()
        t0 = time.monotonic()
        with self.client.lease(name, ttl=5, owner="other", wait=10) as waiter:
            self.assertEqual(waiter.generation, holder.generation + 1)
            self.assertLess(time.monotonic() - t0, 3.0)  # at the release, not the TTL

    # frozen_holder_is_fenced
    def test_frozen_holder_is_fenced(self) -> None:
        name, resource, ttl = self.prefix + "/lease", self.prefix + "/ledger", 2.0
        ch = self.child("hold", self.urls, name, str(ttl), resource)
        held = ch.event("held")
        time.sleep(0.3)
        ch.signal(signal.SIGSTOP)
        # The successor queues for the lease; it is granted once the frozen
        # holder's TTL runs out on the server.
        with self.client.lease(name, ttl=5, owner="successor", wait=15) as successor:
            self.assertEqual(successor.generation, held["generation"] + 1)
            granted = self.client.get_lease(name).acquired_at
            assert granted is not None
            ch.signal(signal.SIGCONT)
            ch.send("go")
            woke = ch.event("woke")
            # The holder's local deadline passed before the successor's grant:
            # the first thing it sees when it runs again is the loss.
            self.assertLess(woke["deadline_wall"], granted.timestamp(), woke)
            self.assertEqual(woke["check"], "LOCAL_DEADLINE", woke)
            self.assertEqual(woke["reason"], "LOCAL_DEADLINE")
            # Its write after it woke is refused by the fence.
            self.assertEqual((woke["write"], woke["write_type"]), ("STALE_TOKEN", "StaleToken"), woke)
            self.assertEqual(woke["write_metadata"].get("current_generation"), str(successor.generation))
            self.assertFalse(successor.lost.is_set())
        with self.assertRaises(coordd.NotFound):
            self.client.get_resource(resource)

    def proxy(self, http_addr: str) -> Proxy:
        host, port = http_addr.rsplit(":", 1)
        p = Proxy((host, int(port)))
        self.addCleanup(p.close)
        return p

    def test_lost_before_regrant(self) -> None:
        """A running holder cut off from every node: its lost signal fires before the successor's grant."""
        assert CLUSTER is not None
        name = self.prefix + "/lease"
        proxies = [self.proxy(nd.http) for nd in CLUSTER.nodes]
        cut_off = coordd.Client([p.address for p in proxies], owner="partitioned", timeout=2)
        self.addCleanup(cut_off.close)
        lease = cut_off.lease(name, ttl=2)
        time.sleep(0.3)
        for p in proxies:
            p.blackhole = True  # nothing reaches the nodes any more, nothing comes back
        with self.client.lease(name, ttl=5, owner="successor", wait=15) as successor:
            granted = self.client.get_lease(name).acquired_at
            assert granted is not None
            self.assertEqual(successor.generation, lease.generation + 1)
        self.assertTrue(lease.lost.is_set())
        self.assertEqual(lease.reason, "LOCAL_DEADLINE")
        assert lease.lost_at is not None
        lost_wall = time.time() - (time.monotonic() - lease.lost_at)
        self.assertLess(lost_wall, granted.timestamp())
        with self.assertRaises(coordd.LeaseLost):
            lease.check()

    def test_outcome_unknown(self) -> None:
        """Answers lost after the node applied the call: safe calls are repeated and answer the
        first outcome; the others raise OutcomeUnknown."""
        assert CLUSTER is not None
        p = self.proxy(CLUSTER.wait_leader().http)
        c = coordd.Client([p.address], owner="unlucky", timeout=10)
        self.addCleanup(c.close)
        c.status()  # reads the contract before any answer is cut
        name, res, q = self.prefix + "/lease", self.prefix + "/ledger", self.prefix
        p.cut_answers(1)
        lease = c.lease(name, ttl=30)  # the first renewal is 10 s away: no renewal meets a cut
        self.assertEqual(p.cut_done, 1)
        self.assertEqual((lease.generation, self.client.get_lease(name).generation), (1, 1))  # one grant
        p.cut_answers(1)
        commit = lease.fenced_commit(res, "key-1", {"n": 1})
        self.assertTrue(commit.duplicate)  # the repeat learned the first outcome
        self.assertEqual(self.client.get_resource(res).commits, 1)
        p.cut_answers(1)
        job = c.jobs.submit(q, "k", {"n": 1})
        self.assertTrue(job.duplicate)
        self.assertEqual([j.id for j in self.client.jobs.list(q)], [job.id])
        p.cut_answers(1)
        with self.assertRaises(coordd.OutcomeUnknown) as cm:
            c.fenced_commit(res, lease.token, None, {"n": 2})  # no key: not repeated
        self.assertTrue(cm.exception.outcome_unknown)
        self.assertEqual(self.client.get_resource(res).commits, 2)  # it was applied
        self.client.jobs.cancel(job.id)
        p.cut_answers(1)
        with self.assertRaises(coordd.OutcomeUnknown):
            c.jobs.retry(job.id)
        self.assertEqual(self.client.jobs.get(job.id).state, "AVAILABLE")
        self.assertEqual(p.cut_done, 5)
        lease.release()

    # idempotency_key_replays
    def test_idempotency_key_replays(self) -> None:
        resource = self.prefix + "/invoice-42"
        with self.client.lease(self.prefix + "/lease", ttl=5) as lease:
            first = lease.fenced_commit(resource, "invoice-42", {"total": 12})
            again = self.client.fenced_commit(resource, lease.token, "invoice-42", {"total": 99})
        self.assertEqual((first.accepted, first.duplicate), (True, False))
        self.assertEqual((again.accepted, again.duplicate), (True, True))
        self.assertEqual(again.payload, {"total": 12})
        self.assertEqual(again.generation, first.generation)
        self.assertEqual(self.client.get_resource(resource).commits, 1)
        a = self.client.jobs.submit(self.prefix, "k", {"n": 1}, unique_key="once")
        b = self.client.jobs.submit(self.prefix, "k", {"n": 2}, unique_key="once")
        self.assertEqual((b.id, b.duplicate, a.duplicate), (a.id, True, False))

    # worker_killed_mid_job
    def test_worker_killed_mid_job(self) -> None:
        queue = self.prefix
        job = self.client.jobs.submit(queue, "effect", {"n": 1}, visibility_timeout=2, max_attempts=3,
                                      backoff_initial=0.1)
        doomed = self.child("worker", self.urls, queue)
        first = doomed.event("effect")
        self.assertEqual((first["job"], first["attempt"], first["duplicate"]), (job.id, 1, False))
        doomed.signal(signal.SIGKILL)  # mid-job: the effect is made, the job not completed
        doomed.stop()
        seen: List[coordd.Commit] = []
        worker = coordd.Worker(self.client, queue, concurrency=1, poll_wait=0.5)

        @worker.handle("effect")
        def effect(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            seen.append(ctx.fenced_commit(f"effects/{j.id}", f"job-{j.id}-effect", {"attempt": ctx.attempt}))
            return {"attempt": ctx.attempt}

        with worker:
            done = poll(lambda: (lambda g: g if g.state == "SUCCEEDED" else None)(self.client.jobs.get(job.id)),
                        15, "the job to be run again")
        self.assertEqual(done.attempts, 2)
        self.assertEqual([a.outcome for a in done.attempt_log], ["LAPSED", "SUCCEEDED"])
        self.assertEqual(len(seen), 1)
        self.assertTrue(seen[0].duplicate)  # the effect of attempt 1, answered again
        self.assertEqual(seen[0].payload, {"attempt": 1})
        self.assertEqual(self.client.get_resource(f"effects/{job.id}").commits, 1)

    def test_worker_lifecycle(self) -> None:
        queue = self.prefix
        ok = self.client.jobs.submit(queue, "ok", {"x": 2})
        bad = self.client.jobs.submit(queue, "bad", None, max_attempts=2, backoff_initial=0.05)
        never = self.client.jobs.submit(queue, "permanent", None, max_attempts=5)
        slow = threading.Event()
        worker = coordd.Worker(self.client, queue, concurrency=2, poll_wait=0.5)

        @worker.handle("ok")
        def ok_handler(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            self.assertTrue(ctx.token.startswith(f"job:{j.id}:"))
            return {"doubled": j.args["x"] * 2}

        @worker.handle("bad")
        def bad_handler(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            raise RuntimeError("the ledger is closed")

        @worker.handle("permanent")
        def permanent_handler(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            raise coordd.Permanent("no such store")

        @worker.handle("slow")
        def slow_handler(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            slow.set()
            time.sleep(0.5)
            return "finished"

        worker.start()
        try:
            final = lambda i: (lambda g: g if g.state in ("SUCCEEDED", "DEAD") else None)(self.client.jobs.get(i))  # noqa: E731
            j1, j2, j3 = (poll(lambda i=i: final(i), 10, f"job {i}") for i in (ok.id, bad.id, never.id))
            self.assertEqual((j1.state, j1.attempt_log[-1].result), ("SUCCEEDED", {"doubled": 4}))
            self.assertEqual((j2.state, j2.attempts), ("DEAD", 2))
            self.assertIn("RuntimeError: the ledger is closed", j2.attempt_log[-1].error)
            self.assertEqual((j3.state, j3.attempts), ("DEAD", 1))
            s = self.client.jobs.submit(queue, "slow")
            poll(slow.is_set, 10, "the slow handler")
        finally:
            self.assertTrue(worker.stop(5))  # waits for the running handler
        self.assertEqual(self.client.jobs.get(s.id).state, "SUCCEEDED")

        # A handler still running when stop gives up is handed back.
        hung = threading.Event()
        w2 = coordd.Worker(self.client, queue, concurrency=1, poll_wait=0.5)

        @w2.handle("hang")
        def hang(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            hung.set()
            ctx.cancelled.wait(10)  # until the worker hands the attempt back
            return "too late"

        h = self.client.jobs.submit(queue, "hang", None, backoff_initial=60)
        w2.start()
        poll(hung.is_set, 10, "the hanging handler")
        t0 = time.monotonic()
        self.assertFalse(w2.stop(0.5))  # gave up on it
        self.assertLess(time.monotonic() - t0, 3)
        back = self.client.jobs.get(h.id)
        self.assertEqual((back.state, back.attempt_log[-1].outcome), ("RETRYABLE", "FAILED"))
        self.assertEqual(back.attempt_log[-1].error, "worker shutdown")

    # cancel_reaches_handler
    def test_cancel_reaches_handler(self) -> None:
        queue = self.prefix
        started = threading.Event()
        seen: List[Any] = []
        worker = coordd.Worker(self.client, queue, concurrency=1, poll_wait=0.5)

        @worker.handle("long")
        def long_handler(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            started.set()
            if ctx.cancelled.wait(20):
                seen.append((time.monotonic(), ctx.error))
            return "too late"

        j = self.client.jobs.submit(queue, "long", None, visibility_timeout=30)  # the first heartbeat is 10 s away
        worker.start()
        try:
            poll(started.is_set, 10, "the handler")
            t0 = time.monotonic()
            self.client.jobs.cancel(j.id)
            poll(lambda: bool(seen), 5, "the handler's cancellation")
            self.assertLess(seen[0][0] - t0, 2.0)
            self.assertEqual(seen[0][1].reason, "JOB_CANCELLED")
        finally:
            worker.stop(5)

    # max_run_ends_handler
    def test_max_run_ends_handler(self) -> None:
        queue = self.prefix
        started, ended = threading.Event(), threading.Event()
        seen: List[Any] = []
        worker = coordd.Worker(self.client, queue, concurrency=1, poll_wait=0.5)

        @worker.handle("long")
        def long_handler(j: coordd.Job, ctx: coordd.JobContext) -> Any:
            started.set()
            if ctx.cancelled.wait(10):  # a handler that heartbeats (the worker does) and runs on
                seen.append(ctx.error)
                ended.set()
            return "too late"

        j = self.client.jobs.submit(queue, "long", None, max_run=1.5, visibility_timeout=30, max_attempts=1)
        worker.start()
        try:
            poll(started.is_set, 10, "the handler")
            t0 = time.monotonic()
            poll(ended.is_set, 5, "the handler's cancel at max_run")
            self.assertLess(time.monotonic() - t0, 2.0)
            self.assertEqual(seen[0].reason, "MAX_RUN_EXCEEDED")
            done = poll(lambda: (lambda g: g if g.state == "DEAD" else None)(self.client.jobs.get(j.id)), 10, "the job dead")
            self.assertEqual(done.attempt_log[-1].outcome, "LAPSED")
            self.assertIn("max_run exceeded", done.attempt_log[-1].error)
        finally:
            worker.stop(5)

    def test_jobs_and_schedules(self) -> None:
        import datetime as dt

        q, jobs = self.prefix, self.client.jobs
        now = jobs.submit(q, "k", {"when": "now"})
        at = jobs.submit(q, "k", None, at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
        after = jobs.submit(q, "k", None, after=600)
        batch = jobs.submit_batch([coordd.NewJob(q, "k", i) for i in range(3)])
        self.assertEqual(now.state, "AVAILABLE")
        self.assertEqual((at.state, after.state), ("SCHEDULED", "SCHEDULED"))
        assert at.run_at is not None and after.run_at is not None and now.run_at is not None
        self.assertAlmostEqual((at.run_at - now.run_at).total_seconds(), 3600, delta=5)
        self.assertAlmostEqual((after.run_at - now.run_at).total_seconds(), 600, delta=5)
        self.assertEqual(len({b.id for b in batch}), 3)
        got = jobs.get(now.id)
        self.assertEqual((got.queue, got.kind, got.args, got.state), (q, "k", {"when": "now"}, "AVAILABLE"))
        self.assertEqual(got.visibility_timeout, 30.0)
        self.assertEqual({j.id for j in jobs.list(q, state="scheduled")}, {at.id, after.id})
        self.assertEqual(jobs.cancel(after.id).state, "CANCELLED")
        self.assertEqual(jobs.retry(after.id).state, "AVAILABLE")
        with self.assertRaises(coordd.JobNotFound):
            jobs.get(10**12)
        name = self.prefix.replace("_", "-")
        s = self.client.schedules.put(name, "5 0 * * *", queue=q, kind="close", args={"a": 1},
                                      time_zone="America/Sao_Paulo", overlap="forbid")
        self.assertEqual((s.name, s.paused, s.revision), (name, False, 1))
        assert s.next_due is not None
        self.assertEqual(self.client.schedules.pause(name).paused, True)
        self.assertEqual(self.client.schedules.resume(name).paused, False)
        self.assertIn(name, [x.name for x in self.client.schedules.list()])
        self.assertEqual(self.client.schedules.get(name).schedule, "5 0 * * *")
        with self.assertRaises(coordd.ScheduleExists):
            self.client.schedules.put(name, "10 0 * * *", queue=q, kind="close", create_only=True)
        with self.assertRaises(coordd.ScheduleNotFound):
            self.client.schedules.pause("no-such-schedule")

    # bad_input_typed_error
    def test_bad_input_typed_error(self) -> None:
        c = self.client
        cases = [
            (lambda: c.lease("", ttl=1), "name"),                      # local
            (lambda: c.lease(self.prefix, ttl=0.2), None),             # below the server's minimum TTL
            (lambda: c.fenced_commit("r", "no-colon"), "token"),       # local
            (lambda: c.jobs.submit(self.prefix, "k", priority=1000), "priority"),
            (lambda: c.raw("POST", "/v1/queue/fetch", {"queues": "q"}), None),  # a wrong type
            (lambda: c.raw("POST", "/v1/queue/jobs", {"jobs": [{"queue": "q", "kind": "k", "bogus": 1}]}), None),
        ]
        for call, field in cases:
            with self.subTest(field=field):
                with self.assertRaises(coordd.InvalidArgument) as cm:
                    call()
                e = cm.exception
                self.assertEqual((e.reason, e.outcome_unknown), ("INVALID_ARGUMENT", False))
                if field:
                    self.assertEqual(e.field, field)
                else:
                    self.assertEqual((e.code, e.http_status), ("INVALID_ARGUMENT", 400))
        with self.assertRaises(coordd.InvalidToken):
            c.fenced_commit("r", "lease:x")
        with self.assertRaises(coordd.NotFound) as nf:
            c.raw("GET", "/v1/no-such-route", idempotent=True)
        self.assertEqual(nf.exception.metadata.get("path"), "/v1/no-such-route")
        with self.assertRaises(coordd.StaleToken):
            with c.lease(self.prefix + "/stale", ttl=5) as lease:
                pass
            with c.lease(self.prefix + "/stale", ttl=5):
                c.fenced_commit(self.prefix + "/r", lease.token, "k")

    # daily_close_example
    def test_daily_close_example(self) -> None:
        import daily_close

        stores = [1, 2, 3]
        day = "2026-09-25"
        before = {s: self._commits(f"commissions/store-{s}") for s in stores}
        self.assertTrue(daily_close.close_day(self.client, day, stores))
        w = self.client.get_window("daily-close", day)
        self.assertEqual(w.state, "COMPLETED")
        for s in stores:
            self.assertEqual(self._commits(f"commissions/store-{s}"), before[s] + 1)
        # A second run finds the window completed and writes nothing.
        self.assertTrue(daily_close.close_day(self.client, day, stores))
        for s in stores:
            self.assertEqual(self._commits(f"commissions/store-{s}"), before[s] + 1)
        # Held by another replica: skipped.
        with self.client.lease("daily-close", ttl=5, owner="other-replica"):
            self.assertFalse(daily_close.close_day(self.client, "2026-09-26", stores))

    def test_windows(self) -> None:
        job, day = self.prefix, "2026-09-25"
        lease = self.client.lease(job, ttl=5, claim=(job, day))  # the grant and the claim in one call
        assert lease.claim is not None
        self.assertEqual((lease.claim.claimed, lease.claim.attempts), (True, 1))
        w = lease.claim.complete({"stores": 6}, release=True)  # and the release, in one entry
        self.assertEqual((w.state, w.result, w.generation), ("COMPLETED", {"stores": 6}, lease.generation))
        self.assertTrue(lease.done.is_set())
        self.assertTrue(self.client.get_lease(job).released)
        with self.assertRaises(coordd.WindowCompleted):
            self.client.lease(job, ttl=5, claim=(job, day))
        with self.client.lease(job, ttl=5) as again:
            claim = again.claim_window(job, day)
            self.assertFalse(claim.claimed)  # not an error
            self.assertEqual(claim.window.owner, lease.owner)
        self.assertEqual([x.window for x in self.client.list_windows(job)], [day])

    def test_readme_daily_close_is_the_example(self) -> None:
        """The README's daily close is the code test_daily_close_example runs."""
        with open(os.path.join(HERE, "..", "README.md")) as f:
            readme = f.read()
        block = readme.split("```python\ndef close_day", 1)[1].split("```", 1)[0]
        shown = ("def close_day" + block).rstrip().splitlines()
        with open(os.path.join(HERE, "..", "examples", "daily_close.py")) as f:
            src = f.read().splitlines()
        start = next(i for i, l in enumerate(src) if l.startswith("def close_day"))
        end = next(i for i, l in enumerate(src) if "# --- end of the example" in l)
        code = [l for l in src[start:end] if "# ---" not in l and '"""' not in l]
        self.assertEqual(shown, code)
        self.assertEqual(len(shown) - 1 + 1, 11)  # the body, plus `client = coordd.Client(...)`: the README's count

    def _commits(self, resource: str) -> int:
        try:
            return self.client.get_resource(resource).commits
        except coordd.NotFound:
            return 0


class LeaderKilled(unittest.TestCase):
    """leader_killed_lease_kept, on a cluster of its own."""

    def setUp(self) -> None:
        self.cluster = Cluster().start()
        self.addCleanup(self.cluster.close)
        self.client = coordd.Client(self.cluster.urls, owner="survivor")
        self.addCleanup(self.client.close)

    def test_leader_killed_lease_kept(self) -> None:
        name = "leader_killed/lease"
        with self.client.lease(name, ttl=3) as lease:
            time.sleep(0.5)
            leader = self.cluster.wait_leader()
            renewed = lease.renewals
            self.cluster.kill(leader)  # SIGKILL
            self.cluster.wait_leader(10)
            # Renewals go on with the new leader (two more, to be sure).
            poll(lambda: lease.renewals >= renewed + 2 or lease.lost.is_set(), 10, "renewals on the new leader")
            self.assertFalse(lease.lost.is_set(), lease.reason)
            lease.check()
            info = self.client.get_lease(name)
            self.assertEqual((info.generation, info.owner), (lease.generation, "survivor"))
            commit = lease.fenced_commit("leader_killed/resource", "after-failover", {"ok": True})
            self.assertTrue(commit.accepted)


class Delivered(unittest.TestCase):
    """HTTP delivery to a Python endpoint: it verifies the signature and makes the effect with the
    delivery's token and key (coordd.delivery)."""

    def setUp(self) -> None:
        import base64
        import http.server
        import secrets as pysecrets

        self.secret = "whsec_" + base64.b64encode(pysecrets.token_bytes(32)).decode()
        d = __import__("tempfile").mkdtemp(prefix="coordd-pysdk-secrets-")
        self.addCleanup(__import__("shutil").rmtree, d, True)
        with open(os.path.join(d, "secrets"), "w") as f:
            f.write(f"billing {self.secret}\n")
        self.cluster = Cluster(extra_args=["--delivery-allow", "127.0.0.1", "--delivery-secrets",
                                           os.path.join(d, "secrets")]).start()
        self.addCleanup(self.cluster.close)
        self.client = coordd.Client(self.cluster.urls)
        self.addCleanup(self.client.close)
        self.seen: List[Any] = []
        test, client, secret = self, self.client, self.secret

        class Endpoint(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    d = coordd.delivery.verify(secret, body, dict(self.headers))
                    c = client.fenced_commit(f"invoices/{d.args['invoice']}/charge", d.token, d.idempotency_key, d.args)
                    test.seen.append((d, c))
                    status = 200
                except coordd.delivery.SignatureInvalid:
                    status = 401
                except (coordd.StaleToken, coordd.AttemptLost):
                    status = 409
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"charged": true}')

            def log_message(self, *a: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)

    def test_delivery_endpoint(self) -> None:
        url = "http://127.0.0.1:%d/charge" % self.server.server_address[1]
        job = self.client.jobs.submit("billing", "charge", {"invoice": 42}, unique_key="charge-42",
                                      target=coordd.Target(url, secret="billing", timeout=5))
        done = poll(lambda: (lambda g: g if g.state in ("SUCCEEDED", "DEAD") else None)(self.client.jobs.get(job.id)),
                    20, "the delivery")
        self.assertEqual((done.state, done.attempt_log[-1].result), ("SUCCEEDED", {"charged": True}))
        d, commit = self.seen[0]
        self.assertEqual((d.job_id, d.attempt, d.token, d.idempotency_key), (job.id, 1, f"job:{job.id}:1", "charge-42"))
        self.assertTrue(commit.accepted)
        self.assertEqual(self.client.get_resource("invoices/42/charge").commits, 1)
        unsigned = self.client.jobs.submit("billing", "charge", {"invoice": 43}, max_attempts=1,
                                           target=coordd.Target(url))  # not signed: the endpoint refuses it
        dead = poll(lambda: (lambda g: g if g.state == "DEAD" else None)(self.client.jobs.get(unsigned.id)), 20, "the refusal")
        self.assertIn("401", dead.attempt_log[-1].error)


ACL = """rules:
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
  - name: admins
    identities: [admin]
    ops: [lease, window, fence, read, job, work, admin]
  - name: billing
    identities: [billing-a]
    ops: [lease, read]
    prefixes: [billing/]
"""


class MutualTLS(unittest.TestCase):
    """HTTPS with client certificates (identities), an ACL, refused identities as typed errors."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.cluster = Cluster(tls_clients=["billing-a"], acl=ACL).start()
        try:
            other = os.path.join(cls.cluster.dir, "other-ca")
            subprocess.run([binary("coordctl"), "certs", "dev", "--dir", other,
                            "--clients", "billing-a"], check=True, stdout=subprocess.DEVNULL)
        except BaseException:
            cls.cluster.close()
            raise
        cls.other = other

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.close()

    def client(self, ident: Optional[str], **kw: Any) -> coordd.Client:
        ca = self.cluster.cert("ca")[0]
        cert, key = self.cluster.cert(ident) if ident else (None, None)
        c = coordd.Client([nd.http for nd in self.cluster.nodes], tls_ca=kw.pop("ca", ca),
                          tls_cert=kw.pop("cert", cert), tls_key=kw.pop("key", key), timeout=3, **kw)
        self.addCleanup(c.close)
        return c

    def test_tls_identities(self) -> None:
        with self.client("billing-a").lease("billing/close", ttl=5) as lease:
            self.assertTrue(lease.fenced_commit is not None and lease.generation >= 1)
            info = self.client("admin").get_lease("billing/close")
            self.assertEqual(info.raw.get("identity"), "billing-a")  # the certificate is the identity
            # Another identity may not renew or release what billing-a holds.
            with self.assertRaises(coordd.PermissionDenied) as cm:
                self.client("admin").raw("POST", "/v1/leases/billing/close/release",
                                         {"owner": lease.owner, "generation": str(lease.generation)})
            self.assertEqual(cm.exception.reason, "IDENTITY_MISMATCH")
        with self.assertRaises(coordd.PermissionDenied) as cm:
            self.client("billing-a").lease("payroll/close", ttl=5)  # the ACL: billing/ only
        self.assertEqual((cm.exception.reason, cm.exception.http_status), ("PERMISSION_DENIED", 403))
        self.assertEqual(cm.exception.metadata.get("identity"), "billing-a")
        with self.assertRaises(coordd.Unauthenticated):
            self.client(None).lease("billing/close", ttl=5)  # no client certificate
        other_cert = os.path.join(self.other, "billing-a.pem"), os.path.join(self.other, "billing-a-key.pem")
        with self.assertRaises(coordd.Unauthenticated):
            self.client(None, cert=other_cert[0], key=other_cert[1]).lease("billing/close", ttl=5)  # another CA
        with self.assertRaises(coordd.Unauthenticated):  # a server this CA did not sign
            self.client("admin", ca=os.path.join(self.other, "ca.pem")).lease("billing/close", ttl=5)


if __name__ == "__main__":
    unittest.main()
