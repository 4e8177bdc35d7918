"""A real 3-node coordd cluster for the tests: processes on 127.0.0.1 port 0.

The first node starts alone (it bootstraps a cluster of one), the others
join through its gRPC address; each node's bound addresses are read from
``<data-dir>/addresses.json``. Every process is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def binary(name: str) -> str:
    """bin/<name> of this repository, built if missing (COORDD_BIN, COORDCTL_BIN override)."""
    path = os.environ.get(name.upper() + "_BIN") or os.path.join(REPO, "bin", name)
    if not os.path.exists(path):
        subprocess.run(["go", "build", "-o", os.path.join(REPO, "bin") + "/", "./cmd/" + name], cwd=REPO, check=True)
    return path


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies (Linux), so no node outlives a crashed test."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class Node:
    id: str
    data_dir: str
    log_path: str
    proc: Optional[subprocess.Popen] = None
    grpc: str = ""
    http: str = ""
    raft: str = ""
    extra: list = field(default_factory=list)

    scheme: str = "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.http}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


class Cluster:
    """``tls_clients``: run mutual TLS with development certificates (``coordctl
    certs dev``) for these client identities, in ``certs`` (``cert(name)``);
    ``acl``: the text of an ACL file the nodes enforce (with TLS)."""

    def __init__(self, size: int = 3, extra_args: Optional[list] = None, tls_clients: Optional[list] = None,
                 acl: str = "") -> None:
        self.bin = binary("coordd")
        self.dir = tempfile.mkdtemp(prefix="coordd-pysdk-")
        self.certs = os.path.join(self.dir, "certs")
        self.ssl: Optional[ssl.SSLContext] = None
        ids = [f"node{i}" for i in range(1, size + 1)]
        extra = list(extra_args or [])
        if tls_clients:
            subprocess.run([binary("coordctl"), "certs", "dev", "--dir", self.certs, "--nodes", ",".join(ids),
                            "--clients", ",".join(["admin"] + list(tls_clients))], check=True, stdout=subprocess.DEVNULL)
            self.ssl = ssl.create_default_context(cafile=self.cert("ca")[0])
            self.ssl.load_cert_chain(*self.cert("admin"))
            if acl:
                with open(os.path.join(self.dir, "acl.yaml"), "w") as f:
                    f.write(acl)
                extra += ["--acl-file", os.path.join(self.dir, "acl.yaml")]
        self.nodes = []
        for i in ids:
            nd = Node(i, os.path.join(self.dir, i), os.path.join(self.dir, i + ".log"), extra=list(extra))
            if tls_clients:
                nd.scheme = "https"
                nd.extra += ["--tls-cert", self.cert(i)[0], "--tls-key", self.cert(i)[1], "--tls-ca", self.cert("ca")[0]]
            self.nodes.append(nd)

    def cert(self, name: str) -> tuple:
        """(certificate, key) files of a development identity (``ca``: the CA's)."""
        return os.path.join(self.certs, name + ".pem"), os.path.join(self.certs, name + "-key.pem")

    def _get_json(self, url: str, timeout: float = 1.0) -> dict:
        with urllib.request.urlopen(url, timeout=timeout, context=self.ssl) as r:
            return json.loads(r.read())

    # -- lifecycle
    def start(self, timeout: float = 30.0) -> "Cluster":
        deadline = time.monotonic() + timeout
        try:
            first = self.nodes[0]
            self._spawn(first, join="")
            self._read_addresses(first, deadline)
            for nd in self.nodes[1:]:
                self._spawn(nd, join=first.grpc)
            for nd in self.nodes[1:]:
                self._read_addresses(nd, deadline)
            self._wait_members(deadline)
        except BaseException:
            self.close()
            raise
        return self

    def _spawn(self, nd: Node, join: str) -> None:
        addr = lambda a: a or "127.0.0.1:0"  # noqa: E731 - a restart reuses what it bound
        args = [self.bin, "--id", nd.id, "--data-dir", nd.data_dir, "--grpc-addr", addr(nd.grpc),
                "--http-addr", addr(nd.http), "--raft-addr", addr(nd.raft), "--log-level", "warn"] + nd.extra
        if join:
            args += ["--join", join]
        with open(nd.log_path, "ab") as log:
            nd.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_die_with_parent)

    def _read_addresses(self, nd: Node, deadline: float) -> None:
        path = os.path.join(nd.data_dir, "addresses.json")
        while True:
            try:
                with open(path) as f:
                    a = json.load(f)
                nd.grpc, nd.http, nd.raft = a["grpc"], a["http"], a["raft"]
                return
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            if nd.proc is not None and nd.proc.poll() is not None:
                raise RuntimeError(f"{nd.id} exited before it listened:\n{self.log_tail(nd)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{nd.id} wrote no addresses.json in time:\n{self.log_tail(nd)}")
            time.sleep(0.01)

    def _wait_members(self, deadline: float) -> None:
        last = None
        while time.monotonic() < deadline:
            try:
                if all(sum(1 for m in self._get_json(nd.url + "/v1/cluster/members").get("members", []) if m.get("grpc_address"))
                       == len(self.nodes) for nd in self.nodes):
                    self.wait_leader(deadline - time.monotonic())
                    return
            except OSError as e:  # not serving yet
                last = e
            time.sleep(0.02)
        raise RuntimeError(f"the nodes did not form one cluster in time ({last}); logs in {self.dir}")

    def leader(self) -> Optional[Node]:
        """The running node that says it leads, or None."""
        for nd in self.running():
            try:
                if self._get_json(nd.url + "/v1/cluster/status", 0.5).get("state") == "Leader":
                    return nd
            except OSError:
                pass
        return None

    def wait_leader(self, timeout: float = 10.0) -> Node:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nd = self.leader()
            if nd is not None:
                return nd
            time.sleep(0.02)
        raise RuntimeError("no leader in time")

    def running(self) -> list:
        return [nd for nd in self.nodes if nd.proc is not None and nd.proc.poll() is None]

    def kill(self, nd: Node, sig: int = signal.SIGKILL) -> None:
        """Stops one node by its PID and reaps it."""
        if nd.proc is None:
            return
        try:
            os.kill(nd.proc.pid, signal.SIGCONT)
            os.kill(nd.proc.pid, sig)
        except ProcessLookupError:
            pass
        nd.proc.wait()
        nd.proc = None

    def restart(self, nd: Node) -> None:
        self._spawn(nd, join="")

    @property
    def urls(self) -> list:
        return [nd.url for nd in self.nodes]

    def log_tail(self, nd: Node, n: int = 2000) -> str:
        try:
            with open(nd.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        for nd in self.nodes:
            self.kill(nd)
        shutil.rmtree(self.dir, ignore_errors=True)
