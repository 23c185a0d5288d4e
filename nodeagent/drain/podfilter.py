"""Which pods a drain evicts, as small named predicates (after kubectl's pkg/drain).

Each filter looks at one pod and either lets it through (None) or says why the drain
leaves it alone. The rules match `kubectl drain --ignore-daemonsets
--delete-emptydir-data --force` (kubectl 1.35, staging/src/k8s.io/kubectl/pkg/drain/
filters.go): DaemonSet and mirror (static) pods stay; every other pod goes, and pods
with emptyDir data or no controller are reported.

Finished pods (Succeeded, Failed) are the one chosen difference, by default:
kubectl's unreplicated and local-storage filters let them go, so `kubectl drain`
deletes them; the agent keeps them (FinishedPods.KEEP). They run nothing and count
against no budget, so deleting them frees nothing for a reboot, while it loses a Job's
history and logs and a bare pod's only record of why it failed; the pod GC and Job
TTLs already own their lifetime. FinishedPods.DELETE does what kubectl does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nodeagent import objects
from nodeagent.kube.client import JSON
from nodeagent.types import FinishedPods

# The one reader of a condition by type is nodeagent/objects.py; named here for its callers.
find_condition = objects.condition

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MIRROR = "kubernetes.io/config.mirror"
CRITICAL_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
# Priorities at or above this are reserved for system-critical classes.
CRITICAL_PRIORITY = 2_000_000_000

Filter = Callable[[JSON], str | None]


def controller_of(pod: JSON) -> JSON | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def skip_daemonset(pod: JSON) -> str | None:
    ref = controller_of(pod)
    return "DaemonSet-managed" if ref and ref.get("kind") == "DaemonSet" else None


def skip_mirror(pod: JSON) -> str | None:
    return "static (mirror) pod" if MIRROR in (pod["metadata"].get("annotations") or {}) else None


def is_finished(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def kubelet_termination(pod: JSON) -> JSON | None:
    """The condition by which the kubelet says it killed `pod` itself (`DisruptionTarget`
    with reason `TerminationByKubelet`: a graceful node shutdown or a node-pressure
    eviction), or None. The kubelet posts it together with the Failed phase, once the
    pod's containers have stopped (mergePodStatus in its status manager holds it back
    until then), so it says how a pod ended, never that it is ending."""
    cond = find_condition(pod, "DisruptionTarget") or {}
    by_kubelet = (cond.get("status"), cond.get("reason")) == ("True", "TerminationByKubelet")
    return cond if by_kubelet else None


def skip_finished(pod: JSON) -> str | None:
    return f"finished ({pod['status']['phase']})" if is_finished(pod) else None


FILTERS: tuple[Filter, ...] = (skip_mirror, skip_daemonset, skip_finished)


def skip_reason(pod: JSON, finished: FinishedPods = FinishedPods.KEEP) -> str | None:
    """Why the drain leaves `pod` alone, or None if it must go."""
    for check in FILTERS:
        if check is skip_finished and finished is FinishedPods.DELETE:
            continue
        why = check(pod)
        if why:
            return why
    return None


def warnings(pod: JSON) -> list[str]:
    """Things worth telling the operator about a pod that is evicted anyway (nothing
    for a finished pod: its data and its process are already gone, as kubectl says)."""
    if is_finished(pod):
        return []
    notes = []
    if any("emptyDir" in v for v in pod["spec"].get("volumes") or []):
        notes.append("emptyDir data will be lost")
    if controller_of(pod) is None:
        notes.append("no controller: it will not come back")
    return notes


def is_critical(pod: JSON) -> bool:
    spec = pod["spec"]
    return (
        spec.get("priorityClassName") in CRITICAL_CLASSES
        or int(spec.get("priority") or 0) >= CRITICAL_PRIORITY
    )


def killed_at_once_by_kubelet(pod: JSON) -> bool:
    """Whether the kubelet's graceful node shutdown kills `pod` the moment logind announces
    the shutdown. It kills pods in groups by `spec.priority`, the lowest first, and its
    two-group default (shutdownGracePeriod, shutdownGracePeriodCriticalPods) puts every pod
    below the system-critical priority in the first group; critical ones follow once that
    group has stopped or its time is up (kubelet 1.35, pkg/kubelet/nodeshutdown:
    processShutdownEvent over groupByPriority)."""
    return not is_critical(pod)


def is_do_not_disrupt(pod: JSON) -> bool:
    return (pod["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true"


def priority(pod: JSON) -> int:
    return int(pod["spec"].get("priority") or 0)


@dataclass(frozen=True)
class Tier:
    """Pods evicted together; the next tier starts once these are gone."""

    name: str
    pods: tuple[JSON, ...]
    wait_for_exit: bool = False  # do-not-disrupt: give them the ceiling to finish alone


def tiers(pods: list[JSON]) -> list[Tier]:
    """Eviction order: ordinary pods by ascending priority, then do-not-disrupt pods,
    then system-critical pods (so logging, DNS and CNI outlive the workloads)."""
    critical = [p for p in pods if is_critical(p)]
    protected = [p for p in pods if not is_critical(p) and is_do_not_disrupt(p)]
    ordinary = [p for p in pods if not is_critical(p) and not is_do_not_disrupt(p)]
    out = [
        Tier(f"priority {prio}", tuple(p for p in ordinary if priority(p) == prio))
        for prio in sorted({priority(p) for p in ordinary})
    ]
    if protected:
        out.append(Tier("do-not-disrupt", tuple(protected), wait_for_exit=True))
    out += [
        Tier(f"critical priority {prio}", tuple(p for p in critical if priority(p) == prio))
        for prio in sorted({priority(p) for p in critical})
    ]
    return out
