"""Child processes of the tests (frozen or killed by them): one JSON line per event on stdout.

    child.py hold URLS LEASE TTL RESOURCE   hold a lease; on a line on stdin: check it, then write with its token
    child.py worker URLS QUEUE              run a worker whose "effect" handler writes, reports, and hangs
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import coordd  # noqa: E402


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def wall(mono: float) -> float:
    """A time.monotonic() instant on the wall clock (time.time())."""
    return time.time() - (time.monotonic() - mono)


def hold(urls: str, name: str, ttl: float, resource: str) -> None:
    client = coordd.Client(urls, owner="frozen-holder")
    lease = client.acquire(name, ttl)
    say(event="held", generation=lease.generation)
    sys.stdin.readline()  # the test froze us, took the lease, resumed us, and says go
    out: dict = {"event": "woke", "lost_set": lease.lost.is_set()}
    try:
        lease.check()
        out["check"] = "ok"
    except coordd.LeaseLost as e:
        out["check"] = e.reason
    out["deadline_wall"] = wall(lease.deadline)
    out["lost_at_wall"] = wall(lease.lost_at) if lease.lost_at is not None else None
    out["reason"] = lease.reason
    # A process that wakes up mid-operation sends what it was sending: the fence decides.
    try:
        lease.fenced_commit(resource, "frozen-write", {"by": "frozen-holder"})
        out["write"] = "accepted"
    except coordd.CoorddError as e:
        out["write"] = e.reason
        out["write_type"] = type(e).__name__
        out["write_metadata"] = e.metadata
    say(**out)


def worker(urls: str, queue: str) -> None:
    client = coordd.Client(urls)
    w = coordd.Worker(client, queue, concurrency=1, poll_wait=1.0, worker_id="doomed-worker")

    @w.handle("effect")
    def effect(job: coordd.Job, ctx: coordd.JobContext) -> None:
        c = ctx.fenced_commit(f"effects/{job.id}", f"job-{job.id}-effect", {"attempt": ctx.attempt})
        say(event="effect", job=job.id, attempt=ctx.attempt, duplicate=c.duplicate)
        ctx.cancelled.wait()  # killed before it completes

    w.start()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
