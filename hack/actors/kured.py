"""kured's writes around one reboot (kubereboot/kured, tag 1.23.0):

cmd/kured/main.go rebootAsRequired, once the sentinel says a reboot is required:
1. --annotate-nodes: weave.works/kured-reboot-in-progress and
   weave.works/kured-most-recent-reboot-needed (RFC 3339 now) by strategic merge patch of
   the whole Node read before (addNodeAnnotations);
2. the lock: annotation weave.works/kured-node-lock on its own DaemonSet (default
   kube-system/kured), {"nodeID", "metadata": {"unschedulable"}, "created", "TTL"}, written
   by DaemonSets().Update, retried on 409 (pkg/daemonsetlock/daemonsetlock.go Acquire);
   `unschedulable` is the Node's before kured cordons: its record of "was it mine?";
3. drain: --pre-reboot-node-labels (strategic merge patch), then kubectl's drain.Helper
   with Force, DeleteEmptyDirData, IgnoreAllDaemonSets, GracePeriodSeconds
   --drain-grace-period (-1), Timeout --drain-timeout (0: none), and no
   EvictErrorRetryDelay (0: a 429 is asked again at once): RunCordonOrUncordon, then
   RunNodeDrain (main.go drain);
4. a failed drain without --force-reboot: release the lock, then uncordon "best effort"
   with the Node object read before the drain, whose unschedulable the cordon set: the
   uncordon is sent whoever had cordoned;
5. the reboot (`systemctl reboot` via nsenter, or SIGRTMIN+5): here the caller's hook;
6. after the boot, on the first tick while holding the lock: uncordon if the lock says
   the node was schedulable, --post-reboot-node-labels, the reboot-in-progress annotation
   removed by JSON patch, the lock released (Update without the annotation).
kured records no Kubernetes Events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hack.actors import api
from hack.actors.kubectl import DrainError, DrainHelper
from nodeagent.kube.client import JSON, ApiError, Kube, node_path

LOCK_ANNOTATION = "weave.works/kured-node-lock"  # main.go KuredNodeLockAnnotation
REBOOT_IN_PROGRESS = "weave.works/kured-reboot-in-progress"
MOST_RECENT_REBOOT_NEEDED = "weave.works/kured-most-recent-reboot-needed"


@dataclass(frozen=True)
class Lock:
    """daemonsetlock.go LockAnnotationValue (single-lock form, --concurrency 1)."""

    node_id: str
    unschedulable: bool
    created: datetime
    ttl_ns: int = 0  # time.Duration marshals as nanoseconds

    def encode(self) -> str:
        created = self.created.astimezone(UTC).isoformat().replace("+00:00", "Z")
        value = {
            "nodeID": self.node_id,
            "metadata": {"unschedulable": self.unschedulable},
            "created": created,
            "TTL": self.ttl_ns,
        }
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Lock:
        value = json.loads(text)
        created = datetime.fromisoformat(str(value["created"]).replace("Z", "+00:00"))
        meta = value.get("metadata") or {}
        return cls(
            str(value["nodeID"]),
            bool(meta.get("unschedulable")),
            created,
            int(value.get("TTL") or 0),
        )

    def expired(self, now: datetime) -> bool:
        """daemonsetlock.go ttlExpired: TTL 0 never expires."""
        return self.ttl_ns > 0 and (now - self.created).total_seconds() * 1e9 >= self.ttl_ns


def lock_holder(
    ds: JSON, annotation: str = LOCK_ANNOTATION, now: datetime | None = None
) -> Lock | None:
    """The unexpired lock on kured's DaemonSet, if any (what another tool can read)."""
    text = api.annotations_of(ds).get(annotation)
    if text is None:
        return None
    lock = Lock.decode(text)
    return None if lock.expired(now or datetime.now(UTC)) else lock


@dataclass
class Kured:
    kube: Kube
    node: str
    ds_namespace: str = "kube-system"
    ds_name: str = "kured"
    lock_annotation: str = LOCK_ANNOTATION
    lock_ttl_ns: int = 0
    drain_grace_period: int = -1
    drain_timeout: float = 0.0
    skip_wait_for_delete_timeout: int = 0
    force_reboot: bool = False
    annotate_nodes: bool = False
    pre_reboot_labels: dict[str, str] = field(default_factory=dict)
    post_reboot_labels: dict[str, str] = field(default_factory=dict)
    bound: float = 120.0  # the harness's limit on a drain kured would let run forever
    drainer: DrainHelper | None = None  # the last drain's helper (evictions, attempts)

    @property
    def ds_path(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ds_namespace}/daemonsets/{self.ds_name}"

    def holding(self) -> Lock | None:
        """daemonsetlock.go Holding: the lock, if this node holds it."""
        lock = lock_holder(self.kube.get(self.ds_path), self.lock_annotation)
        return lock if lock is not None and lock.node_id == self.node else None

    def acquire(self, unschedulable: bool) -> bool:
        """daemonsetlock.go DaemonSetSingleLock.Acquire: a DaemonSets().Update adding the
        annotation, retried after 1s on 409; False when another node holds it."""
        while True:
            ds = self.kube.get(self.ds_path)
            held = lock_holder(ds, self.lock_annotation)
            if held is not None:
                return held.node_id == self.node
            lock = Lock(self.node, unschedulable, datetime.now(UTC), self.lock_ttl_ns)
            ds["metadata"].setdefault("annotations", {})[self.lock_annotation] = lock.encode()
            if self._update_ds(ds):
                return True

    def release(self) -> None:
        """daemonsetlock.go Release: an Update without the annotation (only by its holder)."""
        while True:
            ds = self.kube.get(self.ds_path)
            text = api.annotations_of(ds).get(self.lock_annotation)
            if text is None:
                raise RuntimeError("lock not held")
            if Lock.decode(text).node_id != self.node:
                raise RuntimeError(f"not lock holder: {Lock.decode(text).node_id}")
            del ds["metadata"]["annotations"][self.lock_annotation]
            if self._update_ds(ds):
                return

    def _update_ds(self, ds: JSON) -> bool:
        try:
            self.kube.request("PUT", self.ds_path, body=ds)
        except ApiError as exc:
            if exc.status == 409:
                time.sleep(1.0)
                return False
            raise
        return True

    def helper(self) -> DrainHelper:
        """main.go drain's drain.Helper literal (no EvictErrorRetryDelay, no ChunkSize)."""
        return DrainHelper(
            self.kube,
            grace_period_seconds=self.drain_grace_period,
            force=True,
            delete_emptydir_data=True,
            ignore_all_daemonsets=True,
            timeout=self.drain_timeout,
            skip_wait_for_delete_timeout=self.skip_wait_for_delete_timeout,
            bound=self.bound,
        )

    def label(self, labels: dict[str, str]) -> None:
        """main.go updateNodeLabels: a strategic merge patch of metadata.labels."""
        if labels:
            self.kube.strategic_patch(node_path(self.node), {"metadata": {"labels": labels}})

    def annotate(self, attempts: int = 5) -> None:
        """main.go addNodeAnnotations: the Node read, annotated and sent whole as a strategic
        merge patch; its resourceVersion makes a Node changed in between a 409, after which
        kured tries again on its next tick (here at once)."""
        for attempt in range(attempts):
            node = api.get_node(self.kube, self.node)
            if REBOOT_IN_PROGRESS in api.annotations_of(node):
                return
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            stamps = {REBOOT_IN_PROGRESS: now, MOST_RECENT_REBOOT_NEEDED: now}
            node["metadata"].setdefault("annotations", {}).update(stamps)
            try:
                self.kube.strategic_patch(node_path(self.node), node)
                return
            except ApiError as exc:
                if exc.status != 409 or attempt == attempts - 1:
                    raise

    def drain(self, node: JSON) -> None:
        """main.go drain: pre-reboot labels, cordon, RunNodeDrain (raises DrainError)."""
        self.label(self.pre_reboot_labels)
        self.drainer = self.helper()
        self.drainer.cordon_or_uncordon(node, True)
        self.drainer.run_node_drain(self.node)

    def uncordon(self, node: JSON) -> None:
        """main.go uncordon: RunCordonOrUncordon(false) on the object handed in, then the
        post-reboot labels."""
        DrainHelper(self.kube).cordon_or_uncordon(node, False)
        self.label(self.post_reboot_labels)

    def reboot_if_required(self, reboot: Callable[[], None]) -> bool:
        """One tick of rebootAsRequired's second loop with a reboot required and no
        blocker. Returns True when it called `reboot`, False when the lock was taken by
        another node or the drain failed (and kured undid its cordon)."""
        node = api.get_node(self.kube, self.node)
        unschedulable = bool(node["spec"].get("unschedulable"))  # NodeMeta, before cordoning
        if self.annotate_nodes:
            self.annotate()
        if self.holding() is None and not self.acquire(unschedulable):
            return False
        try:
            self.drain(node)
        except DrainError:
            if not self.force_reboot:
                self.release()
                self.uncordon(node)  # "best-effort uncordon after failed cordon and drain"
                return False
        reboot()
        return True

    def after_boot(self) -> bool:
        """rebootAsRequired's first loop, after the boot: while holding the lock, uncordon
        if the lock says the node was schedulable, remove the reboot-in-progress
        annotation (JSON patch), release. Returns whether it held the lock."""
        lock = self.holding()
        if lock is None:
            return False
        node = api.get_node(self.kube, self.node)
        if not lock.unschedulable:
            self.uncordon(node)
        if self.annotate_nodes and REBOOT_IN_PROGRESS in api.annotations_of(node):
            op = {
                "op": "remove",
                "path": f"/metadata/annotations/{api.pointer(REBOOT_IN_PROGRESS)}",
            }
            api.json_patch(self.kube, node_path(self.node), [op])
        self.release()
        return True
