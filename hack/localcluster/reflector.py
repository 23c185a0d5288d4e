"""The kubelet simulator's list and watch of one collection, over the product's client
(nodeagent.kube.client): relists on 410 Gone or any stream failure, and hands every change
to a handler as an event.

Why not the agent's own Reflector (nodeagent.kube.watch)? The agent decides from a mirror
of what the API says now; the simulator acts on events, as a kubelet does: it must be told
ADDED for every object a relist brings (its first list, or one after an outage) and
DELETED for every object that vanished while it was not watching (a pod deleted during an
API server restart has containers to stop). The agent's mirror hands a relist's objects
over as SYNC and drops the vanished ones silently.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from nodeagent.kube.client import ApiError, Kube, KubeError

JSON = dict[str, Any]
log = logging.getLogger(__name__)
LIST_TIMEOUT = 60.0


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
        watch_seconds: int | None = None,
    ) -> None:
        self.kube = kube
        # How long each watch is asked to last (None: 4 to 6 minutes, as client-go's
        # reflector spreads them); a short one lets stop() end the thread promptly.
        self.watch_seconds = watch_seconds
        self.path = path
        self.params = dict(params or {})
        self.handler = handler
        self.on_synced = on_synced
        self.known: dict[str, JSON] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"reflector{path}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float) -> None:
        """Stop after the current watch ends; wait `timeout` at most for it."""
        self.stopped.set()
        self.thread.join(timeout)

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
        body = self.kube.request("GET", self.path, query=self.params or None, timeout=LIST_TIMEOUT)
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
            query = {**self.params, "resourceVersion": rv, "allowWatchBookmarks": "true"}
            length = self.watch_seconds or random.randint(240, 360)
            # Silent for longer than the watch was asked to last: a dead connection.
            for event in self.kube.watch(self.path, query, length, silence=length + 30):
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    reason, message = str(obj.get("reason") or ""), str(obj.get("message") or "")
                    raise ApiError(int(obj.get("code") or 500), reason, message, obj)
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
