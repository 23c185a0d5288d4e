"""The one place the agent's decisions touch the node: cordon, uncordon, drain.

`FenceExecutor.apply` carries out one `Decision` (see nodeagent/fence/decision.py) within
a `Context`, sends the Event and reports the condition the decision names, and records a
drain's result. Nothing else in the daemon cordons, uncordons or starts a drain.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.drain.engine import Drain, DrainOptions, DrainOutcome, DrainResult
from nodeagent.drain.podfilter import FinishedPods
from nodeagent.fence import marker
from nodeagent.fence.decision import Decision, Step
from nodeagent.fence.reason import GOING_DOWN, Reason
from nodeagent.host.logindconf import FINISH_GRACE
from nodeagent.kube.client import JSON, Kube
from nodeagent.kube.watch import Reflector
from nodeagent.report import conditions, metrics
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import EventRecorder

log = logging.getLogger(__name__)


def drain_options(cfg: Config, reason: Reason, budget: float) -> DrainOptions:
    """How the agent drains for `reason` with `budget` seconds left.

    A shutdown's drain is cut to fit its budget, leaves room to finish inside logind's
    delay, and forces by the shutdown policy (the kubelet kills what is left anyway). An
    evacuation uses the configured deadline and never takes over a shutdown's cordon.
    """
    if reason is Reason.EVACUATE:
        return DrainOptions(
            reason=reason,
            deadline=cfg.drain.deadline,
            do_not_disrupt_ceiling=cfg.drain.do_not_disrupt_ceiling,
            force_after_deadline=cfg.drain.force_after_deadline,
            concurrency=cfg.drain.concurrency,
            finished_pods=FinishedPods(cfg.drain.finished_pods),
            keep_marker_reasons=tuple(sorted(GOING_DOWN)),
        )
    return DrainOptions(
        reason=reason,
        deadline=budget,
        do_not_disrupt_ceiling=min(cfg.drain.do_not_disrupt_ceiling, budget / 2),
        force_after_deadline=cfg.shutdown.force_after_deadline,
        force_grace_seconds=1,
        concurrency=cfg.drain.concurrency,
        finished_pods=FinishedPods(cfg.drain.finished_pods),
        finish_grace=FINISH_GRACE,
    )


class FenceExecutor:
    """Applies decisions to one node."""

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        events: EventRecorder,
        report: ConditionWriter,
        progress: Callable[[Reason, str], None],
        pods: Reflector | None = None,
    ) -> None:
        self.cfg = cfg
        self.kube = kube
        self.events = events
        self.report = report
        self.progress = progress
        self.pods = pods  # the daemon's one watch of the node's pods

    def apply(self, decision: Decision, node: JSON, ctx: Context) -> DrainResult | None:
        """Carry out `decision` on `node` (as last observed); the drain's result for DRAIN.
        Every request ends by the context's deadline, and a cancel stops a drain promptly."""
        kube = self.kube if ctx.deadline == math.inf else self.kube.bounded(ctx.deadline)
        if decision.step is Step.CORDON:
            self._cordon(kube, decision, node)
            return None
        if decision.step is Step.UNCORDON:
            self._uncordon(kube, decision, node)
            return None
        if decision.step is Step.DRAIN:
            return self._drain(decision, ctx)
        if decision.condition is not None:
            self.report.set(decision.condition)
        return None

    def _cordon(self, kube: Kube, decision: Decision, node: JSON) -> None:
        assert decision.reason is not None
        if "spec" not in node:  # not observed yet
            node = marker.get_node(kube, self.cfg.node_name)
        changed = marker.cordon(kube, node, decision.reason, keep=decision.keep)
        if changed and decision.event:
            self.events.node(node, "Cordoned", decision.event)
        if decision.condition is not None:
            self.report.set(decision.condition)

    def _uncordon(self, kube: Kube, decision: Decision, node: JSON) -> None:
        changed = marker.uncordon(
            kube, self.cfg.node_name, only_reasons=decision.undo, started_at=decision.started_at
        )
        if changed and decision.event:
            self.events.node(node, "Uncordoned", decision.event)
        if decision.condition is not None:
            self.report.set(decision.condition)

    def _drain(self, decision: Decision, ctx: Context) -> DrainResult:
        reason = decision.reason
        assert reason is not None
        finish = 0.0 if reason is Reason.EVACUATE else FINISH_GRACE
        options = drain_options(self.cfg, reason, max(0.0, ctx.remaining() - finish))
        drain = Drain(
            self.kube,
            self.cfg.node_name,
            options,
            self.events,
            lambda m: self.progress(reason, m),
            pods=self.pods,
        )
        self.report.set(conditions.draining(reason))
        result = drain.run(ctx)
        self._record(reason, result, ctx)
        return result

    def _record(self, reason: Reason, result: DrainResult, ctx: Context) -> None:
        metrics.DRAINS.labels(reason, result.outcome).inc()
        metrics.DRAIN_SECONDS.observe(result.seconds)
        if result.outcome is DrainOutcome.CANCELLED:
            return  # whoever cancelled it reports what follows
        self.report.set(outcome_condition(reason, result))
        if reason is not Reason.EVACUATE:
            # Before logind or systemd go on and take the network.
            self.report.flush(max(0.1, min(2.0, ctx.deadline - time.monotonic())))


def outcome_condition(reason: str, result: DrainResult) -> conditions.Condition:
    """NodeAgentDrained for how a drain ended."""
    if result.outcome in (DrainOutcome.DRAINED, DrainOutcome.FORCED):
        return conditions.drained(reason, result.seconds)
    if result.blocked:  # timed-out or incomplete: name every pod left and why
        pods = [f"{p.ref} ({p.detail})" for p in result.blocked]
        return conditions.blocked(reason, result.blocking_pdbs, pods)
    return conditions.not_draining(f"Drain for {reason} {result.outcome}")
