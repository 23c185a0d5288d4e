"""Cluster API's writes to a workload cluster's Node while its Machine is deleted
(kubernetes-sigs/cluster-api, tag v1.14.0, core/reconcilers/machine/):

machine_controller.go reconcileDelete, after the pre-drain hooks
(pre-drain.delete.hook.machine.cluster.x-k8s.io/* on the Machine) and unless the Machine
carries machine.cluster.x-k8s.io/exclude-node-draining or its nodeDrainTimeoutSeconds
passed:
1. drain/drain.go CordonNode: unless already cordoned, a JSON merge patch
   spec.unschedulable=true (client.MergeFrom);
2. drainNode, one reconcile: list the Node's pods (100 a page), filter
   (drain/filters.go: DaemonSet and mirror pods skipped, orphans and unmanaged and emptyDir
   pods drained, the pod label cluster.x-k8s.io/drain=skip|wait-completed honoured; the
   MachineDrainRules of the management cluster are not modelled), evict the lowest drain
   order's pods, in name order, for at most 10s, each a policy/v1 Eviction without
   deleteOptions (GracePeriodSeconds -1) (EvictPods, evictPod); not done while any pod it
   drains is left: requeue after 20s (drainRetryInterval);
3. wait until the Node's volumes are detached (status.volumesAttached, VolumeAttachments),
   requeued every 20s (shouldWaitForNodeVolumes), unless
   machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach;
4. pre-terminate hooks, the infrastructure deleted (the VM goes: its OS shuts down), then
   deleteNode: one DELETE of the Node.

Cluster API never uncordons and records its Events on the Machine, not the Node. What it
writes on the Node beyond that is set at join time: the annotations
cluster.x-k8s.io/machine, cluster-name, cluster-namespace, owner-kind, owner-name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from hack.actors import api
from hack.actors.api import Bound
from hack.actors.kubectl import MIRROR
from nodeagent.kube.client import JSON, ApiError, Kube, node_path

DRAIN_LABEL = "cluster.x-k8s.io/drain"  # api/core/v1beta2 PodDrainLabel
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"  # api/core/v1beta2 MachineAnnotation
EXCLUDE_NODE_DRAINING = "machine.cluster.x-k8s.io/exclude-node-draining"
EVICTION_WINDOW = 10.0  # EvictPods: evictions for at most 10s per reconcile
DRAIN_RETRY = 20.0  # machine_controller.go drainRetryInterval
VOLUME_RETRY = 20.0  # waitForVolumeDetachRetryInterval


class Behavior(Enum):
    """clusterv1.MachineDrainRuleDrainBehavior."""

    DRAIN = "Drain"
    SKIP = "Skip"
    WAIT_COMPLETED = "WaitCompleted"


def behavior(pod: JSON, ds_exists: bool = True) -> Behavior:
    """drain/filters.go, the filters in GetPodsForEviction's order, for a reachable Node
    (skipDeletedFilter only acts on an unreachable one) and no MachineDrainRule."""
    ref = api.controller_of(pod)
    if ref is not None and ref.get("kind") == "DaemonSet" and not api.terminal(pod) and ds_exists:
        return Behavior.SKIP
    if MIRROR in api.annotations_of(pod):
        return Behavior.SKIP
    value = api.labels_of(pod).get(DRAIN_LABEL)
    if value is not None:
        if value.lower() == "skip":
            return Behavior.SKIP
        if value.replace("-", "", 1).lower() == "waitcompleted":
            return Behavior.WAIT_COMPLETED
    return Behavior.DRAIN


def drain_completed(pods: Sequence[JSON]) -> bool:
    """EvictionResult.DrainCompleted: no pod left that is drained or waited for."""
    return not any(behavior(p) is not Behavior.SKIP for p in pods)


@dataclass
class MachineDeletion:
    """The Machine of `node` being deleted, seen from the workload cluster."""

    kube: Kube
    node: str
    exclude_node_draining: bool = False
    drain_retry: float = DRAIN_RETRY
    volume_retry: float = VOLUME_RETRY
    evicted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # 429s and other refusals, per attempt

    def cordon(self) -> bool:
        """drain.go CordonNode: a JSON merge patch, only if not cordoned yet."""
        node = api.get_node(self.kube, self.node)
        if node["spec"].get("unschedulable"):
            return False
        self.kube.merge_patch(node_path(self.node), {"spec": {"unschedulable": True}})
        return True

    def drain_once(self) -> bool:
        """One drainNode reconcile; True when the drain is completed."""
        try:
            self.cordon()
        except ApiError as exc:
            if exc.status == 404:  # "Could not find Node ... skipping Node drain"
                return True
            raise
        pods = api.list_pods(self.kube, self.node)
        if drain_completed(pods):
            return True
        window = Bound.after(EVICTION_WINDOW)
        now_pods = [
            p
            for p in pods
            if behavior(p) is Behavior.DRAIN and not p["metadata"].get("deletionTimestamp")
        ]
        for pod in sorted(now_pods, key=lambda p: f"{api.ns_of(p)}/{api.name_of(p)}"):
            key = f"{api.ns_of(pod)}/{api.name_of(pod)}"
            if window.over():
                self.failed.append(
                    f"{key}: eviction timeout of 10s reached, eviction will be retried"
                )
                continue
            try:
                api.evict(self.kube, pod)
                self.evicted.append(key)
            except ApiError as exc:
                if exc.status != 404:
                    self.failed.append(f"{key}: {exc}")
        return False

    def pending_volumes(self) -> list[str]:
        """shouldWaitForNodeVolumes: status.volumesAttached and attached VolumeAttachments."""
        try:
            node = api.get_node(self.kube, self.node)
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise
        names = [str(v["name"]) for v in (node.get("status") or {}).get("volumesAttached") or []]
        items = self.kube.get("/apis/storage.k8s.io/v1/volumeattachments")["items"]
        names += [
            api.name_of(v)
            for v in items
            if v["spec"].get("nodeName") == self.node and (v.get("status") or {}).get("attached")
        ]
        return names

    def delete(self, bound: float = 300.0) -> None:
        """reconcileDelete from the drain on: drain (requeued), volumes, the Node deleted."""
        limit = Bound.after(bound)
        if not self.exclude_node_draining:
            while not self.drain_once():
                limit.sleep(self.drain_retry, f"Cluster API's drain of {self.node}")
        while self.pending_volumes():
            limit.sleep(self.volume_retry, f"Cluster API's wait for {self.node}'s volumes")
        api.delete_node(self.kube, self.node)  # machine_controller.go deleteNode
