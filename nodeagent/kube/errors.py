"""What talking to the API server can fail with, each error with a one-line message.

A module of its own, imported by every other one of `nodeagent.kube` and importing none
of them: the client, the credentials and the transport all raise these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class KubeError(Exception):
    """Any failure talking to the API server, with a one-line message."""


class KubeConfigError(KubeError):
    """No usable credentials: missing or malformed kubeconfig."""


class Unreachable(KubeError):
    """The API server did not answer (refused, timed out, DNS)."""


class Silent(Unreachable):
    """A watch's stream sent nothing, not even a bookmark, for longer than the server lets
    a healthy one be quiet: its connection is presumed dead (a blackhole)."""


class OutOfTime(Unreachable):
    """The caller's deadline passed before (or while) the request could be made."""


@dataclass
class ApiError(KubeError):
    """The API server answered with a non-2xx status."""

    status: int
    reason: str
    message: str
    body: dict[str, Any]
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status} {self.reason})"

    @property
    def causes(self) -> list[dict[str, Any]]:
        return list((self.body.get("details") or {}).get("causes") or [])
