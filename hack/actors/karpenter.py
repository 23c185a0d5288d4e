"""Karpenter's writes to a Node it manages (kubernetes-sigs/karpenter, tag v1.14.1):

- registration (pkg/controllers/nodeclaim/lifecycle/registration.go syncNode): the
  finalizer karpenter.sh/termination and the NodeClaim's labels (karpenter.sh/nodepool,
  karpenter.sh/registered), one merge patch with the optimistic lock;
- disruption (pkg/controllers/state/statenode.go RequireNoScheduleTaint, called from
  pkg/controllers/disruption/queue.go): karpenter.sh/disrupted:NoSchedule by optimistic-lock
  merge patch, then the NodeClaim is deleted and its finalizer deletes the Node
  (nodeclaim/lifecycle/controller.go finalize): here one DELETE of the Node, which the
  finalizer turns into a deletionTimestamp;
- a failed or abandoned disruption (disruption/controller.go Reconcile): the same taint
  removed again from nodes not being deleted; the cordon is never touched;
- termination (pkg/controllers/node/termination/controller.go finalize, requeued every
  second): Terminator.Taint adds the taint and the label
  node.kubernetes.io/exclude-from-external-load-balancers=karpenter (terminator.go); Drain
  evicts in four tiers (non-critical non-DaemonSet, non-critical DaemonSet, critical
  non-DaemonSet, critical DaemonSet), a tier only once the ones before are gone, each
  Eviction with a UID precondition (terminator/eviction.go Queue.Reconcile); pods that
  tolerate the taint, mirror pods and pods past their grace + 1 min are not waited for,
  do-not-disrupt pods are waited for but not evicted (pkg/utils/pod/scheduling.go); then
  the wait for VolumeAttachments, the cloud's Delete, and the finalizer removed by
  strategic merge patch (removeFinalizer), which lets the API server delete the Node.
  Not modelled: a NodeClaim's terminationGracePeriod (pods deleted past it), the eviction
  queue's backoff (a refused pod is asked again on the next 1s pass).

Karpenter never sets spec.unschedulable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from hack.actors import api
from hack.actors.api import Bound
from nodeagent.kube.client import JSON, ApiError, Kube, api_time, node_path

COMPONENT = "karpenter"  # pkg/operator/operator.go AppName
FINALIZER = "karpenter.sh/termination"  # pkg/apis/v1/labels.go TerminationFinalizer
DISRUPTED = "karpenter.sh/disrupted"  # pkg/apis/v1/taints.go DisruptedTaintKey
DISRUPTED_TAINT = {"key": DISRUPTED, "effect": "NoSchedule"}
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
# v1.15.0 pkg/apis/v1/taints.go: the reboot controller's fence (nodeclaim/reboot/controller.go
# ensureRebootTaint, a merge patch of the taint list without the optimistic lock), removed
# once the Node shows a new bootID; the label karpenter.sh/initialized goes meanwhile.
REBOOTING = "karpenter.sh/rebooting"
REBOOTING_TAINT = {"key": REBOOTING, "effect": "NoSchedule"}
INITIALIZED = "karpenter.sh/initialized"
NODEPOOL = "karpenter.sh/nodepool"
REGISTERED = "karpenter.sh/registered"
EXCLUDE_LB = "node.kubernetes.io/exclude-from-external-load-balancers"
CRITICAL = ("system-cluster-critical", "system-node-critical")
STUCK_AFTER = 60.0  # IsStuckTerminating: deletionTimestamp more than a minute ago
MIN_DRAIN_TIME = 5.0  # termination/controller.go MinDrainTime
T = TypeVar("T")


class Tier(Enum):
    """terminator.go groupPodsByPriority, in its order."""

    NON_CRITICAL = "non-critical"
    NON_CRITICAL_DAEMON = "non-critical-daemonset"
    CRITICAL = "critical"
    CRITICAL_DAEMON = "critical-daemonset"


def owned_by(pod: JSON, api_version: str, kind: str) -> bool:
    """scheduling.go IsOwnedBy: any owner reference (not only the controller)."""
    refs = pod["metadata"].get("ownerReferences") or []
    return any(r.get("apiVersion") == api_version and r.get("kind") == kind for r in refs)


def tolerates_disrupted(pod: JSON) -> bool:
    """scheduling.go ToleratesDisruptedNoScheduleTaint: a toleration matching
    karpenter.sh/disrupted:NoSchedule (operator Exists with no key matches every taint)."""
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        effect = tol.get("effect") or ""
        if effect and effect != "NoSchedule":
            continue
        key, op = tol.get("key") or "", tol.get("operator") or "Equal"
        if op == "Exists" and (not key or key == DISRUPTED):
            return True
        if op == "Equal" and key == DISRUPTED and (tol.get("value") or "") == "":
            return True
    return False


def terminating(pod: JSON) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def stuck_terminating(pod: JSON, now: float) -> bool:
    stamp = api_time(pod["metadata"].get("deletionTimestamp"))
    return stamp is not None and now - stamp > STUCK_AFTER


def drainable(pod: JSON, now: float) -> bool:
    """scheduling.go IsDrainable: not tolerating the taint, not stuck terminating, not a
    mirror pod (owned by the Node)."""
    return (
        not tolerates_disrupted(pod)
        and not stuck_terminating(pod, now)
        and not owned_by(pod, "v1", "Node")
    )


def waiting_eviction(pod: JSON, now: float) -> bool:
    """scheduling.go IsWaitingEviction: not terminal, drainable."""
    return not api.terminal(pod) and drainable(pod, now)


def do_not_disrupt(pod: JSON) -> bool:
    """scheduling.go IsDoNotDisruptActive: "true", or a positive duration (not modelled:
    a duration counts as active, as it does until it runs out)."""
    value = api.annotations_of(pod).get(DO_NOT_DISRUPT)
    return value is not None and value != ""


def evictable(pod: JSON) -> bool:
    """scheduling.go IsEvictable: active (not terminal, not terminating), not tolerating the
    taint, not a mirror pod, no active do-not-disrupt."""
    return (
        not api.terminal(pod)
        and not terminating(pod)
        and not tolerates_disrupted(pod)
        and not owned_by(pod, "v1", "Node")
        and not do_not_disrupt(pod)
    )


def tier_of(pod: JSON) -> Tier:
    critical = (pod.get("spec") or {}).get("priorityClassName") in CRITICAL
    daemon = owned_by(pod, "apps/v1", "DaemonSet")
    if critical:
        return Tier.CRITICAL_DAEMON if daemon else Tier.CRITICAL
    return Tier.NON_CRITICAL_DAEMON if daemon else Tier.NON_CRITICAL


def tiers(pods: Sequence[JSON]) -> list[tuple[Tier, list[JSON]]]:
    """groupPodsByPriority over the pods waiting eviction, every tier listed in order."""
    groups: dict[Tier, list[JSON]] = {t: [] for t in Tier}
    for pod in pods:
        groups[tier_of(pod)].append(pod)
    return [(t, groups[t]) for t in Tier]


def first_tier(pods: Sequence[JSON], now: float) -> tuple[Tier, list[JSON]] | None:
    """terminator.go Drain: the first tier still holding pods waiting eviction, and which
    of them to evict now; None when the drain is done."""
    waiting = [p for p in pods if waiting_eviction(p, now)]
    for tier, group in tiers(waiting):
        if group:
            return tier, [p for p in group if evictable(p)]
    return None


class Phase(Enum):
    DRAINING = "draining"
    VOLUMES = "volumes"
    TERMINATED = "terminated"


@dataclass
class Karpenter:
    kube: Kube
    requeue: float = 1.0  # every requeue of the termination controller is 1s
    min_drain_time: float = MIN_DRAIN_TIME  # applies with a NodeClaim; 0 without
    evictions: list[tuple[Tier, str]] = field(default_factory=list)  # accepted, in order
    # controller.go finalize's cloudProvider.Delete, between the volumes and the finalizer's
    # removal: the instance's termination where a harness has one (called once).
    delete_instance: Callable[[], None] | None = None
    _queued: set[str] = field(default_factory=set)
    _drain_started: float | None = None

    def register(self, name: str, nodepool: str = "default") -> JSON:
        """registration.go syncNode: the finalizer and the NodeClaim's labels in one merge
        patch with the optimistic lock (a 409 requeues: read again, patch again)."""
        return _requeued(lambda: self._register(name, nodepool))

    def _register(self, name: str, nodepool: str) -> JSON:
        node = api.get_node(self.kube, name)
        finalizers = list(node["metadata"].get("finalizers") or [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
        patch = {
            "metadata": {
                "finalizers": finalizers,
                "labels": {NODEPOOL: nodepool, REGISTERED: "true"},
            }
        }
        return api.merge_patch_locked(self.kube, node, patch)

    def require_taint(self, name: str, add: bool) -> bool:
        """statenode.go RequireNoScheduleTaint: add or remove karpenter.sh/disrupted
        (matched by key and effect), optimistic-lock merge patch of the whole taint list,
        retried (retry.OnError) on a conflict. A deleting Node that has the taint is left
        alone. Returns whether it patched."""
        return _requeued(lambda: self._require_taint(name, add))

    def _require_taint(self, name: str, add: bool) -> bool:
        node = api.get_node(self.kube, name)
        has = any(_match(t) for t in api.taints(node))
        if has and node["metadata"].get("deletionTimestamp"):
            return False
        kept = [t for t in api.taints(node) if not _match(t)]
        wanted = [*kept, DISRUPTED_TAINT] if add else kept
        if wanted == api.taints(node):
            return False
        api.merge_patch_locked(self.kube, node, {"spec": {"taints": wanted}})
        return True

    def disrupt(self, name: str) -> None:
        """The disruption queue's command: taint, then delete the NodeClaim, whose
        finalizer deletes the Node (nodeclaim/lifecycle/controller.go finalize)."""
        self.require_taint(name, True)
        api.delete_node(self.kube, name)

    def taint_for_termination(self, node: JSON) -> JSON:
        """terminator.go Taint: the taint (a same-key taint of another effect replaced)
        and the exclude-from-external-load-balancers label set to "karpenter" whatever it
        said before; one optimistic-lock merge patch, only if something changed."""
        has = any(_match(t) for t in api.taints(node))
        wanted = (
            api.taints(node)
            if has
            else [*(t for t in api.taints(node) if t["key"] != DISRUPTED), DISRUPTED_TAINT]
        )
        patch: JSON = {}
        if wanted != api.taints(node):
            patch["spec"] = {"taints": wanted}
        if api.labels_of(node).get(EXCLUDE_LB) != COMPONENT:
            patch["metadata"] = {"labels": {EXCLUDE_LB: COMPONENT}}
        if not patch:
            return node
        return api.merge_patch_locked(self.kube, node, patch)

    def reconcile(self, name: str) -> Phase | None:
        """One pass of termination/controller.go finalize; None when the Node is gone or
        not being deleted with the finalizer."""
        try:
            node = api.get_node(self.kube, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        meta = node["metadata"]
        if not meta.get("deletionTimestamp") or FINALIZER not in (meta.get("finalizers") or []):
            return None
        try:
            node = self.taint_for_termination(node)
        except ApiError as exc:
            if exc.status == 409:  # requeue
                return Phase.DRAINING
            raise
        if not self._drained(node):
            return Phase.DRAINING
        if self._pending_volumes(name):
            self.event(
                node,
                "Normal",
                "AwaitingVolumeDetachment",
                "Awaiting deletion of bound volumeattachments",
            )
            return Phase.VOLUMES
        if self.delete_instance is not None:
            delete, self.delete_instance = self.delete_instance, None
            delete()
        self.remove_finalizer(node)
        return Phase.TERMINATED

    def _drained(self, node: JSON) -> bool:
        """awaitDrain: terminator.go Drain, then MinDrainTime since the drain began."""
        now = time.time()
        if self._drain_started is None:
            self._drain_started = time.monotonic()
        step = first_tier(api.list_pods(self.kube, api.name_of(node)), now)
        if step is not None:
            tier, pods = step
            for pod in pods:
                self._evict(tier, pod, node)
            return False
        return time.monotonic() - self._drain_started >= self.min_drain_time

    def _evict(self, tier: Tier, pod: JSON, node: JSON) -> None:
        """eviction.go Queue.Reconcile: policy/v1 Eviction with the pod's UID as a
        precondition; 404 and 409 drop the pod, 429 records FailedDraining on the Node
        and requeues."""
        key = pod["metadata"]["uid"]
        try:
            api.evict(self.kube, pod, uid_precondition=True)
        except ApiError as exc:
            if exc.status in (404, 409):
                return
            if exc.status == 429:
                if key not in self._queued:  # the recorder dedupes the same message
                    who = f"{api.ns_of(pod)}/{api.name_of(pod)}"
                    msg = f"Failed to drain node, evicting pod violates a PDB (Pod={who})"
                    self.event(node, "Warning", "FailedDraining", msg)
                    self._queued.add(key)
                return
            raise
        self.evictions.append((tier, f"{api.ns_of(pod)}/{api.name_of(pod)}"))
        api.record_event(self.kube, pod, "Pod", "Normal", "Evicted", "Evicted pod: ", COMPONENT)

    def _pending_volumes(self, name: str) -> list[str]:
        """awaitVolumeDetachment: VolumeAttachments naming the Node (those of pods the drain
        keeps are not waited for: not modelled, the harness's pods have no PVs)."""
        items = self.kube.get("/apis/storage.k8s.io/v1/volumeattachments")["items"]
        return [api.name_of(v) for v in items if v["spec"].get("nodeName") == name]

    def remove_finalizer(self, node: JSON) -> None:
        """controller.go removeFinalizer: client.StrategicMergeFrom, which for the
        finalizers list (patchStrategy merge) deletes just this entry."""
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
        try:
            self.kube.strategic_patch(node_path(api.name_of(node)), patch)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def event(self, node: JSON, type_: str, reason: str, message: str) -> None:
        api.record_event(self.kube, node, "Node", type_, reason, message, COMPONENT)

    def terminate(self, name: str, bound: float = 120.0) -> list[Phase]:
        """Requeue finalize every second until the finalizer is gone; the phases seen."""
        limit = Bound.after(bound)
        phases: list[Phase] = []
        while (phase := self.reconcile(name)) is not None:
            if not phases or phases[-1] is not phase:
                phases.append(phase)
            if phase is Phase.TERMINATED:
                break
            limit.sleep(self.requeue, f"Karpenter's termination of {name}")
        return phases


def _requeued(write: Callable[[], T], attempts: int = 5) -> T:
    """A write with the optimistic lock, tried again on 409 (the controllers requeue)."""
    for _ in range(attempts - 1):
        try:
            return write()
        except ApiError as exc:
            if exc.status != 409:
                raise
            time.sleep(0.1)
    return write()


def _match(taint: JSON) -> bool:
    """corev1.Taint.MatchTaint: same key and effect."""
    return bool(taint["key"] == DISRUPTED and taint.get("effect") == "NoSchedule")
