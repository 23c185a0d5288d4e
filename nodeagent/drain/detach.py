"""Storage-safe departure: after the drain, wait (bounded) until the drained pods' volumes
are unmounted and detached from this node, so a replacement elsewhere can attach them.

Read from the Node alone: ``status.volumesInUse`` (the kubelet: mounted) and
``status.volumesAttached`` (the attach/detach controller: attached) come with the Node watch
the agent already holds and need no permission beyond it; the kubelet identity can read
them too. VolumeAttachments would need a cluster-wide list/watch.

The Node names volumes (``kubernetes.io/csi/<driver>^<handle>``), not the claims that pods
reference, and mapping one to the other needs the claims and volumes (more permissions).
So the wait counts instead: the pods the drain keeps (DaemonSet, mirror, do-not-disrupt past
its ceiling) hold at most ``kept`` distinct attachable volumes, which stay mounted while
they run. The drained pods' volumes are gone once no more than ``kept`` volumes are attached
or in use and every one of those is still mounted. With no kept attachable volume (the usual
case) that is exact: nothing attached, nothing in use. A kept claim bound to a volume that is
not attachable (NFS, hostPath) is counted but never listed, so the wait may end early by one
such volume: the price of reading the Node alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nodeagent.context import Context
from nodeagent.kube.client import JSON, ApiError, Kube, KubeError
from nodeagent.kube.watch import Reflector

log = logging.getLogger(__name__)

# Pod volume sources whose volume the attach/detach controller attaches to a node: claims
# (and generic ephemeral volumes, which are claims) and the in-tree block devices.
ATTACHABLE_SOURCES = (
    "persistentVolumeClaim",
    "ephemeral",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "azureDisk",
    "cinder",
    "rbd",
    "iscsi",
    "fc",
    "vsphereVolume",
    "portworxVolume",
)
# A finished pod's volumes are unmounted by the kubelet whether or not its object stays.
FINISHED = ("Succeeded", "Failed")


class NodeSource(Protocol):
    """The agent's own Node as watched (nodeagent.kube.watch.Reflector is one)."""

    def snapshot(self) -> list[JSON]: ...

    def wait_for(self, predicate: Callable[[], bool], deadline: float) -> bool: ...


def pod_volume_keys(pod: JSON) -> set[str]:
    """One key per attachable volume the pod references (a claim: namespace/name)."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    keys: set[str] = set()
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        source = next((s for s in ATTACHABLE_SOURCES if s in vol), None)
        if source == "persistentVolumeClaim":
            keys.add(f"claim:{namespace}/{vol[source].get('claimName', '')}")
        elif source == "ephemeral":
            # Kubernetes names a generic ephemeral volume's claim <pod>-<volume>.
            keys.add(f"claim:{namespace}/{meta.get('name', '')}-{vol.get('name', '')}")
        elif source is not None:
            keys.add(f"{source}:{json.dumps(vol[source], sort_keys=True)}")
    return keys


def volume_keys(pods: Iterable[JSON]) -> set[str]:
    keys: set[str] = set()
    for pod in pods:
        keys |= pod_volume_keys(pod)
    return keys


@dataclass(frozen=True)
class DetachPlan:
    """What the wait is for: the drained pods had `drained` attachable volumes, the pods
    the drain keeps hold `kept` (counted by claim, so pods sharing one count it once)."""

    drained: int
    kept: int

    @classmethod
    def of(cls, drained_pods: Iterable[JSON], kept_pods: Iterable[JSON]) -> DetachPlan:
        kept = volume_keys(kept_pods)
        return cls(len(volume_keys(drained_pods) - kept), len(kept))

    @classmethod
    def after_drain(
        cls, before: Iterable[JSON], after: Iterable[JSON], drained_uids: set[str]
    ) -> DetachPlan:
        """From the node's pods before the drain, those on it after, and the UIDs of the
        pods the drain evicted or deleted: whatever else still runs on the node keeps its
        volumes (skipped, do-not-disrupt past its ceiling, stuck). A drained pod's object
        may stay a while, finished: it keeps nothing mounted."""
        drained = [p for p in before if p["metadata"].get("uid") in drained_uids]
        kept = [
            p
            for p in after
            if p["metadata"].get("uid") not in drained_uids
            and (p.get("status") or {}).get("phase") not in FINISHED
        ]
        return cls.of(drained, kept)

    @property
    def needed(self) -> bool:
        return self.drained > 0


@dataclass(frozen=True)
class VolumeState:
    """The Node's word on its volumes."""

    attached: frozenset[str]
    in_use: frozenset[str]

    @classmethod
    def of(cls, node: JSON | None) -> VolumeState:
        status = (node or {}).get("status") or {}
        attached = {str(v.get("name")) for v in status.get("volumesAttached") or []}
        in_use = {str(v) for v in status.get("volumesInUse") or []}
        return cls(frozenset(attached), frozenset(in_use))


def still_attached(state: VolumeState, plan: DetachPlan) -> list[str]:
    """The volumes the departure still waits for; empty when it may go on.

    Every volume not mounted any more yet still attached is a drained pod's (kept pods keep
    theirs mounted). Mounted volumes beyond the kept pods' count are drained pods' too,
    though which ones the Node cannot say: all mounted ones are named then.
    """
    if not plan.needed:
        return []
    present = state.attached | state.in_use
    unmounted = present - state.in_use
    if len(present) <= plan.kept and not unmounted:
        return []
    if plan.kept == 0:
        return sorted(present)
    if unmounted and len(present - unmounted) <= plan.kept:
        return sorted(unmounted)
    return sorted(present)


@dataclass(frozen=True)
class DetachResult:
    """How the wait went: `left` is empty unless it ran out of time."""

    waited: float
    volumes: tuple[str, ...] = ()  # the drained pods' volumes seen attached or in use
    left: tuple[str, ...] = ()
    skipped: bool = False  # nothing to wait for (no attachable volume drained)

    @property
    def detached(self) -> bool:
        return not self.left

    def summary(self) -> str:
        if self.skipped:
            return "no drained volume to wait for"
        if self.left:
            return (
                f"{len(self.left)} volume(s) still attached after {self.waited:.1f}s: "
                + ", ".join(self.left)
            )
        return f"{len(self.volumes)} volume(s) detached in {self.waited:.1f}s" + (
            ": " + ", ".join(self.volumes) if self.volumes else ""
        )

    @property
    def result(self) -> str:
        """The metric's label."""
        return "skipped" if self.skipped else "detached" if self.detached else "timed-out"


# Named as what is left when the Node was never read during the wait.
NODE_UNREAD = "(the Node could not be read)"
CSI_PREFIX = "kubernetes.io/csi/"
# How often a detach in flight is looked up, once the Node no longer lists the volume.
CONFIRM_EVERY = 0.25


def attachment_name(volume: str, node_name: str) -> str | None:
    """The VolumeAttachment the attach/detach controller makes for a CSI volume on a node
    (Kubernetes' csi_attacher.getAttachmentName); None for a volume that is not CSI."""
    if not volume.startswith(CSI_PREFIX) or "^" not in volume:
        return None
    driver, handle = volume[len(CSI_PREFIX) :].split("^", 1)
    digest = hashlib.sha256(f"{handle}{driver}{node_name}".encode()).hexdigest()
    return f"csi-{digest}"


# Whether a volume's detach has finished: True, False, or None when it cannot be told.
Confirm = Callable[[str], bool | None]


@dataclass
class _Seen:
    volumes: set[str] = field(default_factory=set)
    left: list[str] = field(default_factory=lambda: [NODE_UNREAD])
    present: frozenset[str] = frozenset()  # on the Node at its last reading


def wait_detached(
    source: NodeSource,
    plan: DetachPlan,
    deadline: float,
    on_progress: Callable[[Sequence[str]], None] | None = None,
    confirm: Confirm | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    initial: Iterable[str] = (),
    stop: Callable[[], bool] | None = None,
) -> DetachResult:
    """Block until still_attached() is empty and every volume seen is confirmed detached,
    or `deadline` (monotonic) passes; never past it.

    The attach/detach controller takes a volume off ``status.volumesAttached`` when it
    *starts* a detach (so the kubelet stops trusting it), not when the detach is done: the
    Node alone says "detaching". `confirm` looks each volume seen (and those `initial`, the
    Node's at the drain's start) up where its detach shows (the VolumeAttachment), every
    CONFIRM_EVERY seconds. `on_progress` hears each new "still attached" list. `stop`
    (a cancel) ends the wait early, with what is left named.
    """
    start = clock()
    if not plan.needed:
        return DetachResult(0.0, skipped=True)
    seen = _Seen(volumes=set(initial))

    def report(left: list[str]) -> None:
        if left != seen.left:
            seen.left = left
            if on_progress is not None:
                on_progress(left)

    def node_done() -> bool:
        if stop is not None and stop():
            return True
        nodes = source.snapshot()
        if not nodes:
            return False  # not listed yet: nothing is known
        state = VolumeState.of(nodes[0])
        seen.present = state.attached | state.in_use
        left = still_attached(state, plan)
        seen.volumes.update(left)
        report(left)
        return not left

    while source.wait_for(node_done, deadline) and not (stop is not None and stop()):
        # What the Node still lists here belongs to the kept pods (still_attached said so).
        gone = sorted(seen.volumes - seen.present)
        detaching = [v for v in gone if confirm is not None and confirm(v) is False]
        report(detaching)
        if not detaching or clock() >= deadline:
            break
        sleep(min(CONFIRM_EVERY, max(0.0, deadline - clock())))
    left = tuple(seen.left)
    return DetachResult(clock() - start, tuple(sorted(seen.volumes)), left)


def node_watch(kube: Kube, node_name: str) -> Reflector:
    """A watch of the agent's own Node (the permission every form of the agent has)."""
    return Reflector(
        kube, "/api/v1/nodes", resource="nodes", field_selector=f"metadata.name={node_name}"
    )


def node_pods(kube: Kube, node_name: str) -> list[JSON]:
    query = {"fieldSelector": f"spec.nodeName={node_name}"}
    return list(kube.request("GET", "/api/v1/pods", query=query)["items"])


def attachment_gone(kube: Kube, node_name: str) -> Confirm:
    """Looks a CSI volume's VolumeAttachment up by name: gone means detached. The kubelet's
    identity may get its node's attachments (the Node authorizer); an identity that may
    not (a 403) is told once and the Node's word is taken instead: no permission is added
    for this."""
    refused: list[ApiError] = []

    def confirm(volume: str) -> bool | None:
        name = attachment_name(volume, node_name)
        if name is None or refused:
            return None
        try:
            kube.get(f"/apis/storage.k8s.io/v1/volumeattachments/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return True
            if exc.status in (401, 403):
                refused.append(exc)
                log.info("detach wait: VolumeAttachments not readable (%s): the Node's word", exc)
                return None
            return False
        except KubeError:
            return False  # asked again at the next look
        return False

    return confirm


def wait_after_drain(
    kube: Kube,
    node_name: str,
    before: list[JSON],
    drained_uids: set[str],
    deadline: float,
    on_progress: Callable[[Sequence[str]], None] | None = None,
    node_before: JSON | None = None,
    ctx: Context | None = None,
) -> DetachResult:
    """The wait a departure makes between its drain and its release, on `kube` bounded by
    the caller; `node_before` is the Node as the drain started, if known. Nothing drained
    with an attachable volume: no request, no wait."""
    if not DetachPlan.of(
        [p for p in before if p["metadata"].get("uid") in drained_uids], []
    ).needed:
        return DetachResult(0.0, skipped=True)
    plan = DetachPlan.after_drain(before, node_pods(kube, node_name), drained_uids)
    state = VolumeState.of(node_before)
    watch = node_watch(kube, node_name)
    if ctx is not None:
        # A cancel (the evacuate taint removed, a shutdown taking over) ends the wait.
        ctx.on_cancel(lambda: _wake(watch))
        deadline = min(deadline, ctx.deadline)
    with watch.hold():
        return wait_detached(
            watch,
            plan,
            deadline,
            on_progress,
            attachment_gone(kube, node_name),
            initial=state.attached | state.in_use,
            stop=(lambda: ctx.cancelled) if ctx is not None else None,
        )


def _wake(watch: Reflector) -> None:
    with watch.changed:
        watch.changed.notify_all()
