"""A TCP relay in front of the API server that a test can cut, refuse or blackhole.

TLS passes through untouched, so the agent sees the real server's certificate.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class Proxy:
    """Relays 127.0.0.1:<port> to `target`; `mode` is relay | refuse | blackhole."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = "relay"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._conns: list[socket.socket] = []
        self._frozen: set[socket.socket] = set()  # relay nothing more, close nothing
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, mode: str = "refuse") -> None:
        """Drop every open connection; new ones are refused or left hanging."""
        self.mode = mode
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def freeze(self) -> None:
        """Blackhole the open connections without closing them: from now on their bytes
        are dropped both ways, as on a path that lost its route, and neither end is told.
        New connections are left hanging; after restore() they relay again, but the frozen
        ones stay dead until an end gives up on them."""
        self.mode = "blackhole"
        with self._lock:
            self._frozen.update(self._conns)

    def restore(self) -> None:
        self.mode = "relay"

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == "refuse":
                client.close()
                continue
            with self._lock:
                self._conns.append(client)
            if self.mode == "blackhole":
                continue  # accepted, never answered
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=3)
            except OSError:
                client.close()
                continue
            # The 3 s bound was the connect's: a quiet connection (a watch between two
            # events) is no broken one, and only the test may break it.
            upstream.settimeout(None)
            with self._lock:
                self._conns.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                if src not in self._frozen:
                    dst.sendall(data)
        # An end that gives up on a frozen connection closes the other one too: the test
        # is about the end that noticed, and nothing is left open behind it.
        for s in (src, dst):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._frozen.discard(src)
