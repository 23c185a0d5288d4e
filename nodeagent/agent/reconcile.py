"""After start: record the boot, release the autoscaler's hold a stopped agent left, and
undo the agent's shutdown cordon once the node can run pods again (Ready, the named
DaemonSets Ready, settled).

This loop only waits and reports; the undo itself is the departure worker's (a `settled`
signal), so it is ordered with every shutdown and evacuation, and the decision is the
same pure function's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext

from nodeagent import metrics
from nodeagent.agent.mirror import NodeMirror
from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure.worker import Departure
from nodeagent.fence import marker
from nodeagent.fence.decision import evacuation_asked
from nodeagent.kube.client import JSON, Kube, KubeError, api_time
from nodeagent.kube.watch import Reflector
from nodeagent.objects import condition
from nodeagent.objects import is_ready as ready
from nodeagent.report import conditions
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import WARNING, EventRecorder
from nodeagent.types import Step, marker_reason

log = logging.getLogger(__name__)


class AfterStart:
    """The `reconcile` loop body."""

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        mirror: NodeMirror,
        departure: Departure,
        events: EventRecorder,
        report: ConditionWriter,
        status: Callable[[str], None],
        pods: Reflector,
        boot: Callable[[], float],
    ) -> None:
        """`boot`: when this boot began (epoch seconds), asked once the wait begins."""
        self.pods = pods  # the daemon's one watch of the node's pods
        self.cfg = cfg
        self.kube = kube
        self.mirror = mirror
        self.departure = departure
        self.events = events
        self.report = report
        self.status = status
        self.beat: Callable[[], None] = lambda: None
        self.boot = boot

    def run(self, ctx: Context, beat: Callable[[], None]) -> None:
        self.beat = beat
        node = marker.get_node(self.kube, self.cfg.node_name)
        unclean = self._check_unclean_shutdown(node)
        # A stopped agent's hold on the autoscaler's deletion, from what the API says.
        self.departure.executor.release_stale_hold(node)
        node = self._wait_evacuation_over(node, ctx)
        state = marker.NodeFence.of(node)
        if ctx.cancelled or not _shutdown_marked(node):
            self.status("running; node needs no uncordon")
            return
        self.status(f"waiting for node Ready to undo the {state.reason} cordon")
        self._wait_node_ready(ctx, self.boot())
        if ctx.wait(self.cfg.uncordon.settle):
            return
        # Only the marker seen at start: a shutdown cordon taken since is not ours to undo.
        signal = self.departure.settled(state.started_at, unclean)
        while not signal.wait(time.monotonic() + 1.0):
            if ctx.cancelled:
                return
            self.beat()  # the worker may be finishing a drain first
        if signal.decision is None:
            raise KubeError("the cordon was not undone; trying again")
        if signal.decision.step is Step.UNCORDON:
            self.status(f"running; {state.reason} cordon undone")
        else:
            self.status(f"running; the cordon stays: {signal.decision.why}")

    def _wait_evacuation_over(self, node: JSON, ctx: Context) -> JSON:
        """While an evacuate taint holds a shutdown-cordoned node, the evacuation takes the
        cordon over (its marker then says evacuate); if the taint goes first, the cordon
        is the shutdown's again and this returns to undo it."""

        def held(n: JSON) -> bool:
            return _shutdown_marked(n) and evacuation_asked(n, self.cfg.evacuate)

        if held(node):
            self.status("running; node stays cordoned: it carries an evacuate taint")
        while held(node) and not ctx.cancelled:
            node = self.mirror.wait(lambda n: not held(n), 1.0) or node
            self.beat()
        return node

    def _wait_node_ready(self, ctx: Context, boot: float) -> None:
        wanted = self.cfg.uncordon.wait_for_daemonsets
        # The node's pods matter only when named DaemonSets must be Ready first.
        pods = self.pods

        def can_run_pods(node: JSON | None) -> bool:
            return ctx.cancelled or (
                node is not None
                and ready_in_this_boot(node, boot)
                and _daemonsets_ready(pods.snapshot(), wanted)
            )

        with pods.hold() if wanted else nullcontext():
            warn_at = time.monotonic() + self.cfg.uncordon.ready_timeout
            while not can_run_pods(self.mirror.get()):
                self.mirror.wait(can_run_pods, 1.0)
                self.beat()
                if time.monotonic() > warn_at:
                    # Taking pods before the node can run them is worse than waiting:
                    # say so once, loudly, and keep waiting.
                    warn_at = float("inf")
                    node = self.mirror.get()
                    self._not_ready_yet([node] if node else [], wanted)

    def _not_ready_yet(self, nodes: list[JSON], wanted: list[str]) -> None:
        waiting = (
            "the node to be Ready"
            if not any(ready(n) for n in nodes)
            else (f"Ready pods of {', '.join(wanted)}")
        )
        message = (
            f"Still waiting for {waiting} after {self.cfg.uncordon.ready_timeout:.0f}s; "
            "the node stays cordoned until then"
        )
        log.warning("%s", message)
        self.status(message)
        if nodes:
            self.events.node(nodes[0], "UncordonDelayed", message, WARNING)

    def _check_unclean_shutdown(self, node: JSON) -> bool:
        """A new boot without a drain record for the last one is a departure nobody drained."""
        current = marker.boot_id(node)
        ann = node["metadata"].get("annotations") or {}
        previous = ann.get(marker.LAST_BOOT_ID, "")
        state = marker.NodeFence.of(node)
        unclean = False
        if previous and current and previous != current:
            # The agent's marker, or its record of a drain under a person's cordon.
            drained = state.boot_id == previous and state.result
            if not drained:
                unclean = True
                metrics.PREVIOUS_BOOT_UNCLEAN.set(1)
                self.events.node(
                    node,
                    "UncleanShutdown",
                    f"Boot {previous} ended without a drain by nodeagent",
                    WARNING,
                )
                self.report.set(conditions.unclean_shutdown(previous))
                log.warning("previous boot %s ended without a drain", previous)
        if current and previous != current:
            self.departure.executor.record_boot(current)
        return unclean


def ready_in_this_boot(node: JSON, boot: float) -> bool:
    """Ready, by a heartbeat the kubelet wrote since `boot` (epoch seconds, this node's
    clock, as the kubelet's).

    A stopped kubelet's Ready stays on the Node for the node controller's grace period
    (40 s by default): a fast reboot or a soft-reboot (the same kernel and boot ID) brings
    the agent back inside it. A kubelet's first status after it starts is always written,
    so the kubelet of this boot is seen within its first sync, however long its later
    reports wait (nodeStatusReportFrequency, 5 minutes). Heartbeats carry whole seconds:
    `boot` is rounded down, and the last boot's kubelet stopped seconds before it.
    """
    beat = api_time((condition(node, "Ready") or {}).get("lastHeartbeatTime"))
    return ready(node) and beat is not None and beat >= int(boot)


def _shutdown_marked(node: JSON) -> bool:
    state = marker.NodeFence.of(node)
    reason = marker_reason(state.reason)
    return state.marked and reason is not None and reason.shutdown


def _daemonsets_ready(pods: list[JSON], wanted: list[str]) -> bool:
    """Each named DaemonSet ("namespace/name") has a Ready pod on this node."""
    for item in wanted:
        ns, _, name = item.partition("/")
        if not any(_pod_of_daemonset(p, ns, name) and ready(p) for p in pods):
            return False
    return True


def _pod_of_daemonset(pod: JSON, namespace: str, name: str) -> bool:
    refs = pod["metadata"].get("ownerReferences") or []
    return pod["metadata"]["namespace"] == namespace and any(
        r.get("kind") == "DaemonSet" and r.get("name") == name for r in refs
    )
