"""A worker's completions, coalescing off and on.

    python3 bench/worker.py --jobs 3000 --concurrency 64

--jobs jobs are submitted (in batches), then one coordd.Worker with
--concurrency slots runs them with a handler that returns at once; a line
per mode: jobs/s from the worker's start to the last SUCCEEDED, complete
requests per job, CPU per job of this process and of the coordd processes
(/proc/PID/stat). Starts a 3-node cluster of bin/coordd on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import coordd  # noqa: E402
from cluster import Cluster  # noqa: E402
from submit import server_cpu  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=64)
    a = ap.parse_args()
    cluster = Cluster().start()
    try:
        pids = [nd.pid for nd in cluster.nodes]
        for coalesce in (False, True):
            c = coordd.Client(cluster.urls, owner="bench")
            queue = f"bench-worker-{coalesce}"
            for i in range(0, a.jobs, 1000):
                c.jobs.submit_batch([coordd.NewJob(queue, "w") for _ in range(min(1000, a.jobs - i))])
            worker = coordd.Worker(c, queue, concurrency=a.concurrency, worker_id=f"bench-{coalesce}", poll_wait=1.0,
                                   coalesce=coalesce)
            completes = [0]
            call = c._tx.call

            def counted(method: str, path: str, body: object = None, _call=call, **kw: object) -> object:
                if path == "/v1/queue/complete":
                    completes[0] += 1
                return _call(method, path, body, **kw)

            c._tx.call = counted  # type: ignore[method-assign]
            done = threading.Semaphore(0)

            @worker.handle("w")
            def w(job: coordd.Job, ctx: coordd.JobContext) -> None:
                done.release()

            cpu0, srv0, t0 = time.process_time(), server_cpu(pids), time.monotonic()
            worker.start()
            for _ in range(a.jobs):
                done.acquire()
            while int(c.jobs.stats(queue)[0].get("succeeded", 0)) < a.jobs:
                time.sleep(0.02)
            secs = time.monotonic() - t0
            cpu, srv = time.process_time() - cpu0, server_cpu(pids) - srv0
            worker.stop(5)
            print(json.dumps({"sdk": "python", "workload": "worker", "jobs": a.jobs, "concurrency": a.concurrency,
                              "coalesce": coalesce, "jobs_per_s": round(a.jobs / secs),
                              "complete_requests_per_job": round(completes[0] / a.jobs, 3),
                              "sdk_cpu_us_per_job": round(cpu * 1e6 / a.jobs),
                              "coordd_cpu_us_per_job": round(srv * 1e6 / a.jobs)}), flush=True)
            c.close()
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
