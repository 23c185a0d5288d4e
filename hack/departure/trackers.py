"""What the departure scene samples while a node leaves: kube-proxy's endpoints for the
Service, the stateful pod's move, and the departing Node's versions and the pods bound to it
(hack/departure/scene.py; read by witness.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hack.localcluster.reflector import Reflector
from hack.realnode import stateful
from hack.realnode.traffic import ClientError, ClientNet
from nodeagent.kube.client import ApiError, Kube, KubeError, api_stamp

from .objects import APP
from .witness import (
    Binding,
    Version,
    Witnessed,
    changes,
    duplicate_events,
    final_state,
    scheduled_onto,
)

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


# A watch ends this often so that stop() is heard; silent 30 s longer, it is dead.
WATCH_S = 5


class NodeWatch:
    """The departing Node's every version (its managedFields say who wrote each), and the
    pods first seen bound to it, from two watches started before the departure."""

    def __init__(self, kube: Kube, node: str) -> None:
        self.node = node
        self.versions: list[Version] = []
        self.bound: list[Binding] = []
        self.before: set[str] = set()  # the pods bound to it when the watch began
        self._uids: set[str] = set()
        self._started = False
        self._synced = threading.Event()  # the pods' first list heard
        self._lock = threading.Lock()
        self._stopped = False  # what the watches still deliver after stop() is not kept
        # The harness's reflector, not the agent's: the agent's drops managedFields.
        self._reflectors = [
            Reflector(kube, "/api/v1/nodes", self._node, watch_seconds=WATCH_S,
                      params={"fieldSelector": f"metadata.name={node}"}),
            Reflector(kube, "/api/v1/pods", self._pod, watch_seconds=WATCH_S,
                      params={"fieldSelector": f"spec.nodeName={node}"},
                      on_synced=self._synced.set),
        ]  # fmt: skip
        for r in self._reflectors:
            r.start()

    def _node(self, kind: str, obj: Any) -> None:
        with self._lock:
            if self._stopped:
                return
            self.versions.append((time.time(), None if kind == "DELETED" else obj))

    def _pod(self, kind: str, obj: Any) -> None:
        meta = obj["metadata"]
        with self._lock:
            if self._stopped or meta["uid"] in self._uids or kind == "DELETED":
                return
            self._uids.add(meta["uid"])
            if not self._started:
                self.before.add(meta["uid"])
            name = f"{meta['namespace']}/{meta['name']}"
            self.bound.append(Binding(time.time(), meta["uid"], name))

    def begin(self) -> None:
        """From now on a pod newly bound counts as one bound after the departure began
        (the first list's pods are the node's own)."""
        self._synced.wait(10)  # the first list answered: what was bound before is known
        with self._lock:
            self._started = True

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        for r in self._reflectors:
            r.stop(WATCH_S + 30)

    def figures(self, kube: Kube, started: float, until: float | None, keep: Path) -> Witnessed:
        """SceneResult's who-did-what (witness.py): the pods bound to the node after the
        departure began (until `until`, a rebooted node's return), every change of the
        Node with its writers, its last state, and the departure's duplicate Events. What
        they are read from is kept in `keep` (JSON), to be read again."""
        since = api_stamp(started)
        try:
            events = kube.get("/api/v1/events")["items"]
        except KubeError:
            events = []
        seen = {"started": started, "until": until, "versions": self.versions,
                "bound": [vars(b) for b in self.bound], "before": sorted(self.before),
                "events": events}  # fmt: skip
        keep.write_text(json.dumps(seen) + "\n")
        objects = {f"Node/{self.node}"} | {f"Pod/{b.name.split('/')[1]}" for b in self.bound}
        end = until if until is not None else float("inf")
        return Witnessed(
            scheduled_onto(self.bound, self.before, started, end),
            [c.row(started) for c in changes(self.versions)],
            final_state(self.versions),
            duplicate_events(events, since, objects),
        )
