"""Requests to the cloud's link-local metadata endpoint: one deadline, no proxy, no redirects.

The endpoint answers on the node's own link (169.254.169.254): a proxy from the
environment must never see these requests, so the plain http.client is used, and every
failure is a `MetadataError` whose `error` labels the metric.

One deadline bounds the whole exchange: the connect, the request, the status line and
headers, and the body. A socket timeout alone bounds each receive, so a reply trickling a
byte a second would hold the reader for as long as it trickles (40 s were seen); here
every receive waits only for what is left of the request's deadline, and a reply not
whole by then is an error like any other (`Error.TIMEOUT`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

BODY_LIMIT = 1 << 20  # the largest answer read (a scheduled-events list is a few kB)


class Error(StrEnum):
    """Why an answer of the endpoint was not acted on (the metric's label)."""

    TIMEOUT = "timeout"  # no whole answer within the request's deadline
    UNREACHABLE = "unreachable"
    HTTP = "http"  # an unexpected status
    MALFORMED = "malformed"  # a body that does not parse, or values out of the contract
    TOKEN = "token"  # AWS: no IMDSv2 session token
    IMPLAUSIBLE = "implausible"  # a time far from the node's clock
    OTHER_VM = "other-vm"  # Azure: an event for other VMs only


class MetadataError(Exception):
    def __init__(self, error: Error, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class Reply:
    status: int
    body: str
    headers: Mapping[str, str]


class _DeadlineSocket(socket.socket):
    """A connected socket whose every send and receive waits only for what is left of
    one deadline (monotonic): http.client's reads of the status line, the headers and
    the body all go through `recv_into`."""

    deadline = 0.0

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        return left

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.settimeout(self._left())
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self.settimeout(self._left())
        return super().recv(bufsize, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.settimeout(self._left())
        super().sendall(data, flags)


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    plain = socket.create_connection((host, port), timeout=max(0.001, deadline - time.monotonic()))
    sock = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.deadline = deadline
    return sock


def request(
    base: str,
    path: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
    timeout: float = 2.0,
) -> Reply:
    """One request to `base` + `path`, whole within `timeout` seconds; raises
    MetadataError when no whole answer came."""
    import http.client  # on a cloud only (nodeagent/cloud/watcher.py, source_for)

    url = urlsplit(base)
    deadline = time.monotonic() + timeout
    conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=timeout)
    try:
        conn.sock = _connect(conn.host, conn.port, deadline)
        conn.request(method, path, body=body, headers=dict(headers or {}))
        resp = conn.getresponse()
        text = resp.read(BODY_LIMIT).decode("utf-8", "replace")
        return Reply(resp.status, text, {k.lower(): v for k, v in resp.getheaders()})
    except TimeoutError:
        raise MetadataError(
            Error.TIMEOUT, f"{base}{path}: no whole answer in {timeout:g}s"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        raise MetadataError(Error.UNREACHABLE, f"{base}{path}: {exc}") from None
    finally:
        conn.close()


def unexpected(reply: Reply, path: str) -> MetadataError:
    first = reply.body.strip().splitlines()[0][:80] if reply.body.strip() else ""
    return MetadataError(Error.HTTP, f"{path}: HTTP {reply.status} {first}".rstrip())
