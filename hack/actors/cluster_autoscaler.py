"""The Cluster Autoscaler's scale-down of one node, as its API writes
(kubernetes/autoscaler, tag cluster-autoscaler-1.36.1, cluster-autoscaler/...):

1. taint ToBeDeletedByClusterAutoscaler=<unix time>:NoSchedule and, with
   --cordon-node-before-terminating (default true), spec.unschedulable=true, in one Update
   (utils/taints/taints.go MarkToBeDeleted -> AddTaints); Event ScaleDown on the Node;
2. wait --node-delete-delay-after-taint (5s) (core/scaledown/actuation/actuator.go
   deleteNodesAsync);
3. drain: evict every pod but mirror pods, DaemonSet pods best effort and only where their
   annotation or --daemonset-eviction-for-occupied-nodes (default true) says so, each with
   gracePeriodSeconds = min(pod's, --max-graceful-termination-sec), 429s retried every 10s
   for --max-pod-eviction-time (2m), then poll every 5s for the pods to be gone for
   grace + 30s (actuation/drain.go);
4. wait for delay-deletion.cluster-autoscaler.kubernetes.io/* annotations to go, polling
   every 5s for --node-deletion-delay-timeout (2m) (actuation/delay.go);
5. cloud DeleteNodes (delete_in_batch.go); the cloud node-lifecycle controller then
   deletes the Node object: here one DELETE.

On a failed drain, CleanUpAndRecordFailedScaleDownEvent (delete_in_batch.go) records
ScaleDownFailed and calls CleanToBeDeleted: the taint goes and, with the cordon flag,
spec.unschedulable=false, whoever cordoned. At start, cleanUpIfRequired
(core/static_autoscaler.go) does the same on every node carrying the taint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hack.actors import api
from hack.actors.api import Bound
from hack.actors.kubectl import MIRROR
from nodeagent.kube.client import JSON, ApiError, Kube

COMPONENT = "cluster-autoscaler"  # utils/kubernetes/factory.go EventSource
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"  # utils/taints/taints.go ToBeDeletedTaint
DELETION_CANDIDATE = "DeletionCandidateOfClusterAutoscaler"
DELAY_DELETION_PREFIX = "delay-deletion.cluster-autoscaler.kubernetes.io/"  # delay.go
ENABLE_DS_EVICTION = "cluster-autoscaler.kubernetes.io/enable-ds-eviction"  # utils/daemonset
DS_POD_ANNOTATION = "cluster-autoscaler.kubernetes.io/daemonset-pod"  # utils/pod/pod.go
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
DEFAULT_GRACE = 30  # apiv1.DefaultTerminationGracePeriodSeconds


@dataclass(frozen=True)
class Options:
    """The flags that change the writes, with the defaults of config/flags/flags.go."""

    cordon_node_before_terminating: bool = True
    node_delete_delay_after_taint: float = 5.0
    max_graceful_termination_sec: int = 600
    max_pod_eviction_time: float = 120.0
    daemonset_eviction_for_occupied_nodes: bool = True
    node_deletion_delay_timeout: float = 120.0
    # actuation/drain.go DefaultEvictionRetryTime, DefaultPodEvictionHeadroom; the 5s polls
    # of waitPodsToDisappear and WaitForDelayDeletion.
    eviction_retry_time: float = 10.0
    pod_eviction_headroom: float = 30.0
    poll: float = 5.0


def is_daemonset_pod(pod: JSON) -> bool:
    """utils/pod/pod.go IsDaemonSetPod: controlled by a DaemonSet, or annotated as one."""
    ref = api.controller_of(pod)
    if ref is not None and ref.get("kind") == "DaemonSet":
        return True
    return api.annotations_of(pod).get(DS_POD_ANNOTATION) == "true"


def pods_to_evict(pods: Sequence[JSON], evict_ds_by_default: bool) -> tuple[list[JSON], list[JSON]]:
    """actuation/drain.go podsToEvict with utils/daemonset PodsToEvict: (DaemonSet pods to
    evict, other pods). Mirror pods stay; a DaemonSet pod goes when annotated
    enable-ds-eviction "true", or by default when not annotated at all."""
    ds_pods: list[JSON] = []
    others: list[JSON] = []
    for pod in pods:
        if MIRROR in api.annotations_of(pod):
            continue
        if not is_daemonset_pod(pod):
            others.append(pod)
            continue
        value = api.annotations_of(pod).get(ENABLE_DS_EVICTION)
        if value == "true" or (value is None and evict_ds_by_default):
            ds_pods.append(pod)
    return ds_pods, others


def eviction_grace(pod: JSON, max_termination: int) -> int:
    """actuation/drain.go evictPod: the pod's grace (30 if unset), capped."""
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    termination = DEFAULT_GRACE if grace is None else int(grace)
    if max_termination > 0 and termination > max_termination:
        termination = max_termination
    return termination


def has_delay_deletion(node: JSON) -> bool:
    return any(k.startswith(DELAY_DELETION_PREFIX) for k in api.annotations_of(node))


class ScaleDownFailed(RuntimeError):
    pass


@dataclass
class ClusterAutoscaler:
    kube: Kube
    options: Options = field(default_factory=Options)
    evicted: list[str] = field(default_factory=list)  # ns/name, accepted evictions
    attempts: int = 0  # every eviction request sent
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def event(self, node: JSON, type_: str, reason: str, message: str) -> None:
        api.record_event(self.kube, node, "Node", type_, reason, message, COMPONENT)

    def mark_to_be_deleted(self, name: str) -> JSON:
        """actuator.go taintNode -> utils/taints/taints.go MarkToBeDeleted/AddTaints: one
        Nodes().Update adding the taint (value: unix time) and, only if the taint was
        added, spec.unschedulable=true; Event ScaleDown."""
        node = api.get_node(self.kube, name)
        taint = {"key": TO_BE_DELETED, "value": str(int(time.time())), "effect": "NoSchedule"}
        cordon = self.options.cordon_node_before_terminating

        def add(n: JSON) -> bool:  # taints.go addTaintsToSpec
            if api.has_taint(n, TO_BE_DELETED):
                return False
            n.setdefault("spec", {})["taints"] = [*api.taints(n), taint]
            if cordon:
                n["spec"]["unschedulable"] = True
            return True

        updated = api.update_node(self.kube, node, add)
        self.event(node, "Normal", "ScaleDown", "marked the node as toBeDeleted/unschedulable")
        return updated

    def mark_deletion_candidate(self, name: str) -> JSON:
        """taints.go MarkDeletionCandidate: the soft PreferNoSchedule taint, no cordon."""
        taint = {
            "key": DELETION_CANDIDATE,
            "value": str(int(time.time())),
            "effect": "PreferNoSchedule",
        }

        def add(n: JSON) -> bool:
            if api.has_taint(n, DELETION_CANDIDATE):
                return False
            n.setdefault("spec", {})["taints"] = [*api.taints(n), taint]
            return True

        return api.update_node(self.kube, api.get_node(self.kube, name), add)

    def clean_to_be_deleted(self, node: JSON) -> JSON:
        """taints.go CleanToBeDeleted/CleanTaints: if the taint is there, one Update that
        removes it and, with the cordon flag, sets spec.unschedulable=false (nothing asks
        who cordoned). Without the taint nothing is written."""
        cordon = self.options.cordon_node_before_terminating

        def clean(n: JSON) -> bool:
            kept = [t for t in api.taints(n) if t["key"] != TO_BE_DELETED]
            if len(kept) == len(api.taints(n)):
                return False
            n["spec"]["taints"] = kept
            if cordon:
                n["spec"]["unschedulable"] = False
            return True

        return api.update_node(self.kube, node, clean)

    def clean_all_to_be_deleted(self, names: Sequence[str]) -> list[str]:
        """static_autoscaler.go cleanUpIfRequired -> taints.go CleanAllToBeDeleted, once
        per start on every node of its node groups: Event ClusterAutoscalerCleanup where
        the taint went. Returns the nodes it cleaned."""
        cleaned = []
        for name in names:
            node = api.get_node(self.kube, name)
            if not api.has_taint(node, TO_BE_DELETED):
                continue
            self.clean_to_be_deleted(node)
            msg = f"removed {TO_BE_DELETED} taint from node {name}"
            self.event(node, "Normal", "ClusterAutoscalerCleanup", msg)
            cleaned.append(name)
        return cleaned

    def drain(self, name: str) -> None:
        """actuation/drain.go DrainNode with the legacy single-rule config (no
        --drain-priority-config): non-DaemonSet pods are evicted and waited for,
        DaemonSet pods evicted best effort and not waited for. Raises ScaleDownFailed."""
        node = api.get_node(self.kube, name)
        ds_pods, pods = pods_to_evict(
            api.list_pods(self.kube, name), self.options.daemonset_eviction_for_occupied_nodes
        )
        max_term = self.options.max_graceful_termination_sec
        retry_until = time.monotonic() + self.options.max_pod_eviction_time
        everyone = [(p, True) for p in pods] + [(p, False) for p in ds_pods]
        with ThreadPoolExecutor(max_workers=max(1, len(everyone))) as pool:
            results = list(
                pool.map(lambda pf: self._evict(pf[0], retry_until, max_term, pf[1]), everyone)
            )
        failed = [err for (_, full), err in zip(everyone, results, strict=True) if full and err]
        if failed:
            raise ScaleDownFailed(
                f"Failed to drain node /{name}, due to following errors: {failed}"
            )
        self._wait_pods_to_disappear(node, pods, max_term)

    def _evict(self, pod: JSON, retry_until: float, max_term: int, full: bool) -> str:
        """actuation/drain.go evictPod: Event ScaleDown on the pod, then a policy/v1beta1
        Eviction (client-go's deprecated Pods().Evict) with the capped grace, every
        EvictionRetryTime until accepted, 404 or --max-pod-eviction-time."""
        self.event_pod(pod, "Normal", "ScaleDown", "deleting pod for node scale down")
        grace = eviction_grace(pod, max_term)
        last = ""
        first = True
        while first or time.monotonic() < retry_until:
            if not first:
                time.sleep(self.options.eviction_retry_time)
            first = False
            try:
                with self._lock:
                    self.attempts += 1
                api.evict(self.kube, pod, grace=grace, version=api.PolicyV1beta1)
                self.evicted.append(f"{api.ns_of(pod)}/{api.name_of(pod)}")
                return ""
            except ApiError as exc:
                if exc.status == 404:
                    return ""
                last = str(exc)
        if full:
            self.event_pod(pod, "Warning", "ScaleDownFailed", "failed to delete pod for ScaleDown")
        who = f"{api.ns_of(pod)}/{api.name_of(pod)}"
        return f"failed to evict pod {who} within allowed timeout (last error: {last})"

    def event_pod(self, pod: JSON, type_: str, reason: str, message: str) -> None:
        api.record_event(self.kube, pod, "Pod", type_, reason, message, COMPONENT)

    def _wait_pods_to_disappear(self, node: JSON, pods: Sequence[JSON], max_term: int) -> None:
        """actuation/drain.go waitPodsToDisappear: every 5s, for grace + headroom, until each
        pod is 404 or bound elsewhere."""
        limit = Bound.after(max_term + self.options.pod_eviction_headroom)
        while True:
            if all(self._gone(p, api.name_of(node)) for p in pods):
                return
            if limit.left() < self.options.poll:
                raise ScaleDownFailed(
                    f"Failed to drain node /{api.name_of(node)}: pods remaining after timeout"
                )
            time.sleep(self.options.poll)

    def _gone(self, pod: JSON, node: str) -> bool:
        fresh = api.get_pod(self.kube, api.ns_of(pod), api.name_of(pod))
        return fresh is None or (fresh.get("spec") or {}).get("nodeName") != node

    def wait_for_delay_deletion(self, name: str) -> float:
        """actuation/delay.go WaitForDelayDeletion: while the Node carries an annotation
        under delay-deletion.cluster-autoscaler.kubernetes.io/, poll every 5s for at most
        --node-deletion-delay-timeout; a timeout only logs. Returns the seconds waited."""
        start = time.monotonic()
        timeout = self.options.node_deletion_delay_timeout
        if timeout == 0 or not has_delay_deletion(api.get_node(self.kube, name)):
            return 0.0
        limit = Bound.after(timeout)
        while True:  # wait.Poll: the first check after one interval
            if limit.left() < self.options.poll:
                break
            time.sleep(self.options.poll)
            if not has_delay_deletion(api.get_node(self.kube, name)):
                break
        return time.monotonic() - start

    def delete_node(self, name: str) -> bool:
        """delete_in_batch.go deleteNodesFromCloudProvider -> NodeGroup.DeleteNodes; the
        VM goes and the cloud node-lifecycle controller deletes the Node: one DELETE."""
        return api.delete_node(self.kube, name)

    def scale_down(self, name: str) -> bool:
        """One node's scale-down with drain, as actuator.go StartDeletion runs it. Returns
        True when the node was deleted, False when the scale-down failed and was undone."""
        self.mark_to_be_deleted(name)
        time.sleep(self.options.node_delete_delay_after_taint)
        try:
            self.drain(name)
        except ScaleDownFailed as exc:
            self.fail(name, exc)
            return False
        self.wait_for_delay_deletion(name)
        node = api.get_node(self.kube, name)
        self.delete_node(name)
        self.event(node, "Normal", "ScaleDown", "nodes removed by cluster autoscaler")
        return True

    def fail(self, name: str, exc: Exception) -> None:
        """delete_in_batch.go CleanUpAndRecordFailedScaleDownEvent: ScaleDownFailed on the
        Node, then CleanToBeDeleted."""
        node = api.get_node(self.kube, name)
        self.event(node, "Warning", "ScaleDownFailed", f"failed to drain and delete node: {exc}")
        self.clean_to_be_deleted(node)
