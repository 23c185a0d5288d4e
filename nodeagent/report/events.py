"""Kubernetes Events on the Node and its pods.

Events are best effort: they are sent from a small background pool so a slow or
failing events endpoint never holds up a drain, and `flush` bounds how long the
caller waits for them at the end.
"""

from __future__ import annotations

import logging
import socket
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from nodeagent.kube.client import JSON, Kube, KubeError, api_stamp

log = logging.getLogger(__name__)

COMPONENT = "nodeagent"
NORMAL = "Normal"
WARNING = "Warning"


@dataclass
class EventRecorder:
    """Posts core/v1 Events with source component `nodeagent`."""

    kube: Kube
    node_name: str
    enabled: bool = True
    _pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="events")
    )
    _pending: list[Future[None]] = field(default_factory=list)

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

    def flush(self, timeout: float = 2.0) -> None:
        wait(self._pending, timeout=timeout)
        self._pending = [f for f in self._pending if not f.done()]

    def _emit(self, namespace: str, ref: JSON, reason: str, message: str, kind: str) -> None:
        if not self.enabled:
            return
        now = api_stamp()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT, "host": self.node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node_name or socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._pending.append(self._pool.submit(self._post, namespace, event))

    def _post(self, namespace: str, event: JSON) -> None:
        try:
            self.kube.post(f"/api/v1/namespaces/{namespace}/events", event)
        except KubeError as exc:
            log.debug("event %s not recorded: %s", event["reason"], exc)
