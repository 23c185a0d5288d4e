"""A minimal JSON client for the harness: plain dicts over a shared urllib3 pool.

Credentials come from a kubeconfig through the official client's loader; requests are
sent directly so that hot paths (the kubelet simulator) never build model objects.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

JSON = dict[str, Any]

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class KubeError(Exception):
    """Any failure talking to the API server."""


class Unreachable(KubeError):
    """The API server did not answer (refused, reset, timed out)."""


class ApiError(KubeError):
    """The API server answered with a non-2xx status."""

    def __init__(self, status: int, body: JSON, what: str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{what}: HTTP {status} {self.reason}: {body.get('message', '')}")

    @property
    def reason(self) -> str:
        return str(self.body.get("reason") or "")


def _decode(data: bytes) -> JSON:
    if not data:
        return {}
    try:
        value = json.loads(data)
    except ValueError:
        return {"message": data[:500].decode(errors="replace")}
    return value if isinstance(value, dict) else {"items": value}


class Kube:
    """JSON requests and watches against one API server, thread-safe."""

    def __init__(self, kubeconfig: Path | str, *, pool_size: int = 32, timeout: float = 15.0):
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        self.server: str = str(cfg.host).rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": "application/json", "User-Agent": "nodeagent-localcluster"}
        token = (cfg.api_key or {}).get("authorization")
        if token:
            self._headers["Authorization"] = str(token)
        self._http = urllib3.PoolManager(
            num_pools=4,
            maxsize=pool_size,
            cert_reqs="CERT_REQUIRED" if cfg.verify_ssl else "CERT_NONE",
            ca_certs=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            retries=False,
        )

    def _url(self, path: str, params: Mapping[str, Any] | None) -> str:
        query = f"?{urlencode(params)}" if params else ""
        return f"{self.server}{path}{query}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> JSON:
        """Send one request; return the decoded body or raise ApiError / Unreachable."""
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        what = f"{method} {path}"
        try:
            resp = self._http.request(
                method,
                self._url(path, params),
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(connect=3.0, read=timeout or self.timeout),
            )
        except urllib3.exceptions.HTTPError as exc:
            raise Unreachable(f"{what}: {exc}") from exc
        payload = _decode(resp.data)
        if resp.status >= 300:
            raise ApiError(resp.status, payload, what)
        return payload

    def get(self, path: str, **params: Any) -> JSON:
        return self.request("GET", path, params=params)

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def patch(self, path: str, body: JSON, content_type: str = MERGE_PATCH) -> JSON:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: JSON | None = None) -> JSON:
        return self.request("DELETE", path, body)

    def watch(self, path: str, params: Mapping[str, Any], timeout_s: int) -> Iterator[JSON]:
        """Yield watch events (dicts with type/object) until the server closes the stream."""
        query = {**params, "watch": "true", "allowWatchBookmarks": "true"}
        query["timeoutSeconds"] = timeout_s
        headers = {**self._headers, "Accept-Encoding": "identity"}
        try:
            resp = self._http.request(
                "GET",
                self._url(path, query),
                headers=headers,
                timeout=urllib3.Timeout(connect=3.0, read=timeout_s + 30),
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise Unreachable(f"watch {path}: {exc}") from exc
        try:
            if resp.status >= 300:
                raise ApiError(resp.status, _decode(resp.read()), f"watch {path}")
            yield from _lines(resp)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"watch {path}: {exc}") from exc
        finally:
            resp.release_conn()


def _lines(resp: urllib3.BaseHTTPResponse) -> Iterator[JSON]:
    buf = b""
    for chunk in resp.stream(65536):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buf.strip():
        yield json.loads(buf)


EventHandler = Callable[[str, JSON], None]


class Reflector:
    """List, then watch, one collection; relist on 410 Gone or any stream failure.

    `handler(type, obj)` gets ADDED / MODIFIED / DELETED for every change, the items of
    every (re)list as ADDED, and DELETED for objects that vanished while not watching.
    `on_synced()` runs after each successful list.
    """

    def __init__(
        self,
        kube: Kube,
        path: str,
        handler: EventHandler,
        *,
        params: Mapping[str, str] | None = None,
        on_synced: Callable[[], None] | None = None,
    ) -> None:
        self.kube = kube
        self.path = path
        self.params = dict(params or {})
        self.handler = handler
        self.on_synced = on_synced
        self.known: dict[str, JSON] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"reflector{path}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        backoff = 0.1
        while not self.stopped.is_set():
            try:
                rv = self._list()
                backoff = 0.1
                self._watch(rv)
            except KubeError as exc:
                log.info("%s: %s; relisting in %.1fs", self.path, exc, backoff)
                self.stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception:
                log.exception("%s: unexpected error", self.path)
                self.stopped.wait(1.0)

    def _list(self) -> str:
        body = self.kube.request("GET", self.path, params=self.params, timeout=60)
        items = {_uid(o): o for o in body.get("items") or []}
        for uid in set(self.known) - set(items):
            self._dispatch("DELETED", self.known[uid])
        for obj in items.values():
            self._dispatch("ADDED", obj)
        if self.on_synced is not None:
            self.on_synced()
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    def _watch(self, rv: str) -> None:
        while not self.stopped.is_set():
            params = {**self.params, "resourceVersion": rv}
            for event in self.kube.watch(self.path, params, random.randint(240, 360)):
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(int(obj.get("code") or 500), obj, f"watch {self.path}")
                rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                if kind != "BOOKMARK":
                    self._dispatch(kind, obj)

    def _dispatch(self, kind: str, obj: JSON) -> None:
        uid = _uid(obj)
        if kind == "DELETED":
            self.known.pop(uid, None)
        else:
            self.known[uid] = obj
        try:
            self.handler(kind, obj)
        except Exception:
            log.exception("%s: handler failed for %s %s", self.path, kind, uid)


def _uid(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name"))


def wait_for(check: Callable[[], bool], timeout: float, what: str, step: float = 0.1) -> None:
    """Call `check` until it returns True; raise TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(step)
