"""Pods the kubelet's graceful node shutdown left behind, deleted after the next boot.

At shutdown the kubelet kills every pod still running and leaves it `Failed` with
reason `Terminated` and the condition `DisruptionTarget=True/TerminationByKubelet`
(pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go). Nothing deletes those
objects afterwards (kubernetes#98012, #122122): they sit on the node for good.

Once the node is Ready after boot, the agent deletes its own node's pods left so by
an earlier boot's shutdown (the condition's time is before this boot began: the later of
the kernel's btime and systemd's UserspaceTimestamp, both on the node's clock) whose
controller has replaced them: ReplicaSet-owned pods, once the ReplicaSet has as many
live pods as it wants. StatefulSet and DaemonSet controllers
already delete their own failed pods. Job pods (their history and logs) and bare pods
(the failed object is their only record) stay unless `leftovers.jobs` /
`leftovers.bare` say otherwise.

One owner per kind of pod: this module owns exactly the pods the shutdown killed
(reason `Terminated` with that condition). Pods the kubelet refused at admission
while shutting down (reason `NodeShutdown`) never ran; they are the rejection
loop's (nodeagent.rejection), like every other admission rejection. The two tests
are disjoint by reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from urllib.parse import quote

from nodeagent import metrics
from nodeagent.config import LeftoversConfig
from nodeagent.drain import podfilter
from nodeagent.drain.podfilter import controller_of
from nodeagent.kube.client import (
    JSON,
    READ_TIMEOUT,
    ApiError,
    Kube,
    KubeError,
    api_stamp,
    api_time,
    pods_path,
)
from nodeagent.kube.watch import Reflector
from nodeagent.report.events import EventRecorder

log = logging.getLogger(__name__)

SHUTDOWN_REASON = "Terminated"  # pod status reason (nodeShutdownReason)
EVENT_REASON = "ShutdownLeftoverDeleted"


class Verdict(Enum):
    DELETE = "delete"
    NOT_LEFTOVER = "not left by a node shutdown"
    THIS_BOOT = "killed by a shutdown of this boot"
    CONTROLLER_CLEANS = "its controller deletes its own failed pods"
    NOT_REPLACED = "its ReplicaSet has not replaced it (yet)"
    KEEP_JOB = "a Job's pod (leftovers.jobs is off)"
    KEEP_BARE = "a bare pod (leftovers.bare is off)"


def killed_at(pod: JSON) -> float | None:
    """When the kubelet's shutdown killed `pod`, or None if it did not."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed" or status.get("reason") != SHUTDOWN_REASON:
        return None
    cond = podfilter.kubelet_termination(pod)
    return None if cond is None else api_time(cond.get("lastTransitionTime"))


def replaced(replicaset: JSON | None, owner_uid: str) -> bool:
    """The ReplicaSet (the same object the pod names) runs as many live pods as it
    wants; its status counts only live pods, so a failed one is no longer among them."""
    if replicaset is None or replicaset["metadata"].get("uid") != owner_uid:
        return False
    status = replicaset.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(replicaset["metadata"]["generation"]):
        return False
    return int(status.get("replicas") or 0) >= int(replicaset["spec"].get("replicas", 1))


def verdict(
    pod: JSON, boot_time: float, cfg: LeftoversConfig, replicaset: JSON | None = None
) -> Verdict:
    """What to do with one of the node's pods after boot. `replicaset` is the pod's
    controller when that is a ReplicaSet (None if it could not be read)."""
    at = killed_at(pod)
    if at is None or pod["metadata"].get("deletionTimestamp"):
        return Verdict.NOT_LEFTOVER
    if at >= boot_time:
        return Verdict.THIS_BOOT
    owner = controller_of(pod)
    if owner is None:
        return Verdict.DELETE if cfg.bare else Verdict.KEEP_BARE
    if owner.get("kind") == "Job":
        return Verdict.DELETE if cfg.jobs else Verdict.KEEP_JOB
    if owner.get("kind") != "ReplicaSet":
        return Verdict.CONTROLLER_CLEANS
    return Verdict.DELETE if replaced(replicaset, str(owner.get("uid"))) else Verdict.NOT_REPLACED


def boot_time(stat: Path = Path("/proc/stat")) -> float:
    """When the kernel booted (its btime, on the clock the kubelet stamps with)."""
    for line in stat.read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError(f"no btime in {stat}")


def boot_began(kernel: float, userspace: float | None) -> float:
    """When this boot began: the later of the kernel's boot and systemd's start.

    On a host userspace starts just after the kernel, and nothing kills pods in between.
    In a container the kernel's btime is the host's, unchanged across container reboots,
    while systemd's start is the container's own boot. `userspace` None: unknown.
    """
    return kernel if userspace is None else max(kernel, userspace)


def this_boot(bus_address: str | None = None, stat: Path = Path("/proc/stat")) -> float:
    """:func:`boot_began` from /proc/stat and systemd over the system bus; btime alone
    (said once in the log) when systemd cannot be asked."""
    from nodeagent.host.systemd_manager import userspace_started

    try:
        userspace: float | None = userspace_started(bus_address)
    except Exception as exc:  # any bus failure leaves the kernel's time, which is safe
        log.warning(
            "cannot read systemd's UserspaceTimestamp (%s): this boot began at the kernel's "
            "btime (in a container that is the host's boot)",
            exc,
        )
        userspace = None
    return boot_began(boot_time(stat), userspace)


CONFLICT_RETRIES = 3  # judgements of one pod that keeps changing, then it is left


class Deleted(Enum):
    DONE = "done"
    GONE = "gone"  # deleted by someone else meanwhile
    CHANGED = "changed"  # changed since it was judged (409): judge it again


@dataclass
class Cleaned:
    pod: str
    verdict: Verdict


class LeftoverCleaner:
    """One pass over the node's pods after boot."""

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        cfg: LeftoversConfig,
        events: EventRecorder,
        boot: float,
        beat: Callable[[], None] = lambda: None,
        pods: Reflector | None = None,
    ) -> None:
        """`pods`: a watch of this node's pods shared with others (the daemon's): while
        it runs, the pass reads its mirror instead of listing."""
        self.kube = kube
        self.node_name = node_name
        self.cfg = cfg
        self.events = events
        self.boot = boot
        self.beat = beat
        self.pods = pods

    def run(self) -> list[Cleaned]:
        out = []
        for pod in self._pods():
            if killed_at(pod) is None:
                continue
            self.beat()
            ref = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            decided = self._settle(pod, ref)
            if decided is not None:
                log.info("shutdown leftover %s: %s", ref, decided.value)
                out.append(Cleaned(ref, decided))
        return out

    def _settle(self, pod: JSON, ref: str) -> Verdict | None:
        """Judge `pod` and delete it if that is the verdict; a pod that changed since it
        was judged (its controller or a status write moved it on: 409) is read again and
        judged again, a few times. None: gone, or still changing."""
        pod_uid = pod["metadata"]["uid"]
        for _ in range(CONFLICT_RETRIES):
            decided = verdict(pod, self.boot, self.cfg, self._replicaset(pod))
            if decided is not Verdict.DELETE:
                return decided
            outcome = self._delete(pod)
            if outcome is not Deleted.CHANGED:
                return decided if outcome is Deleted.DONE else None
            meta = pod["metadata"]
            try:
                pod = self.kube.get(pods_path(meta["namespace"], meta["name"]))
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise
            if pod["metadata"]["uid"] != pod_uid or killed_at(pod) is None:
                return None
        log.warning("shutdown leftover %s kept changing while it was judged; left", ref)
        return None

    def _pods(self) -> list[JSON]:
        if self.pods is None or self.pods.stopped:  # one list costs less than a watch
            query = {"fieldSelector": f"spec.nodeName={self.node_name}"}
            return list(self.kube.request("GET", "/api/v1/pods", query=query)["items"])
        # A delete carries the pod's resourceVersion as judged: a mirror a moment behind
        # the API server deletes nothing it should not.
        with self.pods.hold():
            if not self.pods.wait_synced(READ_TIMEOUT):
                why = self.pods.stats.last_error or "no answer yet"
                raise KubeError(f"the node's pod watch has not listed: {why}")
            return self.pods.snapshot()

    def _replicaset(self, pod: JSON) -> JSON | None:
        owner = controller_of(pod)
        if not owner or owner.get("kind") != "ReplicaSet":
            return None
        ns = quote(pod["metadata"]["namespace"])
        try:
            return self.kube.get(
                f"/apis/apps/v1/namespaces/{ns}/replicasets/{quote(owner['name'])}"
            )
        except ApiError as exc:
            if exc.status == 403:
                log.warning("cannot read ReplicaSets (%s): shutdown leftovers stay", exc)
            return None

    def _delete(self, pod: JSON) -> Deleted:
        meta = pod["metadata"]
        # The pod as judged: a pod changed since (or another under the same name) stays.
        body = {"preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}}
        try:
            self.kube.delete(pods_path(meta["namespace"], meta["name"]), body)
        except ApiError as exc:
            if exc.status == 404:
                return Deleted.GONE
            if exc.status == 409:
                return Deleted.CHANGED
            raise
        owner = controller_of(pod)
        kind = str(owner["kind"]) if owner else "none"
        metrics.LEFTOVERS_DELETED.labels(kind).inc()
        at = api_stamp(killed_at(pod) or 0)
        whose = {
            "ReplicaSet": f"ReplicaSet {owner and owner['name']} has replaced it",
            "Job": f"a pod of Job {owner and owner['name']} (leftovers.jobs)",
        }.get(kind, "a bare pod (leftovers.bare)")
        self.events.pod(
            pod,
            EVENT_REASON,
            f"Deleted after boot: the kubelet's node shutdown left it Failed at {at}; {whose}",
        )
        return Deleted.DONE
