"""The one place the agent's decisions touch the node: cordon, uncordon, drain.

`FenceExecutor.apply` carries out one `Decision` (see nodeagent/fence/decision.py) within
a `Context`, sends the Event and reports the condition the decision names, and records a
drain's result. Nothing else in the daemon cordons, uncordons or starts a drain, and
nothing else writes the fence: a drain is kubectl's two steps (RunCordonOrUncordon, then
RunNodeDrain), `cordon_then_drain`, which `nodeagent drain` runs too.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from nodeagent import metrics
from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure.lateresult import LateResult, Unrecorded, overlay
from nodeagent.departure.redrain import drained_before, said
from nodeagent.departure.waits import wait_for_detach, wait_for_other_drain
from nodeagent.drain.engine import Drain, DrainOptions, DrainResult
from nodeagent.drain.phases import Phase
from nodeagent.fence import marker
from nodeagent.fence.decision import Decision
from nodeagent.fence.others import Others, stale_hold
from nodeagent.fence.refence import CONTESTED_AFTER, Refences, contested_message, last_writer
from nodeagent.fence.warning import marker_notes
from nodeagent.kube.client import JSON, ApiError, Kube, KubeError
from nodeagent.kube.watch import Reflector
from nodeagent.report import conditions
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import WARNING, EventRecorder
from nodeagent.types import DrainOutcome, Milestone, Reason, Step, milestone

if TYPE_CHECKING:
    # Only the daemon hands a budget in; `nodeagent drain` keeps logind's modules unloaded.
    from nodeagent.departure.budget import Budget

log = logging.getLogger(__name__)

# The API server names the agent's writes after its User-Agent up to the "/"
# (kube/transport.py): the agent's name.
FIELD_MANAGER = marker.AGENT
NODE_CHANGED_RETRIES = 3  # reads of a Node that keeps changing under a cordon, then give up
# Outcomes that say nothing about the node: no drain result is recorded for them.
UNRECORDED = (DrainOutcome.CANCELLED, DrainOutcome.DRY_RUN)


class Fenced(Enum):
    """What a cordon write left on the Node, and so where a drain's result is recorded."""

    CORDONED = "cordoned"  # the agent's cordon and marker, new: the Event `Cordoned`
    REASONED = "reasoned"  # the agent's cordon stood: its marker rewritten for this reason
    RECORDED = "recorded"  # someone else's cordon, the agent's drain record beside it
    # Left as is: the agent's marker of this boot (a shutdown going down), or its record
    # for this reason beside someone else's cordon where no drain follows.
    KEPT = "kept"


OURS = (Fenced.CORDONED, Fenced.REASONED)  # the cordon stands by the agent's write


def drain_options(cfg: Config, reason: Reason, budget: Budget, now: float) -> DrainOptions:
    """How the agent drains for `reason` from `now`, inside `budget`.

    A shutdown's drain leaves room to finish inside logind's delay, and forces by the
    shutdown policy (the kubelet kills what is left anyway); so does a warning's drain cut
    by the cloud's deadline. An evacuation, or a warning with time to spare, forces by
    the drain's own setting and keeps each pod's own grace.
    """
    seconds = budget.drain_seconds(now)
    if reason.while_up and not budget.final:
        return DrainOptions(
            reason=reason,
            deadline=seconds,
            do_not_disrupt_ceiling=cfg.drain.do_not_disrupt_ceiling,
            force_after_deadline=cfg.drain.force_after_deadline,
            concurrency=cfg.drain.concurrency,
            finished_pods=cfg.drain.finished_pods,
            finish_grace=budget.finish_grace,
        )
    return DrainOptions(
        reason=reason,
        deadline=seconds,
        do_not_disrupt_ceiling=min(cfg.drain.do_not_disrupt_ceiling, seconds / 2),
        force_after_deadline=cfg.shutdown.force_after_deadline,
        force_grace_seconds=1,
        concurrency=cfg.drain.concurrency,
        kubelet_kills=budget.kubelet_kills,
        finished_pods=cfg.drain.finished_pods,
        finish_grace=budget.finish_grace,
        cut_grace=budget.final,
    )


def cordon_then_drain(
    drain: Drain,
    node: JSON | None = None,
    keep: Collection[str] = (),
    ctx: Context | None = None,
    cordoned: Callable[[], None] = lambda: None,
    detaching: Callable[[Sequence[str]], None] | None = None,
    notes: marker.Notes | None = None,
    taint: bool = True,
    settle: Callable[[Drain], None] | None = None,
) -> DrainResult:
    """Cordon with the marker, then drain, in the drain's time: the cordon waits for the
    drain's pod watch to list (a drain that cannot list changes nothing), and the drain
    plans from the pods the watch shows once the cordon is answered. `keep`: the agent's
    markers of this boot left as they are; `cordoned` is called once the cordon stands.
    Then, still inside the drain's deadline, wait_for_detach; `detaching` hears the
    volumes it still waits for. `notes`: marker keys written with the cordon (a warning's);
    `taint`: the agent's taint goes on with it (marker.cordon). `settle`: called once the
    cordon stands, before the plan (another actor's drain waited for).

    `node` is the Node the caller decided on: when it changed since (the cordon's
    resourceVersion precondition), marker.NodeChanged is raised, for the caller to read
    it again and decide again. Without `node` it is read here first (a missing node or a
    forbidden read fails before anything starts), and read again on a change.
    """
    decided = node is not None and "spec" in node
    phases = drain.result.phases
    if node is None or not decided:  # not observed yet: nothing was decided on it
        until = ctx.deadline if ctx is not None else math.inf
        with phases.timed(Phase.NODE):
            node = marker.get_node(
                drain.kube.bounded(until) if until < math.inf else drain.kube, drain.node_name
            )
    with drain.started(ctx) as kube:
        if drain.cancelled:
            return drain.evict(node, cordoned=False)
        with phases.timed(Phase.CORDON):
            how = Fencing(keep, notes, taint)
            if decided:
                fenced = _cordon_for_drain(drain, kube, node, how)
            else:
                node, fenced = _cordon_read_again(drain, kube, node, how)
        cordoned()
        if settle is not None:
            settle(drain)
        before = drain.watched_pods()  # what the drain plans from: their volumes
        result = _evict(drain, node, fenced, before)
        if fenced is not Fenced.KEPT and result.outcome not in UNRECORDED:
            with phases.timed(Phase.RESULT):
                _record_result(kube, drain, node)
    if result.outcome not in UNRECORDED:
        with phases.timed(Phase.DETACH):
            result.detach = wait_for_detach(drain, node, before, ctx, detaching)
    return result


def _record_result(kube: Kube, drain: Drain, node: JSON) -> None:
    """The drain's result on the marker; when the API server does not answer (or is too
    busy to), `result.unrecorded` says so, for the executor to write it later."""
    result = drain.result
    try:
        uid = node["metadata"].get("uid", "")
        marker.record_result(kube, drain.node_name, result.outcome, uid)
    except ApiError as exc:
        if exc.status in (404, 409):  # the Node deleted: said once (worker)
            return
        log.warning("could not record drain result: %s", exc)
        if exc.status == 429 or exc.status >= 500:
            result.unrecorded = str(exc)
    except KubeError as exc:  # unreachable, or no time left for it
        log.warning("could not record drain result: %s", exc)
        result.unrecorded = str(exc)


@dataclass(frozen=True)
class Fencing:
    """What a drain's cordon writes beside its reason: the agent's markers of this boot
    left as they are (`keep`), the warning's marker keys (`notes`), and whether the agent's
    taint goes on with it (`taint`, marker.cordon)."""

    keep: Collection[str] = ()
    notes: marker.Notes | None = None
    taint: bool = True


def _cordon_read_again(drain: Drain, kube: Kube, node: JSON, how: Fencing) -> tuple[JSON, Fenced]:
    """Cordon `node`, read again while it changes under the write (nothing to decide)."""
    for _ in range(NODE_CHANGED_RETRIES):
        try:
            return node, _cordon_for_drain(drain, kube, node, how)
        except marker.NodeChanged:
            node = marker.get_node(kube, drain.node_name)
    return node, _cordon_for_drain(drain, kube, node, how)


def _cordon_for_drain(drain: Drain, kube: Kube, node: JSON, how: Fencing) -> Fenced:
    reason = drain.opts.reason
    fenced = fence(kube, node, reason, how, drain=True)
    if fenced is Fenced.CORDONED:
        drain.progress(f"cordoned node {drain.node_name} (reason {reason})")
        if drain.events:
            drain.events.node(node, "Cordoned", f"Cordoned by nodeagent ({reason})")
    elif fenced is Fenced.REASONED:
        was = marker.NodeFence.of(node).reason
        drain.progress(f"node {drain.node_name} stays cordoned, now for {reason} (was {was})")
    elif fenced is Fenced.RECORDED:
        drain.progress(f"node {drain.node_name} was already cordoned by someone else")
    return fenced


def fence(kube: Kube, node: JSON, reason: str, how: Fencing, *, drain: bool) -> Fenced:
    """The agent's cordon for `reason` on `node` (marker.cordon), or, where someone else
    cordoned it, its record beside their cordon (marker.record_drain: the agent's taint
    with it, so its fence stands when they lift theirs). `drain`: a drain follows, so a
    record for this very reason is written anew (its result is to come); a cordon alone
    leaves such a record as it is."""
    standing = marker.NodeFence.of(node)
    if marker.cordon(kube, node, reason, how.keep, how.notes, taint=how.taint):
        cordoned(reason)
        return Fenced.REASONED if standing.cordoned_by_agent else Fenced.CORDONED
    if not standing.cordoned_by_other or (standing.reason == reason and not drain):
        return Fenced.KEPT
    marker.record_drain(kube, node, reason, how.notes, taint=how.taint)
    return Fenced.RECORDED


def _evict(drain: Drain, node: JSON, fenced: Fenced, pods: Sequence[JSON]) -> DrainResult:
    """The drain's evictions, on `node` as read before its cordon. Where an earlier drain
    of the agent's emptied the node and nothing is to move (redrain.drained_before), one
    Event says so in place of DrainStarted and Drained (redrain.said); the drain still
    runs, muted, so a pod bound in the moment since the look is moved too (that one Event
    counts it; its own pod Events are not said)."""
    was = marker.NodeFence.of(node)
    before = drained_before(was, pods, drain.opts.finished_pods)
    events = drain.events
    if not before or events is None:
        return drain.evict(node, fenced in OURS)
    drain.events = None  # said as one, below
    try:
        result = drain.evict(node, fenced in OURS)
    finally:
        drain.events = events
    one = said(before, was.started_at, drain.opts.reason, result)
    if one is not None:
        events.node(node, one.reason, one.message, one.kind)
        drain.progress(one.message)
    return result


class AutoscalerHold:
    """While the drain waits for its volumes to detach on a node the Cluster Autoscaler is
    removing (`who`, its taint), its delay-deletion annotation holds the VM's deletion
    (the autoscaler waits while any is there, up to --node-deletion-delay-timeout); it goes
    when the wait ends, however it ends. `guard`: the executor's, held across each write
    and the after-start clean-up (`FenceExecutor.release_stale_hold`)."""

    def __init__(
        self, kube: Kube, name: str, who: str, guard: threading.Lock | None = None
    ) -> None:
        self.kube, self.name, self.who = kube, name, who
        self.guard = guard or threading.Lock()
        self.held = False

    def hold(self, why: str) -> None:
        if not self.who or self.held:
            return
        try:
            with self.guard:
                marker.hold_deletion(self.kube, self.name, why)
                self.held = True
            log.info("holding %s's deletion while %s", self.who, why)
        except KubeError as exc:
            log.warning("could not hold the autoscaler's deletion: %s", exc)

    def release(self) -> None:
        if not self.held:
            return
        try:
            with self.guard:
                marker.hold_deletion(self.kube, self.name, None)
                self.held = False
        except KubeError as exc:
            log.warning("could not release the autoscaler's deletion: %s", exc)


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
        refences: Refences | None = None,
        may_taint: bool = True,
    ) -> None:
        """`may_taint`: the identity may change its Node's taints (not the kubelet's:
        NodeRestriction refuses it); without, the fence is the cordon alone."""
        self.cfg = cfg
        self.kube = kube
        self.events = events
        self.report = report
        self.progress = progress
        self.pods = pods  # the daemon's one watch of the node's pods
        self.refences = refences if refences is not None else Refences()
        self.may_taint = may_taint
        # The delay-deletion annotation's one writer: the running drain's hold, if any.
        self._holds = threading.Lock()
        self._hold: AutoscalerHold | None = None
        # A drain's result the API server did not take, written when it answers again.
        self.late = LateResult(kube, self._write_late)

    def apply(
        self, decision: Decision, node: JSON, ctx: Context, budget: Budget | None = None
    ) -> DrainResult | None:
        """Carry out `decision` on `node` (as last observed); the drain's result for DRAIN,
        which runs inside `budget`. Every request ends by the context's deadline, and a
        cancel stops a drain promptly. Raises marker.NodeChanged when a cordon finds the
        Node changed since `node` was read: decide again on the Node as it is."""
        kube = self.kube if ctx.deadline == math.inf else self.kube.bounded(ctx.deadline)
        if decision.step in (Step.CORDON, Step.UNCORDON):
            self.late.forget()  # a result kept belongs to the fence this replaces
        if decision.step in (Step.CORDON, Step.UNTAINT, Step.FORGET) and "spec" not in node:
            node = marker.get_node(kube, self.cfg.node_name)  # not observed yet
        if decision.step is Step.CORDON:
            self._cordon(kube, decision, node)
            return None
        if decision.step is Step.UNCORDON:
            self._uncordon(kube, decision, node)
            return None
        if decision.step is Step.REFENCE:
            self.refence(kube, decision, node)
            return None
        if decision.step is Step.UNTAINT:
            marker.untaint(kube, node)
            log.info("fence: %s; taint %s removed", decision.why, marker.TAINT)
            return None
        if decision.step is Step.FORGET:
            marker.forget_departed(kube, node)
            return None
        if decision.step is Step.DRAIN:
            assert budget is not None, "a drain runs in a budget"
            return self._drain(decision, node, ctx, budget)
        if decision.condition is not None:
            self.report.set(decision.condition)
        return None

    def refence(self, kube: Kube, decision: Decision, node: JSON) -> JSON:
        """Put back what someone else undid of the agent's fence (decision.refence), in
        one write guarded by `node`'s resourceVersion (marker.NodeChanged when it moved
        on), and say what changed and who last wrote the Node: a Warning Event `Refenced`,
        and `RefenceContested` once when the cordon was put back too often. Returns the
        Node as written."""
        put_back = decision.refence
        assert put_back is not None, "a refence says what to put back"
        written = marker.refence(
            kube,
            node,
            cordon=put_back.cordon,
            taint=put_back.taint,
            label=put_back.label,
            reason=put_back.reason,
            adopt=put_back.adopt,
        )
        # The watch's copies carry no managedFields (kube/watch.py); the written object does.
        writer = last_writer(written, besides=FIELD_MANAGER)
        message = put_back.message(writer)
        log.warning("fence: %s", message)
        self.events.node(node, "Refenced", message, WARNING)
        if put_back.cordon:
            started = marker.NodeFence.of(node).started_at
            if self.refences.count(started, time.monotonic()) == CONTESTED_AFTER:
                contested = contested_message(writer, self.may_taint)
                log.warning("fence: %s", contested)
                self.events.node(node, "RefenceContested", contested, WARNING)
        return written

    def deletion_hold(self, node: JSON) -> AutoscalerHold:
        """A drain's hold on the autoscaler's deletion of `node` (nothing where it is not
        removing it), known to the after-start clean-up, which leaves what it holds."""
        who = Others.of(node).autoscaler_removing
        self._hold = AutoscalerHold(self.kube, self.cfg.node_name, who, self._holds)
        return self._hold

    def release_stale_hold(self, node: JSON) -> bool:
        """After start: the delay-deletion annotation on `node` (read from the API) that no
        drain of this agent holds is a killed agent's (one agent per node: its claim
        file), and goes; else the autoscaler waits its whole timeout for it. Returns
        whether it was removed."""
        with self._holds:
            left = stale_hold(node, self._hold is not None and self._hold.held)
            if not left:
                return False
            marker.hold_deletion(self.kube, self.cfg.node_name, None)
        log.info("removed the autoscaler's delay-deletion hold a stopped agent left (%s)", left)
        return True

    def as_recorded(self, node: JSON) -> JSON:
        """`node` with the drain result still to be written, where it applies: decided on
        as it will read, so a finished drain is not started again."""
        return overlay(node, self.late.pending)

    def _write_late(self, kube: Kube, late: Unrecorded) -> bool:
        """The result the API server did not take, on the Node read now, where it still
        applies (lateresult.py); a Node changed between the read and the write is read
        again."""
        for _ in range(NODE_CHANGED_RETRIES):
            node = marker.get_node(kube, self.cfg.node_name)
            if not late.applies(node):
                return False
            try:
                meta = node["metadata"]
                marker.record_result(
                    kube, self.cfg.node_name, late.outcome, late.uid, meta["resourceVersion"]
                )
                return True
            except ApiError as exc:
                if exc.status != 409:
                    raise
        raise KubeError(f"node {self.cfg.node_name} kept changing under the drain result")

    def record_boot(self, boot: str) -> None:
        """Note on the Node the boot the agent started in (after start, by the reconcile)."""
        marker.record_boot(self.kube, self.cfg.node_name, boot)

    def _cordon(self, kube: Kube, decision: Decision, node: JSON) -> None:
        assert decision.reason is not None
        how = Fencing(decision.keep, _notes(decision), self.may_taint)
        fenced = fence(kube, node, decision.reason, how, drain=False)
        if fenced is Fenced.CORDONED and decision.event:
            self.events.node(node, "Cordoned", decision.event)
        if decision.condition is not None:
            self.report.set(decision.condition)

    def _uncordon(self, kube: Kube, decision: Decision, node: JSON) -> None:
        changed = marker.uncordon(
            kube, self.cfg.node_name, only_reasons=decision.undo, started_at=decision.started_at
        )
        if changed:
            reason = marker.NodeFence.of(node).reason if "metadata" in node else ""
            milestone(log, Milestone.UNCORDONED, "uncordoned (%s)", reason, reason=reason)
        if changed and decision.event:
            self.events.node(node, "Uncordoned", decision.event)
        if decision.condition is not None:
            self.report.set(decision.condition)

    def _drain(self, decision: Decision, node: JSON, ctx: Context, budget: Budget) -> DrainResult:
        reason = decision.reason
        assert reason is not None
        drain = Drain(
            self.kube,
            self.cfg.node_name,
            drain_options(self.cfg, reason, budget, time.monotonic()),
            self.events,
            lambda m: self.progress(reason, m),
            pods=self.pods,
        )
        # Draining once the cordon stands: a cordon that finds the Node changed (the
        # decision was made on a stale one) reports nothing it did not do.
        what = describe(decision)
        other = decision.wait_for
        settle = (lambda d: wait_for_other_drain(d, other, reason)) if other else None
        hold = self.deletion_hold(node)
        try:
            result = cordon_then_drain(
                drain,
                node,
                decision.keep,
                ctx,
                lambda: self._cordoned(what),
                lambda volumes: self._detaching(reason, what, volumes, hold),
                _notes(decision),
                self.may_taint,
                settle,
            )
        finally:
            hold.release()
            self._hold = None
        if result.unrecorded:
            uid = node["metadata"].get("uid", "")
            self.late.keep(Unrecorded(reason, result.outcome, uid, time.time(), time.monotonic()))
        self._record(reason, what, result, budget)
        return result

    def _cordoned(self, what: str) -> None:
        """A drain's cordon stands: its marker replaced any whose result was kept."""
        self.late.forget()
        self.report.set(conditions.draining(what))

    def _detaching(
        self, reason: Reason, what: str, volumes: Sequence[str], hold: AutoscalerHold
    ) -> None:
        """The volumes the departure still waits for, in NodeAgentDrained (`status`), and
        in the autoscaler's delay-deletion annotation where it is removing the node."""
        if volumes:
            self.report.set(conditions.waiting_for_detach(what, list(volumes)))
            self.progress(reason, f"waiting for {len(volumes)} volume(s) to detach")
            hold.hold(f"{reason}: {len(volumes)} volume(s) detaching")

    def _record(self, reason: Reason, what: str, result: DrainResult, budget: Budget) -> None:
        milestone(
            log,
            Milestone.DRAIN_FINISHED,
            "drain for %s: %s in %.2fs (%s)%s",
            reason,
            result.outcome,
            result.seconds,
            result.phases.render(),
            f"; {result.late} pod(s) bound after it began, evicted too" if result.late else "",
            reason=reason,
            outcome=result.outcome,
            seconds=f"{result.seconds:.3f}",
            late=result.late,
        )
        metrics.DRAINS.labels(reason, result.outcome).inc()
        metrics.DRAIN_SECONDS.observe(result.seconds)
        if result.outcome is DrainOutcome.CANCELLED:
            return  # whoever cancelled it reports what follows
        self.report.set(outcome_condition(what, result))
        if not reason.while_up or budget.final:
            # Before logind or systemd go on and take the network.
            self.report.flush(max(0.1, min(2.0, budget.finish_until - time.monotonic())))


def describe(decision: Decision) -> str:
    """What a drain is for, in the condition: the reason, or the warning in full (a
    shutdown that carries the warning's notes drains for itself)."""
    if decision.warning is not None and decision.reason is Reason.WARNING:
        return decision.warning.describe()
    return str(decision.reason)


def _notes(decision: Decision) -> marker.Notes | None:
    return marker_notes(decision.warning) if decision.warning is not None else None


def cordoned(reason: str) -> None:
    """The agent's cordon write was answered."""
    milestone(log, Milestone.CORDONED, "cordoned (%s)", reason, reason=reason)


def kubelet_deletes_note(result: DrainResult) -> str:
    """The pods deleted past their PDBs, by name (a condition says who, not how many)."""
    pods = ", ".join(p.ref for p in result.deleted_for_kubelet)
    return (
        f"{len(result.deleted_for_kubelet)} pod(s) deleted past their PDBs, the kubelet's "
        f"graceful shutdown stopping them: {pods}"
    )


def outcome_condition(reason: str, result: DrainResult) -> conditions.Condition:
    """NodeAgentDrained for how a drain ended (and the wait for its volumes after it)."""
    waited = result.detach
    notes = [] if waited is None or waited.skipped else [waited.summary()]
    if result.deleted_for_kubelet:
        notes.insert(0, kubelet_deletes_note(result))
    note = "; ".join(notes)
    if result.outcome in (DrainOutcome.DRAINED, DrainOutcome.FORCED):
        if waited is not None and not waited.detached:
            return conditions.drained_volumes_attached(reason, result.seconds, note)
        return conditions.drained(reason, result.seconds, note)
    if result.blocked:  # timed-out or incomplete: name every pod left and why
        pods = [f"{p.ref} ({p.detail})" for p in result.blocked]
        return conditions.blocked(reason, result.blocking_pdbs, pods)
    return conditions.not_draining(f"Drain for {reason} {result.outcome}")
