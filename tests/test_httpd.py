"""The /metrics and /healthz server (nodeagent/report/httpd.py): requests read as a client
sends them, and a client that sends nothing holds up no one else."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest

from hack.agentproc import free_port
from nodeagent.report.httpd import Reply, Server, answer, parse_request, response


@pytest.mark.parametrize(
    ("head", "parsed"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", ("GET", "/metrics")),
        (b"GET /healthz?verbose=1 HTTP/1.0\r\n\r\n", ("GET", "/healthz")),
        (b"HEAD / HTTP/1.1\r\n\r\n", ("HEAD", "/")),
        (b"GET /metrics\r\n\r\n", None),  # HTTP/0.9: no version
        (b"GET metrics HTTP/1.1\r\n\r\n", None),
        (b"", None),
        (b"\x16\x03\x01\x02\x00\x01", None),  # a TLS hello
    ],
)
def test_request_lines(head: bytes, parsed: tuple[str, str] | None) -> None:
    assert parse_request(head) == parsed


def pages(path: str) -> Reply:
    if path == "/boom":
        raise RuntimeError("a bug")
    return 200, path.encode(), "text/plain"


@pytest.mark.parametrize(
    ("head", "code"),
    [
        (b"GET /a HTTP/1.1\r\n\r\n", 200),
        (b"POST /a HTTP/1.1\r\n\r\n", 501),
        (b"nonsense\r\n\r\n", 400),
        (b"GET /boom HTTP/1.1\r\n\r\n", 500),
    ],
)
def test_answers(head: bytes, code: int) -> None:
    assert answer(head, pages)[0] == code


def test_response_says_length_and_closes() -> None:
    assert response((404, b"not found\n", "text/plain")) == (
        b"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
        b"Connection: close\r\n\r\nnot found\n"
    )


def test_a_silent_client_holds_up_no_one() -> None:
    port = free_port()
    server = Server("127.0.0.1", port, pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # sends nothing
            start = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=5) as resp:
                assert resp.read() == b"/x"
            assert time.monotonic() - start < 1.0
    finally:
        server.shutdown()
