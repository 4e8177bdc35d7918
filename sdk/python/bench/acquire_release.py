"""Acquire + release cycles per second through the Python SDK (one run).

    python3 bench/acquire_release.py                     # starts a 3-node cluster of bin/coordd on 127.0.0.1
    python3 bench/acquire_release.py --endpoints 127.0.0.1:7411,127.0.0.1:7421,127.0.0.1:7431
    python3 bench/acquire_release.py --clients 1,16 --duration 5

Each client is a thread with its own coordd.Client, acquiring a fresh name
(TTL 30 s), then releasing it, in a closed loop; the line per client count
is cycles/s and the p50/p99 of one cycle. Compare with the Go SDK:
bin/coordbench --cluster --workload acquire-release --clients 1,16.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import coordd  # noqa: E402


def sdk_cycle(k: int, endpoints: list):
    c = coordd.Client(endpoints, owner=f"bench-{k}")
    return lambda name: c.acquire(name, 30).release(), c.close


def http_cycle(k: int, endpoints: list):
    """The same two calls as bare http.client requests to the leader, without the SDK (the HTTP floor)."""
    import http.client
    import json

    leader = coordd.Client(endpoints)
    leader._tx.locate()
    _, host, port = leader._tx.endpoints[leader._tx._current]
    conn = http.client.HTTPConnection(host, port)
    w = leader._wire

    def cycle(name: str) -> None:
        body: dict = {"owner": f"bench-{k}"}
        w.duration(body, "ttl", 30)
        conn.request("POST", f"/v1/leases/{name}/acquire", json.dumps(body), {"Content-Type": "application/json"})
        gen = json.loads(conn.getresponse().read())["lease"]["generation"]
        conn.request("POST", f"/v1/leases/{name}/release", json.dumps({"owner": f"bench-{k}", "generation": gen}),
                     {"Content-Type": "application/json"})
        conn.getresponse().read()

    return cycle, conn.close


def run(endpoints: list, clients: int, duration: float, mode: str = "sdk") -> str:
    lat: list = []
    mu = threading.Lock()
    stop = time.monotonic() + duration

    def loop(k: int) -> None:
        cycle, close = (sdk_cycle if mode == "sdk" else http_cycle)(k, endpoints)
        mine, i = [], 0
        while time.monotonic() < stop:
            t = time.perf_counter()
            cycle(f"bench/{mode}/{clients}/{k}/{i}")
            mine.append(time.perf_counter() - t)
            i += 1
        with mu:
            lat.extend(mine)
        close()

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    lat.sort()
    q = lambda p: lat[min(int(p * len(lat)), len(lat) - 1)] * 1000  # noqa: E731
    return (f"python-{mode} acquire-release clients={clients}: {len(lat) / took:,.0f} cycles/s "
            f"({len(lat)} in {took:.1f} s), p50 {q(0.5):.1f} ms, p99 {q(0.99):.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoints", default="", help="HTTP addresses of the nodes (default: start a cluster)")
    ap.add_argument("--clients", default="1,16")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--http-floor", action="store_true", help="also run the cycle as bare http.client calls")
    a = ap.parse_args()
    cluster = None
    if a.endpoints:
        endpoints = a.endpoints.split(",")
    else:
        from cluster import Cluster  # noqa: PLC0415

        cluster = Cluster().start()
        endpoints = cluster.urls
    try:
        for n in (int(x) for x in a.clients.split(",")):
            for mode in ("sdk", "http") if a.http_floor else ("sdk",):
                print(run(endpoints, n, a.duration, mode), flush=True)
    finally:
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
