"""A list+watch loop that never stops: relists on 410 Gone, backs off on errors.

It keeps an up-to-date copy of the watched objects keyed by UID, so callers decide
from what the API says now (never from memory of what they asked for), and wakes
waiters whenever anything changes. One Reflector serves any number of consumers: each
adds its change handler (and is handed what is already there), and any number of
threads wait on `changed`; so the daemon keeps one watch of its node's pods.

The copies are kept without ``metadata.managedFields``: no consumer reads them, and they
were a third of a pod's memory in the mirror (0.2 MB per 25 pods, every agent).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from nodeagent.kube.client import CONNECT_TIMEOUT, JSON, READ_TIMEOUT, Kube, Stream
from nodeagent.kube.errors import ApiError, KubeError, Silent
from nodeagent.types import Milestone, milestone

log = logging.getLogger(__name__)

# Each watch asks the server to end it after a random length in [WATCH_SECONDS,
# 2 * WATCH_SECONDS), as client-go's reflector does (minWatchTimeout 5 minutes times
# 1 + rand): a fleet's renewals spread out instead of arriving in step.
WATCH_SECONDS = 300
# How long a watch may go without a byte before it is presumed dead and started again,
# however long it was asked to last. The 1.35 watch cache sends every watcher that asked
# for bookmarks one "roughly every minute" and 2 s before its timeout
# (k8s.io/apiserver pkg/storage/cacher: cacher.go defaultBookmarkFrequency = time.Minute,
# cache_watcher.go nextBookmarkTime; bucketed per second, dispatched every 1-1.25 s).
# A bookmark carries the cache's latest resourceVersion and goes out only once that is
# newer than where the watch began (cache_watcher.go process), so its cadence holds while
# the resource changes anywhere in the cluster or etcd sends progress notifications (every
# 5 s as kubeadm runs etcd; 10 minutes at etcd's default). Where none come (the watch
# cache off, a quiet resource on a default etcd), a watch ends every SILENCE_SECONDS: no
# dearer than the 60 s watches it replaces. A stream that slept through an outage of the
# API server is cut sooner, when the first answer ends it (kube/client.py Reachability).
SILENCE_SECONDS = 90
# A watch loop without progress (a list, an event, a bookmark, a new watch, an error) for
# this long is stuck: the longest it waits between two is a connect tried twice, the
# answer's headers, then SILENCE_SECONDS for the first event.
STUCK_AFTER = 2 * CONNECT_TIMEOUT + READ_TIMEOUT + SILENCE_SECONDS + 10
BACKOFF_START = 0.2
BACKOFF_MAX = 10.0


@dataclass
class WatchStats:
    """Observable health of one watch loop."""

    restarts: int = 0
    last_success: float = 0.0  # wall clock of the last list or event (bookmarks too)
    last_error: str = ""
    # Monotonic time the loop last did anything: a list, an event, a new watch, an
    # error handled. Every call it makes is bounded, so a stale value means it is stuck.
    last_progress: float = field(default_factory=time.monotonic)

    def progressed_within(self, seconds: float) -> bool:
        return time.monotonic() - self.last_progress < seconds


Handler = Callable[[str, JSON], None]


@dataclass
class Reflector:
    """Mirror of the objects at `path` that match `field_selector`.

    Each change handler (`on_change`, and those added with `add_handler`) runs on the
    watch thread as `handler(kind, obj)` for every ADDED/MODIFIED/DELETED and for each
    object (re)listed ("SYNC"); it must be quick.
    """

    kube: Kube
    path: str
    field_selector: str = ""
    label_selector: str = ""
    resource: str = "pods"
    watch_seconds: int = WATCH_SECONDS  # the shortest a watch is asked to last
    silence: float = SILENCE_SECONDS
    on_change: Handler | None = None
    on_restart: Callable[[str], None] | None = None
    # Given: a 403 (or 401) ends the loop and is handed here instead of being retried
    # forever, for watches the agent can do without.
    on_forbidden: Callable[[ApiError], None] | None = None
    objects: dict[str, JSON] = field(default_factory=dict)
    stats: WatchStats = field(default_factory=WatchStats)
    changed: threading.Condition = field(default_factory=threading.Condition)
    synced: threading.Event = field(default_factory=threading.Event)
    # The current run's stop (set: no run); each run's thread has its own, so a run
    # stopped while blocked in a read can never write into the next one.
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _holders: int = 0
    _pinned: bool = False  # started with start(): runs until stop()
    _life: threading.Lock = field(default_factory=threading.Lock)
    _handlers: list[Handler] = field(default_factory=list)
    _stream: Stream | None = None  # the current watch's open stream, for renew()
    _cut_at: float | None = None  # monotonic: the last stream cut (renew, an outage's end)
    # Held while handlers run: one added meanwhile misses no change and sees none twice
    # out of order.
    _dispatch: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self._stop.set()  # not running until started
        if self.on_change is not None:
            self._handlers.append(self.on_change)

    def start(self) -> Reflector:
        """Run until stop() (a no-op for the run already going)."""
        with self._life:
            self._pinned = True
            self._begin()
        return self

    def stop(self) -> None:
        with self._life:
            self._pinned = False
            self._stop.set()
        with self.changed:
            self.changed.notify_all()

    @contextmanager
    def hold(self) -> Iterator[Reflector]:
        """Keep the watch running while in use: the first holder starts it (unless it
        runs already), the last one stops it (unless start() pinned it). A watch shared
        by consumers that each need it for a while costs nothing while none does."""
        with self._life:
            self._holders += 1
            self._begin()
        try:
            yield self
        finally:
            with self._life:
                self._holders -= 1
                last = self._holders == 0 and not self._pinned
                if last:
                    self._stop.set()
            if last:
                with self.changed:
                    self.changed.notify_all()

    @property
    def stopped(self) -> bool:
        """No run is going (never started, or stopped)."""
        return self._stop.is_set()

    def _begin(self) -> None:
        if not self._stop.is_set():
            return
        self._stop = stop = threading.Event()
        self.synced.clear()  # a new run lists afresh before it counts as synced
        self._cut_at = None  # and its first watch is no reconnect
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name=f"watch-{self.resource}", daemon=True
        )
        self._thread.start()

    def add_handler(self, handler: Handler) -> Callable[[], None]:
        """Call `handler` for every change from now on, after a "SYNC" for each object
        already mirrored; returns the function that removes it again."""
        with self._dispatch:
            for obj in self.snapshot():
                self._call(handler, "SYNC", obj)
            self._handlers.append(handler)

        def remove() -> None:
            with self._dispatch:
                if handler in self._handlers:
                    self._handlers.remove(handler)

        return remove

    def renew(self, why: str) -> bool:
        """End the current watch's stream now, however quiet it was asked to be allowed
        to be: the loop starts a new watch at once, from where this one was (no list).
        For a consumer that cannot wait out a dead connection's silence (a drain waiting
        for its pods); False when no stream is open."""
        stream = self._stream
        return stream is not None and self.kube.reach.cut(stream, why)

    @property
    def streaming(self) -> bool:
        """A watch's stream is open (its request answered)."""
        return self._stream is not None

    def quiet_for(self) -> float:
        """Seconds since the loop last heard anything (a list, an event, a bookmark) or
        started a watch."""
        return time.monotonic() - self.stats.last_progress

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
                if remaining <= 0 or self.stopped:
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

    def _run(self, stop: threading.Event) -> None:
        backoff = BACKOFF_START
        resource_version = ""
        while not stop.is_set():
            try:
                if not resource_version:
                    resource_version = self._relist(stop)
                resource_version = self._watch(resource_version, stop)
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
                backoff = self._backoff(str(exc), backoff, stop)
            except Silent as exc:
                # A dead connection, or a server that sends no bookmarks (then this is
                # every SILENCE_SECONDS, and no news), or a stream cut early (renew(), or
                # the API server answering again after an outage the stream slept through,
                # kube/client.py Reachability): a new watch at once either way.
                log.info("watch %s: %s; starting it again", self.resource, exc)
                self._restarted(str(exc))
            except (KubeError, ValueError) as exc:
                backoff = self._backoff(str(exc), backoff, stop)

    def _restarted(self, why: str) -> None:
        self.stats.last_progress = time.monotonic()
        self.stats.restarts += 1
        self.stats.last_error = why
        if self.on_restart:
            self.on_restart(why)

    def _backoff(self, why: str, current: float, stop: threading.Event) -> float:
        self._restarted(why)
        log.warning("watch %s: %s; retrying in %.1fs", self.resource, why, current)
        stop.wait(current * random.uniform(0.8, 1.2))
        return min(current * 2, BACKOFF_MAX)

    def _relist(self, stop: threading.Event) -> str:
        data = self.kube.request("GET", self.path, query=self._selectors() or None)
        fresh = {o["metadata"]["uid"]: trimmed(o) for o in data.get("items") or []}
        with self.changed:
            if stop.is_set():
                return ""  # this run is over: the next one (if any) owns the mirror
            self.objects = fresh
            self.changed.notify_all()
        self.stats.last_success = time.time()
        self.stats.last_progress = time.monotonic()
        with self._dispatch:
            for obj in fresh.values():
                self._notify("SYNC", obj)
        with self.changed:
            # Under the lock, with a wake-up: a waiter that saw the objects but not yet
            # the sync would otherwise sleep until the next change, or its deadline.
            self.synced.set()
            self.changed.notify_all()
        return str(data["metadata"]["resourceVersion"])

    def _watch(self, resource_version: str, stop: threading.Event) -> str:
        query = dict(
            self._selectors(), resourceVersion=resource_version, allowWatchBookmarks="true"
        )
        self.stats.last_progress = time.monotonic()
        if stop.is_set():
            return resource_version
        length = int(self.watch_seconds * (1 + random.random()))
        try:
            for event in self.kube.watch(self.path, query, length, self.silence, self._opened):
                if stop.is_set():
                    break
                resource_version = self._apply(event, resource_version, stop)
        finally:
            stream, self._stream = self._stream, None
            if stream is not None and stream.cut_why and not stop.is_set():
                self._cut_at = time.monotonic()  # this run watches again at once
        return resource_version

    def _opened(self, stream: Stream) -> None:
        self._stream = stream
        cut, self._cut_at = self._cut_at, None
        if cut is not None:
            # A watch cut on purpose is open again: the moment its consumer sees changes
            # from, as data (a drain's pods after an outage; the harness times it).
            took = time.monotonic() - cut
            milestone(
                log,
                Milestone.WATCH_RESTARTED,
                "watch %s: open again %.2fs after it was cut",
                self.resource,
                took,
                resource=self.resource,
                seconds=f"{took:.3f}",
            )

    def _apply(self, event: JSON, resource_version: str, stop: threading.Event) -> str:
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
            obj = trimmed(obj)
            with self.changed:
                if stop.is_set():
                    return resource_version
                if kind == "DELETED":
                    self.objects.pop(meta["uid"], None)
                else:
                    self.objects[meta["uid"]] = obj
                self.changed.notify_all()
            with self._dispatch:
                self._notify(str(kind), obj)
        return str(meta.get("resourceVersion") or resource_version)

    def _notify(self, kind: str, obj: JSON) -> None:
        for handler in list(self._handlers):
            self._call(handler, kind, obj)

    def _call(self, handler: Handler, kind: str, obj: JSON) -> None:
        try:
            handler(kind, obj)
        except Exception:  # one consumer's bug must not end the watch for the others
            log.exception("watch %s: a change handler failed on %s", self.resource, kind)


def trimmed(obj: JSON) -> JSON:
    """`obj` without its managedFields (the server-side apply bookkeeping)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def node_pods(
    kube: Kube,
    node_name: str,
    *,
    watch_seconds: int = WATCH_SECONDS,
    on_restart: Callable[[str], None] | None = None,
) -> Reflector:
    """A watch of the pods bound to `node_name` (not started): the daemon keeps one and
    hands it to the drain, the rejection controller and the after-boot steps."""
    return Reflector(
        kube,
        "/api/v1/pods",
        field_selector=f"spec.nodeName={node_name}",
        resource="pods",
        watch_seconds=watch_seconds,
        on_restart=on_restart,
    )
