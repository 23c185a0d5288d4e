"""The other actors on this node, told from what each writes on the Node: pure, no I/O.

Each field is the evidence as one phrase for the log ("" when absent), read from the
actor's own code (docs/architecture.md, "Beside the other actors"):

- the Cluster Autoscaler's scale-down: its taint ToBeDeletedByClusterAutoscaler (value: the
  unix time it marked the node), written with its cordon before it drains and deletes;
- Karpenter's termination: a deletionTimestamp with its finalizer karpenter.sh/termination
  (it drains, then deletes the instance); its reboot (v1.15): the taint
  karpenter.sh/rebooting; its disruption candidate: the taint karpenter.sh/disrupted without
  a deletion (not a drain yet: it drains only once the Node is deleted);
- kured: its annotation weave.works/kured-reboot-in-progress (with --annotate-nodes);
- Cluster API: the join-time annotation cluster.x-k8s.io/machine (its drain writes nothing
  else on the Node, so its cordon and a person's look the same);
- the clouds' other interruption handlers: aws-node-termination-handler's labels and taints
  (prefix aws-node-termination-handler/, or the load-balancer label with its value), AKS's
  remediator taint.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.kube.client import JSON
from nodeagent.types import Handler

AUTOSCALER_TAINT = "ToBeDeletedByClusterAutoscaler"
KARPENTER_FINALIZER = "karpenter.sh/termination"
KARPENTER_REBOOTING = "karpenter.sh/rebooting"
KARPENTER_DISRUPTED = "karpenter.sh/disrupted"
KURED_IN_PROGRESS = "weave.works/kured-reboot-in-progress"
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
    def of(cls, node: JSON) -> Others:
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
                f"kured (annotation {KURED_IN_PROGRESS})" if KURED_IN_PROGRESS in ann else ""
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
