"""Requests to the cloud's link-local metadata endpoint: bounded, no proxy, no redirects.

The endpoint answers on the node's own link (169.254.169.254): a proxy from the
environment must never see these requests, so the plain http.client is used, and every
failure is a `MetadataError` whose `error` labels the metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit


class Error(StrEnum):
    """Why an answer of the endpoint was not acted on (the metric's label)."""

    TIMEOUT = "timeout"
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


def request(
    base: str,
    path: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
    timeout: float = 2.0,
) -> Reply:
    """One request to `base` + `path`; raises MetadataError when no answer came."""
    import http.client  # on a cloud only (nodeagent/cloud/watcher.py, source_for)

    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        resp = conn.getresponse()
        text = resp.read(1 << 20).decode("utf-8", "replace")
        return Reply(resp.status, text, {k.lower(): v for k, v in resp.getheaders()})
    except TimeoutError:
        raise MetadataError(Error.TIMEOUT, f"{base}{path}: no answer in {timeout:.0f}s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise MetadataError(Error.UNREACHABLE, f"{base}{path}: {exc}") from None
    finally:
        conn.close()


def unexpected(reply: Reply, path: str) -> MetadataError:
    first = reply.body.strip().splitlines()[0][:80] if reply.body.strip() else ""
    return MetadataError(Error.HTTP, f"{path}: HTTP {reply.status} {first}".rstrip())
