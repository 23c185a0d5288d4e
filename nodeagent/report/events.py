"""Kubernetes Events on the Node and its pods.

Events are best effort: a few background threads send them so a slow or failing
events endpoint never holds up a drain, and `flush` bounds how long the caller waits
for them at the end. While the API server is down the backlog is bounded: past
`max_pending` unsent events the oldest is dropped (and counted), so the agent's
memory does not grow with the length of an outage.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import deque
from dataclasses import dataclass, field

from nodeagent import metrics
from nodeagent.kube.client import JSON, Kube, KubeError, api_stamp

log = logging.getLogger(__name__)

COMPONENT = "nodeagent"
NORMAL = "Normal"
WARNING = "Warning"
MAX_PENDING = 256  # a full node's drain: a few per namespace, and each pod's own trouble
WORKERS = 4
MESSAGE_LIMIT = 1024  # characters of a message sent; longer ones are cut


@dataclass
class EventRecorder:
    """Posts core/v1 Events with source component `nodeagent`."""

    kube: Kube
    node_name: str
    enabled: bool = True
    max_pending: int = MAX_PENDING
    workers: int = WORKERS
    _queue: deque[tuple[str, JSON]] = field(default_factory=deque)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _threads: int = 0  # started on demand, like a thread pool's, and kept
    _idle: int = 0
    _busy: int = 0

    def node(self, node: JSON, reason: str, message: str, kind: str = NORMAL) -> None:
        meta = node["metadata"]
        ref = {"kind": "Node", "apiVersion": "v1", "name": meta["name"], "uid": meta["name"]}
        self._emit("default", ref, reason, message, kind)

    def pod(self, pod: JSON, reason: str, message: str, kind: str = NORMAL) -> None:
        meta = pod["metadata"]
        ref = {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        self._emit(meta["namespace"], ref, reason, message, kind)

    @property
    def pending(self) -> int:
        """Events queued, not yet being sent."""
        with self._changed:
            return len(self._queue)

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait up to `timeout` for every queued event to be sent (or to fail); whether
        none is left."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._busy, timeout)

    def _emit(self, namespace: str, ref: JSON, reason: str, message: str, kind: str) -> None:
        if not self.enabled:
            return
        now = api_stamp()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref['name']}.{os.urandom(8).hex()}",
                "namespace": namespace,
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message[:MESSAGE_LIMIT],
            "type": kind,
            "source": {"component": COMPONENT, "host": self.node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node_name or socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._enqueue(namespace, event)

    def _enqueue(self, namespace: str, event: JSON) -> None:
        with self._changed:
            if len(self._queue) >= self.max_pending:
                dropped = self._queue.popleft()[1]
                metrics.EVENTS_DROPPED.inc()
                log.debug("event %s dropped: too many unsent", dropped["reason"])
            self._queue.append((namespace, event))
            start = self._idle == 0 and self._threads < self.workers
            if start:
                self._threads += 1
            self._changed.notify()
        if start:
            threading.Thread(target=self._work, name="events", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._changed:
                self._idle += 1
                self._changed.wait_for(lambda: bool(self._queue))
                self._idle -= 1
                self._busy += 1
                namespace, event = self._queue.popleft()
            try:
                self._post(namespace, event)
            finally:
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()

    def _post(self, namespace: str, event: JSON) -> None:
        try:
            self.kube.post(f"/api/v1/namespaces/{namespace}/events", event)
        except KubeError as exc:
            log.debug("event %s not recorded: %s", event["reason"], exc)
        except Exception:  # a sender must never die: the queue would stall
            log.exception("event %s not recorded", event["reason"])
