"""Single submits per second through the Python SDK, coalescing off and on.

    python3 bench/submit.py                               # 4 and 64 threads, 10 s each, 1 and 2 in flight
    python3 bench/submit.py --clients 64 --duration 10 --in-flight 1,2

Each caller is a thread looping ``client.jobs.submit`` on one shared
coordd.Client, closed loop, for the duration after a 1 s warm-up; it starts
a 3-node cluster of bin/coordd on 127.0.0.1 (the coordd processes' CPU is
read from /proc/PID/stat). A line per client count and mode: jobs/s, HTTP
submit requests per job, CPU per job of this process (time.process_time)
and of the coordd processes (utime+stime), p50/p99 of one submit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, List, Union

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import coordd  # noqa: E402
from cluster import Cluster  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pids: List[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        fields = s[s.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def run(c: coordd.Client, clients: int, queue: str, seconds: float, lat: List[float]) -> int:
    end = time.monotonic() + seconds
    counts = [0] * clients

    def loop(k: int) -> None:
        mine: List[float] = []
        while time.monotonic() < end:
            t0 = time.monotonic()
            c.jobs.submit(queue, "bench", {"n": k})
            mine.append(time.monotonic() - t0)
        counts[k] = len(mine)
        lat.extend(mine)

    ts = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="4,64")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--in-flight", default="1,2")
    a = ap.parse_args()
    cluster = Cluster().start()
    try:
        pids = [nd.pid for nd in cluster.nodes]
        modes: List[Any] = [("off", False)] + [(f"on ({k} in flight)", int(k)) for k in a.in_flight.split(",")]
        for clients in [int(x) for x in a.clients.split(",")]:
            for name, coalesce in modes:
                c = coordd.Client(cluster.urls, owner="bench", coalesce=coalesce)
                requests = [0]
                call = c._tx.call

                def counted(method: str, path: str, body: Any = None, _call: Any = call, **kw: Any) -> Any:
                    if path == "/v1/queue/jobs":
                        requests[0] += 1
                    return _call(method, path, body, **kw)

                c._tx.call = counted  # type: ignore[method-assign]
                queue = f"bench-{clients}-{coalesce}"
                run(c, clients, queue, 1.0, [])
                requests[0] = 0
                lat: List[float] = []
                cpu0, srv0 = time.process_time(), server_cpu(pids)
                jobs = run(c, clients, queue, a.duration, lat)
                cpu, srv = time.process_time() - cpu0, server_cpu(pids) - srv0
                lat.sort()
                print(json.dumps({"sdk": "python", "workload": "submit", "clients": clients, "coalesce": name,
                                  "jobs_per_s": round(jobs / a.duration), "requests_per_job": round(requests[0] / jobs, 3),
                                  "sdk_cpu_us_per_job": round(cpu * 1e6 / jobs), "coordd_cpu_us_per_job": round(srv * 1e6 / jobs),
                                  "p50_ms": round(lat[len(lat) // 2] * 1000, 1),
                                  "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1)}), flush=True)
                c.close()
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
