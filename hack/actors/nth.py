"""aws-node-termination-handler in IMDS mode on one node (aws/aws-node-termination-handler,
tag v1.25.6):

- an event arrives: Event <kind reason> on the Node (cmd/node-termination-handler.go,
  processInterruptionEvent: "SpotInterruption", "ScheduledEvent", ...);
- the pre-drain task: Spot, taint aws-node-termination-handler/spot-itn=<event id> with
  --taint-node (pkg/monitor/spotitn/spot-itn-monitor.go setInterruptionTaint); a scheduled
  event, label aws-node-termination-handler/event-id, taint .../scheduled-maintenance, and,
  only if the node is not cordoned yet, labels .../action=UncordonAfterReboot and
  .../action-time (pkg/monitor/scheduledevent/scheduled-event-monitor.go
  uncordonAfterRebootPreDrain); labels by strategic merge patch, taints by Update retried
  on conflict (pkg/node/node.go addLabel, addTaint);
- CordonAndDrain (pkg/node/node.go): with --exclude-from-load-balancers the label
  node.kubernetes.io/exclude-from-external-load-balancers=aws-node-termination-handler,
  unless the key is there already; kubectl's cordon; Event PodEviction on every pod of
  the node; RunNodeDrain with Force, IgnoreAllDaemonSets (default true),
  DeleteEmptyDirData (default true), GracePeriodSeconds (-1), Timeout
  --node-termination-grace-period (120s), no retry delay, and its own pod filtered out;
  then Event CordonAndDrain (pkg/interruptionevent/draincordon/handler.go);
- with --enable-out-of-service-taint: node.kubernetes.io/out-of-service=nodeshutdown:NoExecute;
- a cancelled event (watchForCancellationEvents): uncordon, whoever cordoned; Event
  Uncordon; RemoveNTHLabels: JSON patch removals of event-id, action, action-time, then
  of the load-balancer label where its value is NOT NTH's (node.go
  removeLabelIfValueMatches returns early on a match); a removal of a missing label fails
  the patch and ends RemoveNTHLabels there; RemoveNTHTaints with --taint-node.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hack.actors import api
from hack.actors.kubectl import DrainHelper, PodDelete, Status, okay
from nodeagent.kube.client import JSON, ApiError, Kube, node_path

COMPONENT = "aws-node-termination-handler"  # pkg/observability/k8s-events.go EventSource
PREFIX = "aws-node-termination-handler/"
ACTION = PREFIX + "action"
ACTION_TIME = PREFIX + "action-time"
EVENT_ID = PREFIX + "event-id"
UNCORDON_AFTER_REBOOT = "UncordonAfterReboot"
EXCLUDE_LB = "node.kubernetes.io/exclude-from-external-load-balancers"
SPOT_ITN = PREFIX + "spot-itn"
SCHEDULED_MAINTENANCE = PREFIX + "scheduled-maintenance"
ASG_LIFECYCLE = PREFIX + "asg-lifecycle-termination"
REBALANCE = PREFIX + "rebalance-recommendation"
NTH_TAINTS = (SPOT_ITN, SCHEDULED_MAINTENANCE, ASG_LIFECYCLE, REBALANCE)
OUT_OF_SERVICE = {
    "key": "node.kubernetes.io/out-of-service",
    "value": "nodeshutdown",
    "effect": "NoExecute",
}
MAX_TAINT_VALUE = 63


@dataclass(frozen=True)
class Config:
    """pkg/config/config.go, the fields that change the writes, with their defaults."""

    taint_node: bool = False
    taint_effect: str = "NoSchedule"
    exclude_from_load_balancers: bool = False
    node_termination_grace_period: int = 120
    pod_termination_grace_period: int = -1
    ignore_daemon_sets: bool = True
    delete_local_data: bool = True
    cordon_only: bool = False
    enable_out_of_service_taint: bool = False
    pod_name: str = ""  # NTH's own pod, filtered out of its drain
    pod_namespace: str = ""


@dataclass
class NodeTerminationHandler:
    kube: Kube
    node: str
    config: Config = field(default_factory=Config)
    drainer: DrainHelper | None = None
    errors: list[str] = field(default_factory=list)  # what NTH would only log

    def event(self, type_: str, reason: str, message: str) -> None:
        node = api.get_node(self.kube, self.node)
        api.record_event(self.kube, node, "Node", type_, reason, message, COMPONENT)

    def helper(self) -> DrainHelper:
        """node.go getDrainHelper."""
        cfg = self.config

        def own_pod(pod: JSON) -> PodDelete:  # node.go filterPodForDeletion
            meta = pod["metadata"]
            if meta["name"] == cfg.pod_name and (
                meta["namespace"] == cfg.pod_namespace or not cfg.pod_namespace
            ):
                return PodDelete(pod, False, Status.SKIP)
            return okay(pod)

        return DrainHelper(
            self.kube,
            grace_period_seconds=cfg.pod_termination_grace_period,
            force=True,
            delete_emptydir_data=cfg.delete_local_data,
            ignore_all_daemonsets=cfg.ignore_daemon_sets,
            timeout=float(cfg.node_termination_grace_period),
            additional_filters=(own_pod,),
        )

    def add_label(self, key: str, value: str, skip_existing: bool) -> None:
        """node.go addLabel: strategic merge patch of one label."""
        node = api.get_node(self.kube, self.node)
        if skip_existing and key in api.labels_of(node):
            return
        self.kube.strategic_patch(node_path(self.node), {"metadata": {"labels": {key: value}}})

    def remove_label(self, key: str) -> None:
        """node.go removeLabel: a JSON patch remove (fails on a missing label)."""
        op = {"op": "remove", "path": f"/metadata/labels/{api.pointer(key)}"}
        api.json_patch(self.kube, node_path(self.node), [op])

    def add_taint(self, key: str, value: str, effect: str) -> None:
        """node.go addTaint: an Update adding the taint unless its key is there."""

        def add(n: JSON) -> bool:
            if api.has_taint(n, key):
                return False
            n.setdefault("spec", {})["taints"] = [
                *api.taints(n),
                {"key": key, "value": value, "effect": effect},
            ]
            return True

        api.update_node(self.kube, api.get_node(self.kube, self.node), add, interval=0.75)

    def remove_taint(self, key: str) -> None:
        """node.go removeTaint: an Update without taints of that key."""
        api.update_node(self.kube, api.get_node(self.kube, self.node), api.drop_taint(key))

    def spot_interruption(self, event_id: str, description: str = "Spot ITN received.") -> None:
        """A Spot interruption notice from IMDS, handled end to end."""
        self.event("Normal", "SpotInterruption", description)
        if self.config.taint_node:  # spot-itn-monitor.go setInterruptionTaint
            self.add_taint(SPOT_ITN, event_id[:MAX_TAINT_VALUE], self.config.taint_effect)
        self.drain_or_cordon(description)

    def scheduled_event(self, event_id: str, description: str = "system-reboot") -> None:
        """A scheduled maintenance event (e.g. system-reboot) from IMDS, handled end to end."""
        self.event("Normal", "ScheduledEvent", description)
        self.add_label(EVENT_ID, event_id, False)  # uncordonAfterRebootPreDrain
        if self.config.taint_node:
            self.add_taint(
                SCHEDULED_MAINTENANCE, event_id[:MAX_TAINT_VALUE], self.config.taint_effect
            )
        if not api.get_node(self.kube, self.node)["spec"].get("unschedulable"):
            self.add_label(ACTION, UNCORDON_AFTER_REBOOT, False)  # MarkForUncordonAfterReboot
            self.add_label(ACTION_TIME, str(int(time.time())), False)
        self.drain_or_cordon(description)

    def drain_or_cordon(self, description: str) -> bool:
        """draincordon/handler.go HandleEvent after the pre-drain task."""
        try:
            if self.config.cordon_only:
                self.helper().cordon_or_uncordon(api.get_node(self.kube, self.node), True)
                self.event("Normal", "Cordon", "Node successfully cordoned")
            else:
                self.cordon_and_drain()
                self.event("Normal", "CordonAndDrain", "Node successfully cordoned and drained")
        except Exception as exc:  # the handler records the error as an Event and goes on
            self.event(
                "Warning",
                "CordonAndDrainError",
                f"There was a problem while trying to cordon and drain the node: {exc}",
            )
            self.errors.append(str(exc))
            return False
        if self.config.enable_out_of_service_taint and not self.config.cordon_only:
            self.add_taint(OUT_OF_SERVICE["key"], OUT_OF_SERVICE["value"], OUT_OF_SERVICE["effect"])
        return True

    def cordon_and_drain(self) -> None:
        """node.go CordonAndDrain."""
        if self.config.exclude_from_load_balancers:  # MaybeMarkForExclusionFromLoadBalancers
            self.add_label(EXCLUDE_LB, COMPONENT, True)
        self.drainer = self.helper()
        self.drainer.cordon_or_uncordon(api.get_node(self.kube, self.node), True)
        for pod in api.list_pods(self.kube, self.node):
            ann = {"node": self.node, **api.labels_of(pod)}
            msg = f"Pod evicted due to node drain (node {self.node})"
            api.record_event(self.kube, pod, "Pod", "Normal", "PodEviction", msg, COMPONENT, ann)
        self.drainer.run_node_drain(self.node)

    def cancel(self) -> None:
        """cmd/node-termination-handler.go watchForCancellationEvents, the last active event
        cancelled: uncordon (no check of who cordoned), Event Uncordon, RemoveNTHLabels,
        RemoveNTHTaints; failures only logged (kept in `errors`)."""
        DrainHelper(self.kube).cordon_or_uncordon(api.get_node(self.kube, self.node), False)
        self.event("Normal", "Uncordon", "Node successfully uncordoned")
        try:
            self.remove_nth_labels()
        except ApiError as exc:
            self.errors.append(f"There was an issue removing NTH labels from node: {exc}")
        if self.config.taint_node:
            for key in NTH_TAINTS:
                self.remove_taint(key)

    def remove_nth_labels(self) -> None:
        """node.go RemoveNTHLabels: each removal a JSON patch; the first that fails ends it.
        The load-balancer label goes only where its value is not NTH's (the check in
        removeLabelIfValueMatches returns early when the value matches)."""
        for key in (EVENT_ID, ACTION, ACTION_TIME):
            self.remove_label(key)
        value = api.labels_of(api.get_node(self.kube, self.node)).get(EXCLUDE_LB)
        if value is None or value == COMPONENT:
            return
        self.remove_label(EXCLUDE_LB)
