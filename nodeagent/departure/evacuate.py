"""The evacuate taint: level-triggered from the observed Node, never from memory.

While the Node carries one of the configured taint keys (any effect), the policy
applies: `Ignore` does nothing, `NoSchedule` cordons, `Evacuate` cordons and drains.
When the taint goes, the agent undoes what it did: it uncordons only a cordon whose
marker says `drain-reason: evacuate`, so a person's cordon and a shutdown cordon stay.

Because every decision is taken from the Node as it is now, an agent restarted in
the middle of an evacuation finishes it, and a taint removed while the agent was down
is undone when it comes back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum

from nodeagent.config import Config, EvacuateConfig
from nodeagent.drain.engine import Drain, DrainOptions, DrainResult
from nodeagent.drain.podfilter import FinishedPods
from nodeagent.fence import marker as fence
from nodeagent.kube.client import JSON, Kube, KubeError
from nodeagent.report import conditions
from nodeagent.report.events import EventRecorder

log = logging.getLogger(__name__)

REASON = "evacuate"
RETRY_BLOCKED = 30.0  # seconds between drains of a node whose drain hit its deadline


class Action(StrEnum):
    NONE = "none"
    CORDON = "cordon"
    DRAIN = "drain"
    UNDO = "undo"


def evacuate_taint(node: JSON, keys: list[str]) -> str:
    """The first configured evacuate taint key on the node, or ''."""
    for taint in node["spec"].get("taints") or []:
        if taint.get("key") in keys:
            return str(taint["key"])
    return ""


def requested(node: JSON, cfg: EvacuateConfig) -> bool:
    """The node carries an evacuate taint whose policy does something."""
    return cfg.policy != "Ignore" and bool(evacuate_taint(node, cfg.taints))


def decide(node: JSON, cfg: EvacuateConfig) -> Action:
    """What the Node as observed asks of the agent."""
    state = fence.NodeFence.of(node)
    if not evacuate_taint(node, cfg.taints):
        return Action.UNDO if state.marked and state.reason == REASON else Action.NONE
    if cfg.policy == "Ignore" or (state.cordoned_by_other and cfg.policy == "NoSchedule"):
        return Action.NONE
    ours = state.cordoned_by_agent and state.reason == REASON
    if cfg.policy == "NoSchedule":
        return Action.NONE if ours else Action.CORDON
    if ours and state.result in ("drained", "forced"):
        return Action.NONE
    return Action.DRAIN


class Evacuator:
    """Acts on the latest observed Node on its own thread; `observe` never blocks.

    A drain in progress is cancelled as soon as a Node without the taint is observed.
    `paused` (a shutdown owns the node) stops it from acting at all.
    """

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        events: EventRecorder,
        report: conditions.ConditionWriter,
        beat: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.kube = kube
        self.events = events
        self.report = report
        self.beat = beat
        self._latest: JSON | None = None
        self._seen: JSON | None = None
        self._wake = threading.Condition()
        self._drain: Drain | None = None
        self._paused = False
        self._retry_at = 0.0
        self._person_cordon_drained = False

    def observe(self, node: JSON) -> None:
        with self._wake:
            self._latest = self._seen = node
            self._wake.notify()
            drain = self._drain
        if drain and not requested(node, self.cfg.evacuate):
            log.info("evacuate taint removed during the drain; stopping it")
            drain.cancel()

    def pause(self) -> None:
        """A shutdown takes over the node: stop any evacuation drain now."""
        with self._wake:
            self._paused = True
            drain = self._drain
        if drain:
            drain.cancel()

    def resume(self) -> None:
        """The shutdown was cancelled: act on the last Node seen again."""
        with self._wake:
            self._paused = False
            self._latest = self._latest or self._seen
            self._wake.notify()

    def run(self, stop: threading.Event) -> None:
        """Loop body: act on each newly observed Node until `stop`."""
        with self._wake:
            # After a restart (the last drain raised), act again on the last Node seen.
            self._latest = self._latest or self._seen
        while not stop.is_set():
            with self._wake:
                if self._latest is None or self._paused:
                    self._wake.wait(5.0)
                    node = None
                else:
                    node, self._latest = self._latest, None
            self.beat()
            if node is None:
                if self._retry_at and time.monotonic() >= self._retry_at:
                    self.observe(fence.get_node(self.kube, self.cfg.node_name))
                    self._retry_at = 0.0
                continue
            self._act(node)

    def _act(self, node: JSON) -> None:
        action = decide(node, self.cfg.evacuate)
        if action is Action.DRAIN and self._person_cordon_drained:
            return  # drained under a person's cordon: no marker records it, memory does
        if action is Action.DRAIN and time.monotonic() < self._retry_at:
            return  # the last drain hit its deadline; the retry timer comes back to it
        if action is not Action.NONE:
            taint = evacuate_taint(node, self.cfg.evacuate.taints)
            log.info(
                "evacuate: %s (taint %s, policy %s)", action, taint or "-", self.cfg.evacuate.policy
            )
        if not fence.NodeFence.of(node).cordoned_by_other:
            self._person_cordon_drained = False  # that person's cordon is gone
        if action is Action.CORDON:
            if fence.cordon(self.kube, node, REASON, keep=fence.GOING_DOWN):
                self.events.node(node, "Cordoned", "Cordoned by nodeagent (evacuate taint)")
        elif action is Action.DRAIN:
            # Our own writes (cordon, result) may not have reached the watch yet: decide
            # on the Node as the API has it now before starting a drain.
            if decide(fence.get_node(self.kube, self.cfg.node_name), self.cfg.evacuate) is action:
                self._evacuate()
        elif action is Action.UNDO:
            self._undo(node)
        if not evacuate_taint(node, self.cfg.evacuate.taints):
            self._person_cordon_drained = False
            if action is Action.NONE and _reports_evacuation(node):
                self.report.set(conditions.not_draining("Evacuate taint removed"))

    def _evacuate(self) -> None:
        options = DrainOptions(
            reason=REASON,
            deadline=self.cfg.drain.deadline,
            do_not_disrupt_ceiling=self.cfg.drain.do_not_disrupt_ceiling,
            force_after_deadline=self.cfg.drain.force_after_deadline,
            concurrency=self.cfg.drain.concurrency,
            finished_pods=FinishedPods(self.cfg.drain.finished_pods),
            keep_marker_reasons=fence.GOING_DOWN,
        )
        drain = Drain(self.kube, self.cfg.node_name, options, self.events, self._progress)
        with self._wake:
            if self._paused:
                return
            self._drain = drain
        self.report.set(conditions.draining(REASON))
        try:
            result = drain.run()
        finally:
            with self._wake:
                self._drain = None
        self._report(result)
        if result.blocked:  # the deadline passed, or pods are held or stuck
            self._retry_at = time.monotonic() + RETRY_BLOCKED
        elif result.outcome in ("drained", "forced") and not result.cordoned:
            self._person_cordon_drained = True

    def _progress(self, message: str) -> None:
        self.beat()
        log.info("evacuate: %s", message)

    def _report(self, result: DrainResult) -> None:
        from nodeagent.report import metrics

        with self._wake:
            if self._paused:
                return  # a shutdown took over; its own drain reports

        metrics.DRAINS.labels(REASON, result.outcome).inc()
        metrics.DRAIN_SECONDS.observe(result.seconds)
        self.report.set(outcome_condition(REASON, result))

    def _undo(self, node: JSON) -> None:
        try:
            undone = fence.uncordon(self.kube, self.cfg.node_name, only_reasons=(REASON,))
        except KubeError as exc:
            log.warning("could not undo the evacuate cordon: %s", exc)
            raise
        if undone:
            self.events.node(node, "Uncordoned", "Evacuate taint removed; uncordoned")
        self.report.set(conditions.not_draining("Evacuate taint removed"))


def _reports_evacuation(node: JSON) -> bool:
    """The Node's NodeAgentDrained condition still describes an evacuation."""
    cond = conditions.find(node, conditions.DRAINED) or {}
    return cond.get("reason") != "NotDraining" and f"for {REASON}" in cond.get("message", "")


def outcome_condition(reason: str, result: DrainResult) -> conditions.Condition:
    """NodeAgentDrained for how a drain ended."""
    if result.outcome in ("drained", "forced"):
        return conditions.drained(reason, result.seconds)
    if result.blocked:  # timed-out or incomplete: name every pod left and why
        pods = [f"{p.ref} ({p.detail})" for p in result.blocked]
        return conditions.blocked(reason, result.blocking_pdbs, pods)
    return conditions.not_draining(f"Drain for {reason} {result.outcome}")
