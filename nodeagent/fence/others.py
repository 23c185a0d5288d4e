"""The other actors on this node, told from what each writes on the Node: pure, no I/O.

Each field is the evidence as one phrase for the log ("" when absent), read from the
actor's own code (docs/architecture.md, "Beside the other actors"):

- the Cluster Autoscaler's scale-down: its taint ToBeDeletedByClusterAutoscaler (value: the
  unix time it marked the node), written with its cordon before it drains and deletes;
- Karpenter's termination: a deletionTimestamp with its finalizer karpenter.sh/termination
  (it drains, then deletes the instance); its reboot (v1.15): the taint
  karpenter.sh/rebooting; its disruption candidate: the taint karpenter.sh/disrupted without
  a deletion (not a drain yet: it drains only once the Node is deleted);
- kured: its annotation weave.works/kured-reboot-in-progress (with --annotate-nodes), or
  its lock naming this node on its own DaemonSet (`kured_holds`, where `[alongside]
  kured_daemonset` names it: the lock is not on the Node);
- Cluster API: the join-time annotation cluster.x-k8s.io/machine (its drain writes nothing
  else on the Node, so its cordon and a person's look the same);
- the clouds' other interruption handlers: aws-node-termination-handler's labels and taints
  (prefix aws-node-termination-handler/, or the load-balancer label with its value), AKS's
  remediator taint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from nodeagent.kube.client import JSON
from nodeagent.types import Handler

AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler"
KARPENTER_FINALIZER = "karpenter.sh/termination"
KARPENTER_REBOOTING = "karpenter.sh/rebooting"
KARPENTER_DISRUPTED = "karpenter.sh/disrupted"
KURED_IN_PROGRESS = "weave.works/kured-reboot-in-progress"
# kured's lock on its DaemonSet (cmd/kured/main.go KuredNodeLockAnnotation, tag 1.23.0).
KURED_LOCK = "weave.works/kured-node-lock"
CAPI_MACHINE = "cluster.x-k8s.io/machine"
NTH = "aws-node-termination-handler"
NTH_PREFIX = NTH + "/"
AKS_REMEDIATOR = "remediator.kubernetes.azure.com/unschedulable"
LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
# Their taints an operator may list in `[evacuate] taints` to have the agent drain ahead of
# them: then its drain is asked for, not a second one.
DRAINER_TAINTS = (AUTOSCALER_TAINT, KARPENTER_REBOOTING, KARPENTER_DISRUPTED)
# The annotation that holds the autoscaler's deletion while the agent waits for volumes
# (core/scaledown/actuation/delete_in_batch.go: any key with this prefix, up to
# --node-deletion-delay-timeout).
DELAY_DELETION = "delay-deletion.cluster-autoscaler.kubernetes.io/nodeagent"


@dataclass(frozen=True)
class Others:
    """Who else acts on this Node, each as its evidence ("" when not seen)."""

    autoscaler_removing: str = ""
    karpenter_terminating: str = ""
    karpenter_rebooting: str = ""
    karpenter_disrupting: str = ""
    kured_rebooting: str = ""
    capi_managed: str = ""
    nth: str = ""
    aks_remediator: str = ""

    @classmethod
    def of(cls, node: JSON, kured_lock: str = "") -> Others:
        """`kured_lock`: kured's lock naming this node, as `kured_holds` says it."""
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        taints = {t.get("key"): t for t in (node.get("spec") or {}).get("taints") or []}
        deleting = meta.get("deletionTimestamp") or ""
        finalizers = meta.get("finalizers") or []
        ca = taints.get(AUTOSCALER_TAINT)
        nth = [k for k in (*labels, *taints) if str(k).startswith(NTH_PREFIX)]
        return cls(
            autoscaler_removing=(
                f"cluster-autoscaler (taint {AUTOSCALER_TAINT}={ca.get('value', '')})" if ca else ""
            ),
            karpenter_terminating=(
                f"karpenter (deletionTimestamp {deleting}, finalizer {KARPENTER_FINALIZER})"
                if deleting and KARPENTER_FINALIZER in finalizers
                else ""
            ),
            karpenter_rebooting=(
                f"karpenter (taint {KARPENTER_REBOOTING})" if KARPENTER_REBOOTING in taints else ""
            ),
            karpenter_disrupting=(
                f"karpenter (taint {KARPENTER_DISRUPTED})"
                if KARPENTER_DISRUPTED in taints and not deleting
                else ""
            ),
            kured_rebooting=(
                f"kured (annotation {KURED_IN_PROGRESS})"
                if KURED_IN_PROGRESS in ann
                else kured_lock
            ),
            capi_managed=(
                f"cluster-api (Machine {ann[CAPI_MACHINE]})" if CAPI_MACHINE in ann else ""
            ),
            nth=(
                f"{NTH} ({nth[0]})"
                if nth
                else (f"{NTH} (label {LB_LABEL}={NTH})" if labels.get(LB_LABEL) == NTH else "")
            ),
            aks_remediator=f"aks (taint {AKS_REMEDIATOR})" if AKS_REMEDIATOR in taints else "",
        )

    @property
    def drainer(self) -> str:
        """Another actor draining this node now, to power it off or delete it: its
        evidence, or "". The agent does not drain a second time beside it."""
        return (
            self.autoscaler_removing
            or self.karpenter_terminating
            or self.karpenter_rebooting
            or self.kured_rebooting
        )

    def maybe_drainer(self, cordoned_by_other: bool) -> str:
        """`drainer`, or Cluster API's drain, which only its cordon shows (a person's looks
        the same): counted only where waiting costs nothing wrong, at a shutdown, which
        waits for it and then finishes what is left."""
        if self.drainer:
            return self.drainer
        return f"{self.capi_managed}, cordoned" if self.capi_managed and cordoned_by_other else ""

    @property
    def handler(self) -> str:
        """Another handler of the cloud's interruption notices on this node, or ""."""
        return self.nth or self.aks_remediator


def other_handler(configured: Handler, seen: str) -> str:
    """Which other handler of the cloud's notices acts here, with its evidence, or "":
    the configuration's, else (`auto`) what it was seen writing on this Node (`seen`,
    Others.handler, kept since start); never guessed."""
    if configured is Handler.NONE:
        return ""
    if configured is Handler.AUTO:
        return seen
    return f"{configured} (configuration [warnings] other_handler)"


def standing_aside(handler: str) -> str:
    """The startup line and `nodeagent status`'s, for `handler` ("" when none)."""
    if not handler:
        return "cloud warnings: nodeagent handles them (no other handler seen)"
    return (
        f"cloud warnings: {handler} handles them here; nodeagent stands aside (the "
        "OS-shutdown path stays on)"
    )


def kured_holds(lock: str, node: str, now: datetime, where: str = "") -> str:
    """kured's lock (`lock`, the annotation's text on its DaemonSet `where`) held for
    `node` at `now`, as evidence, or "" (none, another node's, expired, unreadable).

    pkg/daemonsetlock/daemonsetlock.go (tag 1.23.0): one holder {"nodeID", "metadata":
    {"unschedulable"}, "created", "TTL"} (--concurrency 1), or {"maxOwners", "locks": [...]}
    of them; a TTL (nanoseconds, 0: none) past `created` is no lock (ttlExpired)."""
    try:
        value = json.loads(lock) if lock else {}
    except ValueError:
        return ""
    holders = value.get("locks") if isinstance(value, dict) and "locks" in value else [value]
    for held in holders if isinstance(holders, list) else []:
        if not isinstance(held, dict) or held.get("nodeID") != node:
            continue
        created = _rfc3339(held.get("created"))
        ttl = held.get("TTL") or 0
        age_ns = (now - created).total_seconds() * 1e9 if created else 0.0
        if isinstance(ttl, int) and 0 < ttl <= age_ns:
            return ""  # ttlExpired
        since = f", since {held.get('created')}" if created else ""
        return f"kured (lock {KURED_LOCK} on DaemonSet {where or '?'}{since})"
    return ""


def _rfc3339(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else None


def stale_hold(node: JSON, holding: bool) -> str:
    """The agent's delay-deletion annotation on `node` that no wait of this agent holds
    (`holding`: a drain's AutoscalerHold has it now), as its value, else "". Left by an
    agent killed while its drain waited for volumes: the autoscaler would wait its full
    --node-deletion-delay-timeout for it."""
    ann = (node.get("metadata") or {}).get("annotations") or {}
    if holding or DELAY_DELETION not in ann:
        return ""
    return str(ann[DELAY_DELETION]) or "(empty)"
