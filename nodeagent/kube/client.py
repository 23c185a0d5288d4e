"""A small JSON client for the Kubernetes API.

The official client loads credentials (kubeconfig, exec plugins, in-cluster service
account) and owns the connection pool; requests go through it but bodies stay plain
dicts: building model objects for a hundred pods costs more than the drain itself.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

JSON = dict[str, Any]
log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 15.0
POOL_SIZE = 64


class KubeError(Exception):
    """Any failure talking to the API server, with a one-line message."""


class KubeConfigError(KubeError):
    """No usable credentials: missing or malformed kubeconfig."""


class Unreachable(KubeError):
    """The API server did not answer (refused, timed out, DNS)."""


class OutOfTime(Unreachable):
    """The caller's deadline passed before (or while) the request could be made."""


@dataclass
class ApiError(KubeError):
    """The API server answered with a non-2xx status."""

    status: int
    reason: str
    message: str
    body: JSON
    retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status} {self.reason})"

    @property
    def causes(self) -> list[JSON]:
        return list((self.body.get("details") or {}).get("causes") or [])


def _api_error(status: int, reason: str, data: bytes, headers: Any) -> ApiError:
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    retry = (headers or {}).get("Retry-After")
    return ApiError(
        status=status,
        reason=str(body.get("reason") or reason or ""),
        message=str(body.get("message") or reason or "request failed"),
        body=body,
        retry_after=float(retry) if retry and retry.isdigit() else None,
    )


def _unreachable(host: str, exc: BaseException) -> Unreachable:
    text = str(getattr(exc, "reason", None) or exc)
    # urllib3 nests the OS error deep in its message: keep only that part.
    m = re.search(r"\[Errno -?\d+\] ([^'\"\)]+)", text)
    detail = m.group(1) if m else text.rsplit(": ", 1)[-1].strip(" \"'")
    if detail.count(")") > detail.count("("):
        detail = detail.rstrip(")")
    detail = detail or type(exc).__name__
    return Unreachable(f"API server {host} unreachable: {detail}")


def _load_configuration(kubeconfig: str | None) -> Any:
    from kubernetes import client, config  # slow import: only when a client is needed

    from nodeagent.kube.kubeconfig import check_kubeconfig

    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path is not None and not path.strip():
        raise KubeConfigError("KUBECONFIG: empty value (unset it, or name a kubeconfig file)")
    try:
        if path:
            check_kubeconfig(Path(path))
            config.load_kube_config(config_file=path, client_configuration=cfg)
        elif Path("~/.kube/config").expanduser().is_file():
            path = "~/.kube/config"
            check_kubeconfig(Path(path).expanduser())
            config.load_kube_config(client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            path = "(in-cluster service account)"
            config.load_incluster_config(client_configuration=cfg)
        else:
            raise KubeConfigError(
                "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod"
            )
    except config.ConfigException as exc:
        raise KubeConfigError(f"kubeconfig {path}: {_one_line(exc)}") from None
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
        # The client library assumes a well-formed file; anything it trips over in
        # one that passed check_kubeconfig (bad base64, a field of the wrong type, an
        # unreadable certificate file) is still the file's fault, not ours.
        why = _one_line(exc) or type(exc).__name__
        raise KubeConfigError(f"kubeconfig {path}: unusable credentials: {why}") from None
    cfg.connection_pool_maxsize = POOL_SIZE
    if not cfg.verify_ssl:
        import logging
        import warnings

        from urllib3.exceptions import InsecureRequestWarning

        # One line at start instead of a warning on every request.
        warnings.simplefilter("ignore", InsecureRequestWarning)
        logging.getLogger(__name__).warning("kubeconfig disables TLS verification")
    return cfg


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class _CertFile:
    """The client certificate file a kubeconfig names, watched for rotation.

    The kubelet rotates its certificate by moving the `kubelet-client-current.pem`
    symlink to a new file. New connections read the file again (urllib3 loads the
    chain per connection), but pooled keep-alive connections keep the old certificate,
    and the API server checks a certificate's expiry at every request. So when the file
    changes, the pool is emptied and every later request shakes hands with the new one.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen = self._identity()

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)  # follows the symlink: a move shows as a new inode
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def rotated(self) -> bool:
        """True once per change of the file."""
        now = self._identity()
        if now is None or now == self.seen:
            return False
        self.seen = now
        return True


class Kube:
    """Plain-JSON requests against one API server.

    Thread-safe: the urllib3 pool underneath is shared by worker threads.
    """

    def __init__(self, configuration: Any) -> None:
        import urllib3
        from kubernetes import client

        configuration.retries = urllib3.Retry(
            total=1, connect=1, read=0, redirect=0, status=0, backoff_factor=0.1
        )
        self._api = client.ApiClient(configuration)
        self.host: str = configuration.host
        self.deadline: float | None = None  # time.monotonic() bound on every request
        cert = getattr(configuration, "cert_file", None)
        self._cert = _CertFile(cert) if isinstance(cert, str) and cert else None

    def bounded(self, deadline: float) -> Kube:
        """The same client (and connection pool) with every request cut to end by
        `deadline` (monotonic): no connect, TLS handshake or read outlives it."""
        clone = copy.copy(self)
        clone.deadline = deadline
        return clone

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None) -> Kube:
        """Credentials from `kubeconfig`, else $KUBECONFIG, ~/.kube/config, in-cluster."""
        return cls(_load_configuration(kubeconfig))

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = READ_TIMEOUT,
    ) -> JSON:
        """Send one request; return the decoded JSON body (or {} when empty)."""
        data = self._call(method, path, query, body, content_type, (CONNECT_TIMEOUT, timeout)).data
        return json.loads(data) if data else {}

    def _call(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None,
        body: Any,
        content_type: str,
        timeout: tuple[float, float],
    ) -> Any:
        """Send a request; return the raw (unread) urllib3 response, or raise."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0.05:
                raise OutOfTime(f"no time left for {method} {path}")
            timeout = (min(timeout[0], left), min(timeout[1], left))
        if self._cert is not None and self._cert.rotated():
            log.info("client certificate %s changed: reconnecting with it", self._cert.path)
            self._api.rest_client.pool_manager.clear()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            # param_serialize adds the host, the query and fresh credentials (it runs
            # exec plugins' token refresh); the body stays a plain dict.
            method, url, headers, body, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self._api.call_api(
                method, url, header_params=headers, body=body, _request_timeout=timeout
            ).response
        except ApiException as exc:  # the client wraps SSL errors with status 0
            raise _unreachable(self.host, exc) from None
        except (HTTPError, OSError) as exc:
            raise _unreachable(self.host, exc) from None
        if resp.status >= 300:
            raise _api_error(resp.status, resp.reason, resp.data, resp.headers)
        return resp

    def server_time(self) -> float:
        """The API server's clock (its Date header, whole seconds), for judging the
        timestamps it writes without trusting this host's clock."""
        from email.utils import parsedate_to_datetime

        resp = self._call("GET", "/version", None, None, "", (CONNECT_TIMEOUT, READ_TIMEOUT))
        try:
            return parsedate_to_datetime(resp.headers["Date"]).timestamp()
        except (KeyError, TypeError, ValueError):
            raise KubeError(f"API server {self.host} sent no usable Date header") from None

    def get(self, path: str, **query: str) -> JSON:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body=body)

    def merge_patch(self, path: str, body: JSON) -> JSON:
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def strategic_patch(self, path: str, body: JSON) -> JSON:
        return self.request(
            "PATCH", path, body=body, content_type="application/strategic-merge-patch+json"
        )

    def delete(self, path: str, body: JSON | None = None) -> JSON:
        return self.request("DELETE", path, body=body)

    def watch(self, path: str, query: dict[str, str], timeout_seconds: int) -> Iterator[JSON]:
        """Yield watch events ({"type", "object"}) until the server ends the stream."""
        params = dict(query, watch="true", timeoutSeconds=str(timeout_seconds))
        resp = self._call("GET", path, params, None, "", (CONNECT_TIMEOUT, timeout_seconds + 10))
        try:
            yield from _json_lines(resp, self.host)
        finally:
            resp.release_conn()


def _json_lines(resp: Any, host: str) -> Iterator[JSON]:
    from urllib3.exceptions import HTTPError

    buf = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
    except (TimeoutError, HTTPError, OSError) as exc:
        raise _unreachable(host, exc) from None


def pods_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/pods"
    return f"{base}/{quote(name)}" if name else base


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


def api_stamp(seconds: float | None = None) -> str:
    """Epoch seconds (default: now) as an API timestamp; the inverse of :func:`api_time`."""
    from datetime import UTC, datetime

    when = time.time() if seconds is None else seconds
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_time(text: str | None) -> float | None:
    """An API timestamp (RFC 3339, e.g. 2026-11-23T18:01:02Z) as epoch seconds."""
    if not text:
        return None
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
