"""kubectl's drain library and commands: k8s.io/kubectl/pkg/drain at v0.36.2 (the version
kured 1.23.0 builds with; aws-node-termination-handler v1.25.6 uses the same Helper), and
`kubectl cordon|uncordon|drain|delete node` (pkg/cmd/drain/drain.go, v0.36.2).

DrainHelper mirrors drain.Helper's fields that change what is written. Its filters are
drain/filters.go's, in their order; the eviction is drain.go's evictPods: one worker per
pod, 429s retried after EvictErrorRetryDelay, then waitForDelete polling every second until
the pod is gone or replaced. kubectl's Timeout 0 means no limit; `bound` is the harness's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum

from hack.actors import api
from hack.actors.api import ActorTimeout, Bound
from nodeagent.kube.client import JSON, ApiError, Kube, api_time, node_path

MIRROR = "kubernetes.io/config.mirror"  # corev1.MirrorPodAnnotationKey
DAEMONSET_WARNING = "ignoring DaemonSet-managed Pods"
UNMANAGED_WARNING = "deleting Pods that declare no controller"
LOCAL_STORAGE_WARNING = "deleting Pods with local storage"
DAEMONSET_FATAL = "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
UNMANAGED_FATAL = "cannot delete Pods that declare no controller (use --force to override)"
LOCAL_STORAGE_FATAL = "cannot delete Pods with local storage (use --delete-emptydir-data)"


class Status(Enum):
    """drain.PodDeleteStatus's reasons."""

    OKAY = "Okay"
    SKIP = "Skip"
    WARNING = "Warning"
    ERROR = "Error"


@dataclass(frozen=True)
class PodDelete:
    pod: JSON
    delete: bool
    status: Status
    message: str = ""


class DrainError(RuntimeError):
    """The drain library's error (a filter's fatal, an eviction's error, its own timeout)."""


PodFilter = Callable[[JSON], PodDelete]
DaemonSetExists = Callable[[str, str], bool]


def okay(pod: JSON) -> PodDelete:
    return PodDelete(pod, True, Status.OKAY)


def skip_deleted(pod: JSON, skip_after: int, now: float) -> PodDelete:
    """filters.go skipDeletedFilter / shouldSkipPod: a pod deleted more than
    SkipWaitForDeleteTimeoutSeconds ago is skipped (never with 0)."""
    stamp = api_time(pod["metadata"].get("deletionTimestamp"))
    if skip_after > 0 and stamp is not None and int(now - stamp) > skip_after:
        return PodDelete(pod, False, Status.SKIP)
    return okay(pod)


def daemonset_filter(
    pod: JSON, ignore_all: bool, force: bool, ds_exists: DaemonSetExists
) -> PodDelete:
    """filters.go daemonSetFilter: a finished DaemonSet pod goes; a live one stays with a
    warning under IgnoreAllDaemonSets (else it is fatal); an orphan goes only with Force."""
    ref = api.controller_of(pod)
    if ref is None or not (ref.get("kind") == "DaemonSet" and ref.get("apiVersion") == "apps/v1"):
        return okay(pod)
    if api.terminal(pod):
        return okay(pod)
    if not ds_exists(api.ns_of(pod), str(ref["name"])):
        if force:
            return PodDelete(pod, True, Status.WARNING, "daemonset not found")
        return PodDelete(pod, False, Status.ERROR, "daemonset not found")
    if not ignore_all:
        return PodDelete(pod, False, Status.ERROR, DAEMONSET_FATAL)
    return PodDelete(pod, False, Status.WARNING, DAEMONSET_WARNING)


def mirror_filter(pod: JSON) -> PodDelete:
    """filters.go mirrorPodFilter: static pods are skipped."""
    if MIRROR in api.annotations_of(pod):
        return PodDelete(pod, False, Status.SKIP)
    return okay(pod)


def local_storage_filter(pod: JSON, delete_emptydir: bool) -> PodDelete:
    """filters.go localStorageFilter: emptyDir pods need DeleteEmptyDirData."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    if not any("emptyDir" in v for v in volumes) or api.terminal(pod):
        return okay(pod)
    if not delete_emptydir:
        return PodDelete(pod, False, Status.ERROR, LOCAL_STORAGE_FATAL)
    return PodDelete(pod, True, Status.WARNING, LOCAL_STORAGE_WARNING)


def unreplicated_filter(pod: JSON, force: bool) -> PodDelete:
    """filters.go unreplicatedFilter: pods without a controller need Force."""
    if api.terminal(pod) or api.controller_of(pod) is not None:
        return okay(pod)
    if force:
        return PodDelete(pod, True, Status.WARNING, UNMANAGED_WARNING)
    return PodDelete(pod, False, Status.ERROR, UNMANAGED_FATAL)


def filter_pods(pods: Sequence[JSON], filters: Sequence[PodFilter]) -> list[PodDelete]:
    """drain.go filterPods: each pod through the filters until one says not to delete it."""
    out = []
    for pod in pods:
        status = okay(pod)
        for check in filters:
            status = check(pod)
            if not status.delete:
                break
        out.append(status)
    return out


def errors_of(items: Sequence[PodDelete]) -> list[str]:
    return [
        f"{api.ns_of(i.pod)}/{api.name_of(i.pod)}: {i.message}"
        for i in items
        if i.status is Status.ERROR
    ]


def cordon_patch(desired: bool) -> JSON:
    """The strategic two-way merge patch CordonHelper.PatchOrReplaceWithContext computes
    between the Node and its copy with Spec.Unschedulable = desired: `unschedulable` is
    omitempty, so the uncordon's patch deletes the field (null)."""
    return {"spec": {"unschedulable": True if desired else None}}


@dataclass
class DrainHelper:
    """drain.Helper: the fields that change what the drain writes, with its zero values."""

    kube: Kube
    grace_period_seconds: int = -1  # < 0: each pod's own terminationGracePeriodSeconds
    force: bool = False
    delete_emptydir_data: bool = False
    ignore_all_daemonsets: bool = False
    timeout: float = 0.0  # 0: no limit
    skip_wait_for_delete_timeout: int = 0
    evict_error_retry_delay: float = 0.0
    pod_selector: str = ""
    additional_filters: tuple[PodFilter, ...] = ()
    bound: float = 300.0  # the harness's limit when `timeout` is 0
    poll: float = 1.0  # waitForDelete's interval
    attempts: int = 0  # every eviction request sent (429 retries included)
    evicted: list[str] = field(default_factory=list)  # ns/name, in the order accepted
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cordon_or_uncordon(self, node: JSON, desired: bool) -> bool:
        """drain.RunCordonOrUncordon on the Node object the caller holds: nothing is sent
        when that object already says `desired` (even if the API's Node no longer does);
        after a patch the caller's object follows the answer (CordonHelper keeps a pointer
        to it). Returns whether a patch was sent."""
        spec = node.setdefault("spec", {})
        if bool(spec.get("unschedulable")) == desired:
            return False
        # k8s.io/kubectl/pkg/drain/cordon.go PatchOrReplaceWithContext: Nodes().Patch,
        # types.StrategicMergePatchType.
        answer = self.kube.strategic_patch(node_path(api.name_of(node)), cordon_patch(desired))
        spec["unschedulable"] = bool((answer.get("spec") or {}).get("unschedulable"))
        return True

    def filters(self) -> list[PodFilter]:
        """filters.go makeFilters, in its order."""
        now = time.time()
        return [
            lambda p: skip_deleted(p, self.skip_wait_for_delete_timeout, now),
            lambda p: daemonset_filter(p, self.ignore_all_daemonsets, self.force, self._ds_exists),
            mirror_filter,
            lambda p: local_storage_filter(p, self.delete_emptydir_data),
            lambda p: unreplicated_filter(p, self.force),
            *self.additional_filters,
        ]

    def _ds_exists(self, ns: str, name: str) -> bool:
        try:
            self.kube.get(f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pods_for_deletion(self, node: str) -> list[PodDelete]:
        """drain.go GetPodsForDeletion: list the node's pods (PodSelector applied), filter;
        any filter's fatal is the drain's error."""
        items = filter_pods(api.list_pods(self.kube, node, self.pod_selector), self.filters())
        if errs := errors_of(items):
            raise DrainError("; ".join(errs))
        return items

    def run_node_drain(self, node: str) -> list[str]:
        """drain.RunNodeDrain: GetPodsForDeletion, then DeleteOrEvictPods; returns the
        pods evicted (ns/name)."""
        pods = [i.pod for i in self.pods_for_deletion(node) if i.delete]
        self.evict_pods(pods)
        return list(self.evicted)

    def evict_pods(self, pods: Sequence[JSON]) -> None:
        """drain.go evictPods: every pod on its own worker; the errors joined."""
        if not pods:
            return
        limit = Bound.after(self.timeout if self.timeout > 0 else self.bound)
        with ThreadPoolExecutor(max_workers=len(pods)) as pool:
            errors = [e for e in pool.map(lambda p: self._evict_one(p, limit), pods) if e]
        if errors:
            raise DrainError("; ".join(errors))

    def _evict_one(self, pod: JSON, limit: Bound) -> str:
        """One worker of evictPods: evict until accepted or gone, then waitForDelete."""
        active = pod
        grace = self.grace_period_seconds if self.grace_period_seconds >= 0 else None
        while True:
            if limit.over():
                return self._timed_out(pod)
            try:
                with self._lock:
                    self.attempts += 1
                api.evict(self.kube, active, grace=grace)
                break
            except ApiError as exc:
                if exc.status == 404:
                    return ""
                if exc.status == 429 or _namespace_terminating(exc):
                    time.sleep(self.evict_error_retry_delay)
                else:
                    return f"error when evicting pods/{api.name_of(pod)}: {exc}"
            fresh = api.get_pod(self.kube, api.ns_of(active), api.name_of(active))
            if fresh is not None:  # errors are ignored: the eviction sorts it out
                active = fresh
        with self._lock:
            self.evicted.append(f"{api.ns_of(pod)}/{api.name_of(pod)}")
        return self._wait_for_delete(active, limit)

    def _wait_for_delete(self, pod: JSON, limit: Bound) -> str:
        """drain.go waitForDelete: every second until 404 or a new UID (or skipped)."""
        uid = pod["metadata"]["uid"]
        while True:
            fresh = api.get_pod(self.kube, api.ns_of(pod), api.name_of(pod))
            if fresh is None or fresh["metadata"]["uid"] != uid:
                return ""
            if (
                skip_deleted(fresh, self.skip_wait_for_delete_timeout, time.time()).status
                is Status.SKIP
            ):
                return ""
            if limit.left() < self.poll:
                return self._timed_out(pod)
            time.sleep(self.poll)

    def _timed_out(self, pod: JSON) -> str:
        if self.timeout > 0:
            why = f"global timeout reached: {self.timeout}s"
            return f"error when evicting pods/{api.name_of(pod)}: {why}"
        raise ActorTimeout(f"drain of pods/{api.name_of(pod)} past the harness's bound")


def _namespace_terminating(exc: ApiError) -> bool:
    if exc.status != 403:
        return False
    causes = ((exc.body or {}).get("details") or {}).get("causes") or []
    return any(c.get("type") == "NamespaceTerminating" for c in causes)


@dataclass
class Kubectl:
    """A person at a shell: `kubectl cordon`, `uncordon`, `drain`, `delete node`."""

    kube: Kube

    def drainer(self, **options: object) -> DrainHelper:
        # pkg/cmd/drain/drain.go NewDrainCmdOptions: GracePeriodSeconds -1,
        # EvictErrorRetryDelay 5s (the library's zero value is no delay at all).
        helper = DrainHelper(self.kube, grace_period_seconds=-1, evict_error_retry_delay=5.0)
        for key, value in options.items():
            setattr(helper, key, value)
        return helper

    def cordon(self, node: str) -> bool:
        """kubectl cordon: RunCordonOrUncordon on a fresh GET."""
        return self.drainer().cordon_or_uncordon(api.get_node(self.kube, node), True)

    def uncordon(self, node: str) -> bool:
        """kubectl uncordon: whoever cordoned, the field goes."""
        return self.drainer().cordon_or_uncordon(api.get_node(self.kube, node), False)

    def drain(self, node: str, **options: object) -> DrainHelper:
        """kubectl drain NODE [--ignore-daemonsets --delete-emptydir-data --force ...]:
        cordon, then RunNodeDrain; returns the helper (what it evicted, how often it
        asked)."""
        helper = self.drainer(**options)
        helper.cordon_or_uncordon(api.get_node(self.kube, node), True)
        helper.run_node_drain(node)
        return helper

    def delete_node(self, node: str) -> bool:
        """kubectl delete node NODE: one DELETE (background propagation, the default).
        The kubelet keeps running and does not register again until it restarts."""
        return api.delete_node(self.kube, node)
