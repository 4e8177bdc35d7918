"""A TCP proxy on 127.0.0.1 the tests control: pass bytes through, swallow
them (a partition: nothing reaches the node, nothing comes back), or cut a
connection after the node answered (the answer is lost after the request
was applied)."""

from __future__ import annotations

import socket
import threading
from typing import List, Tuple


class Proxy:
    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
        self.blackhole = False
        self._cuts = 0
        self.cut_done = 0
        self._mu = threading.Lock()
        self._ls = socket.socket()
        self._ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._ls.bind(("127.0.0.1", 0))
        self._ls.listen(64)
        self.address = "127.0.0.1:%d" % self._ls.getsockname()[1]
        self._socks: List[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_answers(self, n: int) -> None:
        """The next n answers from the node are dropped and their connections closed."""
        with self._mu:
            self._cuts += n

    def _take_cut(self) -> bool:
        with self._mu:
            if self._cuts > 0:
                self._cuts -= 1
                self.cut_done += 1
                return True
            return False

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._ls.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            with self._mu:
                self._socks += [c, s]
            threading.Thread(target=self._pump, args=(c, s, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self.blackhole:
                    continue  # swallowed: the peer waits for ever
                if answers and self._take_cut():
                    break
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def close(self) -> None:
        self._ls.close()
        with self._mu:
            socks, self._socks = self._socks, []
        for x in socks:
            try:
                x.close()
            except OSError:
                pass
