"""A list+watch loop that never stops: relists on 410 Gone, backs off on errors.

It keeps an up-to-date copy of the watched objects keyed by UID, so callers decide
from what the API says now (never from memory of what they asked for), and wakes
waiters whenever anything changes.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent.kube.client import JSON, ApiError, Kube, KubeError

log = logging.getLogger(__name__)

WATCH_SECONDS = 300
BACKOFF_START = 0.2
BACKOFF_MAX = 10.0


@dataclass
class WatchStats:
    """Observable health of one watch loop."""

    restarts: int = 0
    last_success: float = 0.0  # wall clock of the last list or event received
    last_error: str = ""
    # Monotonic time the loop last did anything: a list, an event, a new watch, an
    # error handled. Every call it makes is bounded, so a stale value means it is stuck.
    last_progress: float = field(default_factory=time.monotonic)

    def progressed_within(self, seconds: float) -> bool:
        return time.monotonic() - self.last_progress < seconds


@dataclass
class Reflector:
    """Mirror of the objects at `path` that match `field_selector`.

    `on_change(kind, obj)` runs on the watch thread for every ADDED/MODIFIED/DELETED
    and for each object (re)listed ("SYNC"); it must be quick.
    """

    kube: Kube
    path: str
    field_selector: str = ""
    label_selector: str = ""
    resource: str = "pods"
    watch_seconds: int = WATCH_SECONDS
    on_change: Callable[[str, JSON], None] | None = None
    on_restart: Callable[[str], None] | None = None
    # Given: a 403 (or 401) ends the loop and is handed here instead of being retried
    # forever, for watches the agent can do without.
    on_forbidden: Callable[[ApiError], None] | None = None
    objects: dict[str, JSON] = field(default_factory=dict)
    stats: WatchStats = field(default_factory=WatchStats)
    changed: threading.Condition = field(default_factory=threading.Condition)
    synced: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Reflector:
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{self.resource}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self.changed:
            self.changed.notify_all()

    def wait_synced(self, timeout: float) -> bool:
        return self.synced.wait(timeout)

    def snapshot(self) -> list[JSON]:
        with self.changed:
            return list(self.objects.values())

    def wait_for(self, predicate: Callable[[], bool], deadline: float) -> bool:
        """Block until predicate() is true (checked on every change) or the deadline."""
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    return predicate()
                self.changed.wait(remaining)
            return True

    def _selectors(self) -> dict[str, str]:
        query = {}
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        return query

    def _run(self) -> None:
        backoff = BACKOFF_START
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    resource_version = self._relist()
                resource_version = self._watch(resource_version)
                backoff = BACKOFF_START
            except ApiError as exc:
                if exc.status == 410:
                    resource_version = ""  # history compacted: start over from a fresh list
                    log.info("watch %s: 410 Gone (%s); relisting", self.resource, exc.message)
                    self._restarted("410 Gone: relisting")
                    continue
                if exc.status in (401, 403) and self.on_forbidden is not None:
                    self.stop()
                    self.on_forbidden(exc)
                    return
                backoff = self._backoff(str(exc), backoff)
            except (KubeError, ValueError) as exc:
                backoff = self._backoff(str(exc), backoff)

    def _restarted(self, why: str) -> None:
        self.stats.last_progress = time.monotonic()
        self.stats.restarts += 1
        self.stats.last_error = why
        if self.on_restart:
            self.on_restart(why)

    def _backoff(self, why: str, current: float) -> float:
        self._restarted(why)
        log.warning("watch %s: %s; retrying in %.1fs", self.resource, why, current)
        self._stop.wait(current * random.uniform(0.8, 1.2))
        return min(current * 2, BACKOFF_MAX)

    def _relist(self) -> str:
        data = self.kube.request("GET", self.path, query=self._selectors() or None)
        fresh = {o["metadata"]["uid"]: o for o in data.get("items") or []}
        with self.changed:
            self.objects = fresh
            self.changed.notify_all()
        self.stats.last_success = time.time()
        self.stats.last_progress = time.monotonic()
        if self.on_change:
            for obj in fresh.values():
                self.on_change("SYNC", obj)
        self.synced.set()
        return str(data["metadata"]["resourceVersion"])

    def _watch(self, resource_version: str) -> str:
        query = dict(
            self._selectors(), resourceVersion=resource_version, allowWatchBookmarks="true"
        )
        self.stats.last_progress = time.monotonic()
        for event in self.kube.watch(self.path, query, self.watch_seconds):
            if self._stop.is_set():
                break
            resource_version = self._apply(event, resource_version)
        return resource_version

    def _apply(self, event: JSON, resource_version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise ApiError(
                int(obj.get("code") or 500),
                str(obj.get("reason") or ""),
                str(obj.get("message") or "watch error"),
                obj,
            )
        self.stats.last_success = time.time()
        self.stats.last_progress = time.monotonic()
        meta = obj.get("metadata") or {}
        if kind != "BOOKMARK":
            with self.changed:
                if kind == "DELETED":
                    self.objects.pop(meta["uid"], None)
                else:
                    self.objects[meta["uid"]] = obj
                self.changed.notify_all()
            if self.on_change:
                self.on_change(str(kind), obj)
        return str(meta.get("resourceVersion") or resource_version)
