"""A small HTTP server for /metrics and /healthz: GET of a path, one request per connection.

Written on the socket rather than with http.server, which with what it imports (html and its
entity table, socketserver) cost every agent 0.4 MB of resident memory for two fixed pages
(bench/fleet.py measures it). Each connection is answered on a thread of its own, so a slow
client never holds up the kubelet's probe, and every read has a deadline.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from nodeagent import metrics
from nodeagent.types import Milestone, milestone

log = logging.getLogger(__name__)

Reply = tuple[int, bytes, str]  # status, body, content type
Handler = Callable[[str], Reply]  # the request's path (no query) -> its reply

ACCEPT_POLL = 1.0  # how soon shutdown() is noticed
READ_TIMEOUT = 5.0  # a client that sends no complete request in this long is dropped
MAX_REQUEST = 16384  # request line and headers
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def parse_request(head: bytes) -> tuple[str, str] | None:
    """(method, path without the query) of an HTTP request head, or None if malformed."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/") or not parts[1].startswith("/"):
        return None
    return parts[0], parts[1].split("?", 1)[0]


def response(reply: Reply) -> bytes:
    code, body, content_type = reply
    head = (
        f"HTTP/1.0 {code} {REASONS.get(code, '')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def answer(head: bytes, handler: Handler) -> Reply:
    request = parse_request(head)
    if request is None:
        return 400, b"bad request\n", "text/plain"
    method, path = request
    if method != "GET":
        return 501, b"only GET\n", "text/plain"
    try:
        return handler(path)
    except Exception:  # a bug in a page must not take the server down
        log.exception("http: GET %s failed", path)
        return 500, b"internal error\n", "text/plain"


class Server:
    """Listens on (host, port) and answers each connection on a daemon thread."""

    def __init__(self, host: str, port: int, handler: Handler) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(16)
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(ACCEPT_POLL)
        self._handler = handler
        self._stopped = threading.Event()

    def serve_forever(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopped.is_set():
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), name="http", daemon=True).start()

    def shutdown(self) -> None:
        self._stopped.set()
        self._sock.close()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(READ_TIMEOUT)
            try:
                head = self._read_head(conn)
                conn.sendall(response(answer(head, self._handler)))
            except OSError as exc:  # the client went away or was too slow
                log.debug("http: %s", exc)

    @staticmethod
    def _read_head(conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < MAX_REQUEST:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


def serve(address: str, unhealthy: Callable[[], list[str]] = list) -> Any:
    """Serve /metrics and /healthz on `host:port` ('' disables it).

    /healthz is 200 while every loop makes progress and 503 naming the stalled loops
    otherwise, the same rule that feeds the systemd watchdog.
    """
    if not address:
        return None

    def page(path: str) -> Reply:
        if path == "/metrics":
            return 200, metrics.enable().exposition(), metrics.CONTENT_TYPE
        if path == "/healthz":
            stalled = unhealthy()
            text = f"stalled: {', '.join(stalled)}\n" if stalled else "ok\n"
            return 503 if stalled else 200, text.encode(), "text/plain"
        return 404, b"not found\n", "text/plain"

    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        server = Server(host, int(port), page)
    except (OSError, ValueError) as exc:
        milestone(
            log,
            Milestone.METRICS_FAILED,
            "metrics server on %s not started: %s",
            address,
            exc,
            severity=logging.WARNING,
            address=address,
        )
        return None
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
