"""How the departure's worker carries out one signal: observe, decide, hand to the executor.

Each occasion is observed the one way (`observed`, the only place an `Observed` is built),
decided by the pure `decide` and applied by the executor with its context registered as
the running one, so that a producer can pre-empt it. A cordon that finds the Node changed
since the decision (its resourceVersion precondition) reads it and decides again.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure import budget as budgets
from nodeagent.departure.budget import Budget
from nodeagent.departure.executor import NODE_CHANGED_RETRIES, FenceExecutor
from nodeagent.departure.signal import Running, Signal, State
from nodeagent.departure.warnings import CloudWarnings
from nodeagent.drain.engine import DrainResult
from nodeagent.fence import marker
from nodeagent.fence.decision import Decision, Observed, decide
from nodeagent.fence.others import Others, other_handler
from nodeagent.kube.client import JSON, Kube, KubeError
from nodeagent.types import FINISHED, Milestone, Notice, Occasion, Policy, Reason, Step, milestone

log = logging.getLogger(__name__)

RETRY_BLOCKED = 30.0  # seconds between drains of a node whose evacuation hit its deadline
REFENCE_BUDGET = 10.0  # seconds for putting the fence back (one write)
CANCEL_BUDGET = 60.0  # undoing the fence after a cancel (nothing is going down then)

Redecide = Callable[[JSON], Decision]  # the decision again, on the Node read anew


class Applier:
    """The worker's hands: one method per occasion, each run on the worker's thread."""

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        executor: FenceExecutor,
        warnings: CloudWarnings,
        state: State,
        latest: Callable[[], JSON | None],
        drained: Callable[[Notice], None],
        status: Callable[[str], None],
        send: Callable[..., None],
    ) -> None:
        """`latest`: the own Node as last watched; `drained`: told of a warning once the
        node is drained for it; `status` and `send`: to systemd (a shutdown's)."""
        self.cfg = cfg
        self.kube = kube
        self.executor = executor
        self.warnings = warnings
        self.state = state
        self.latest = latest
        self.drained = drained
        self.status = status
        self.send = send

    def shutdown(self, signal: Signal, ctx: Context) -> None:
        """A shutdown's step, unless it was cancelled or is handled already; its drain
        extends systemd's stop timeout first."""
        reason = signal.reason or Reason.UNKNOWN
        with self.state.lock:
            if signal.generation is not None and signal.generation != self.state.generation:
                return  # cancelled (or superseded) before it started
            if self.state.owner is not None:
                return  # this shutdown is already handled
        policy = self.cfg.shutdown.policy(reason)
        self.status(f"{signal.source}: {reason}, policy {policy}")
        budget = signal.budget
        assert budget is not None, "a shutdown signal carries its budget"

        def redecide(node: JSON | None) -> Decision:
            observed = self.observed(Occasion.SHUTDOWN, node, shutdown=reason, policy=policy)
            signal.decision = decide(observed)
            return signal.decision

        decision = redecide(None)
        if decision.step is Step.NOTHING:
            return
        extend = max(0.0, budget.extend_until - time.monotonic())
        self.send(f"EXTEND_TIMEOUT_USEC={int(extend * 1e6)}")
        try:
            result = self._apply(
                decision,
                ctx.with_deadline(budget.finish_until),
                generation=signal.generation,
                owner=reason,
                budget=budget,
                redecide=redecide,
            )
        except KubeError as exc:
            said = "shutdown drain failed: %s"
            milestone(log, Milestone.DRAIN_FAILED, said, exc, severity=logging.ERROR, reason=reason)
            self.status(f"drain for {reason} failed: {exc}")
            return
        if result is not None:
            self.status(f"drain for {reason}: {result.outcome} in {result.seconds:.1f}s")
            self._after_deletion(reason, result)

    def cancelled(self, signal: Signal, ctx: Context) -> bool:
        """Undo a called-off shutdown's fence; False when a newer shutdown decides."""
        with self.state.lock:
            self.state.owner = None  # every cancel ends the shutdown, if one was handled
            if signal.generation != self.state.generation:
                return False  # a new shutdown came meanwhile: it decides about the fence
        try:
            with ctx.with_timeout(CANCEL_BUDGET) as bounded:
                node = marker.get_node(self.kube.bounded(bounded.deadline), self.cfg.node_name)

                def redecide(node: JSON) -> Decision:
                    signal.decision = decide(self.observed(Occasion.CANCELLED, node))
                    return signal.decision

                self._carry_out(redecide(node), node, bounded, redecide)
        except KubeError as exc:
            log.warning("could not undo the cordon after the cancel: %s", exc)
        return True

    def settled(self, signal: Signal, ctx: Context) -> None:
        node = marker.get_node(self.kube, self.cfg.node_name)
        observed = self.observed(
            Occasion.SETTLED, node, started_at=signal.started_at, unclean=signal.unclean
        )
        signal.decision = decide(observed)
        self._apply(signal.decision, ctx.child(), node)

    def node(self, node: JSON, ctx: Context) -> None:
        """The Node or the warnings changed: decided on the Node as the watch shows it.
        Our own writes (cordon, result) may not have reached the watch yet: the cordon's
        resourceVersion precondition then fails, and the decision is made again on the
        Node as the API has it."""

        def redecide(node: JSON) -> Decision:
            return decide(self.observed(Occasion.NODE, node))

        decision = redecide(node)
        if decision.step is not Step.NOTHING:
            log.info("%s: %s", decision.step.value, decision.why)
        drain = self.cfg.drain.deadline
        budget = budgets.while_up(time.monotonic(), drain, decision.warning, time.time())
        result = self._apply(decision, ctx.child(), node, budget=budget, redecide=redecide)
        if result is None:
            return
        self._after_deletion(decision.reason or Reason.UNKNOWN, result)
        if result.blocked:  # the deadline passed, or pods are held or stuck
            self.state.retry_at = time.monotonic() + RETRY_BLOCKED
        elif decision.warning is not None and result.outcome in FINISHED:
            try:
                self.drained(decision.warning)
            except Exception as exc:  # the cloud's side; the drain stands either way
                log.warning("after the drain for %s: %s", decision.warning.describe(), exc)

    def _after_deletion(self, reason: Reason, result: DrainResult) -> None:
        """A drain stopped because its Node was deleted: its result, said once."""
        with self.state.lock:
            deleted = self.state.deleted
        if not deleted:
            return
        pods = self.executor.pods
        bound = len(pods.snapshot()) if pods is not None else 0
        log.warning(
            "drain for %s ended: the node was deleted; %d evicted in %.1fs, %d pod(s) still "
            "bound to the deleted name (PodGC removes them)",
            reason,
            len(result.evicted) + len(result.deleted_for_kubelet),
            result.seconds,
            bound,
        )

    def refence(self, node: JSON) -> JSON | None:
        """On the watch's thread, as the change arrives, even while a drain runs on the
        worker's: put back what someone else undid of the fence (decision REFENCE). The
        Node as written, or None when nothing was to be put back or the write did not
        land (a 409: a newer Node follows in the watch and is decided on)."""
        decision = decide(self.observed(Occasion.NODE, node))
        if decision.step is not Step.REFENCE:
            return None
        kube = self.kube.bounded(time.monotonic() + REFENCE_BUDGET)
        try:
            return self.executor.refence(kube, decision, node)
        except marker.NodeChanged:
            return None
        except KubeError as exc:
            log.warning("could not put the fence back (%s): %s", decision.why, exc)
            return None

    def observed(
        self,
        occasion: Occasion,
        node: JSON | None,
        *,
        shutdown: Reason | None = None,
        policy: Policy = Policy.NONE,
        started_at: str = "",
        unclean: bool = False,
    ) -> Observed:
        """What a decision reads: the Node (`node`, else the latest watched), the shutdown
        that owns the node, the retry's memory and the cloud's warnings as heard."""
        node = node or self.latest() or {"metadata": {"name": self.cfg.node_name}, "spec": {}}
        node = self.executor.as_recorded(node)  # a drain's result not written yet
        with self.state.lock:
            owner = shutdown or self.state.owner
        heard = self.warnings.now()
        return Observed(
            occasion=occasion,
            fence=marker.NodeFence.of(node),
            boot_id=marker.boot_id(node),
            taint=marker.first_taint(node, self.cfg.evacuate.taints),
            evacuate_policy=self.cfg.evacuate.policy,
            shutdown=owner,
            shutdown_policy=policy,
            started_at=started_at,
            unclean=unclean,
            retry_pending=time.monotonic() < self.state.retry_at,
            warning=heard.acting[0] if heard.acting else None,
            also_acting=heard.acting[1:],
            warnings_known=heard.known,
            warning_ids=heard.ids,
            warning_departed=marker.departed_note(node),
            may_taint=self.executor.may_taint,
            others=Others.of(node, self.state.kured_lock),
            handler=other_handler(self.cfg.warnings.other_handler, self.state.handler_seen),
            contested=self.state.refences.contested(
                marker.NodeFence.of(node).started_at, time.monotonic()
            ),
        )

    def _apply(
        self,
        decision: Decision,
        ctx: Context,
        node: JSON | None = None,
        *,
        generation: int | None = None,
        owner: Reason | None = None,
        budget: Budget | None = None,
        redecide: Redecide | None = None,
    ) -> DrainResult | None:
        """Apply with `ctx` registered as the running one, so producers can cancel it.

        A shutdown's (`owner`) is skipped when a cancel got in first: the generation is
        checked and the context registered under the lock the producers take.
        """
        with self.state.lock:
            if generation is not None and generation != self.state.generation:
                ctx.release()
                return None  # cancelled while it was being set up
            if owner is not None:
                self.state.owner = owner
            self.state.running = Running(decision.reason or Reason.UNKNOWN, ctx)
        try:
            with ctx:
                node = node or self.latest() or {"metadata": {"name": self.cfg.node_name}}
                return self._carry_out(decision, node, ctx, redecide, budget)
        finally:
            with self.state.lock:
                self.state.running = None

    def _carry_out(
        self,
        decision: Decision,
        node: JSON,
        ctx: Context,
        redecide: Redecide | None,
        budget: Budget | None = None,
    ) -> DrainResult | None:
        """The executor applies `decision`, made on `node`. When its cordon finds the Node
        changed since (the write's resourceVersion precondition), read it and decide again."""
        for _ in range(NODE_CHANGED_RETRIES):
            try:
                return self.executor.apply(decision, node, ctx, budget)
            except marker.NodeChanged as exc:
                if redecide is None:
                    raise
                log.info("%s; deciding again", exc)
                kube = self.kube if ctx.deadline == math.inf else self.kube.bounded(ctx.deadline)
                node = marker.get_node(kube, self.cfg.node_name)
                decision = redecide(node)
        return self.executor.apply(decision, node, ctx, budget)
