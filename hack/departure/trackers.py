"""What the departure scene samples while a node leaves: kube-proxy's endpoints for the
Service, and the stateful pod's move (hack/departure/scene.py)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from hack.realnode import stateful
from hack.realnode.traffic import ClientError, ClientNet
from nodeagent.kube.client import ApiError

from .objects import APP

if TYPE_CHECKING:
    from .scene import Scene


class StatefulTracker:
    """When the stateful pod's old incarnation left the API and its replacement was
    Ready (sampled every 0.2 s), and the Multi-Attach errors the move caused."""

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        pod = scene.stateful_pod()
        self.old = pod["metadata"]["uid"] if pod else ""
        self.deleted: float | None = None
        self.ready: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.scene.ns}/pods/db-0"
        while not self._stop.wait(0.2) and self.ready is None:
            try:
                uid = self.scene.cluster.kube.get(path)["metadata"]["uid"]
            except ApiError as exc:
                uid = "" if exc.status == 404 else self.old
            now = time.time()
            if self.deleted is None and uid != self.old:
                self.deleted = now
            pod = self.scene.stateful_pod() if self.deleted is not None else None
            if pod is not None and pod["metadata"]["uid"] != self.old:
                self.ready = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def figures(self) -> tuple[float | None, float | None, int]:
        events = self.scene.cluster.kube.get(f"/api/v1/namespaces/{self.scene.ns}/events")
        return self.deleted, self.ready, len(stateful.multi_attach(events["items"]))


class EndpointTracker:
    """What kube-proxy programs for the Service, sampled each second, kept as changes."""

    def __init__(self, client: ClientNet, ns: str) -> None:
        self.client, self.ns = client, ns
        self.changes: list[tuple[float, list[str]]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = self.client.service_endpoints(self.ns, APP)
            except ClientError:
                return  # the client is gone: nothing more to see

            with self._lock:
                if not self.changes or self.changes[-1][1] != now:
                    self.changes.append((time.time(), now))
            self._stop.wait(1.0)

    def current(self) -> list[str]:
        with self._lock:
            return self.changes[-1][1] if self.changes else []

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
