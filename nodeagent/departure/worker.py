"""The node's departure: one queue of what happened, one worker that acts on it.

Everything that may change who holds the node arrives here as a `Signal`: logind's
PrepareForShutdown true and false, SIGTERM, every change of the own Node (an evacuate
taint added or removed) or of the cloud's early warnings, and the moment after start
when the node can run pods again.
One worker takes them in order, observes the Node, asks `decide` what should be, and
hands that to the executor; their order is the queue's.

A drain can take minutes, and some signals cannot wait behind it: a cancelled shutdown,
a shutdown arriving during an evacuation, an evacuate taint removed mid-drain. Those
cancel the running drain's `Context` from the producer's thread, then queue as usual.
See docs/architecture.md for the flows.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent import metrics
from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure import budget as budgets
from nodeagent.departure.budget import Budget
from nodeagent.departure.executor import NODE_CHANGED_RETRIES, FenceExecutor
from nodeagent.drain.engine import DrainResult
from nodeagent.fence import marker
from nodeagent.fence.decision import Decision, Observed, decide, evacuation_asked
from nodeagent.fence.warning import Due, Warned, due, is_departed, window
from nodeagent.kube.client import JSON, Kube, KubeError
from nodeagent.kube.watch import Reflector
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import WARNING, EventRecorder
from nodeagent.types import FINISHED, Notice, Occasion, Policy, Reason, Step, stamp

log = logging.getLogger(__name__)

RETRY_BLOCKED = 30.0  # seconds between drains of a node whose evacuation hit its deadline
CANCEL_BUDGET = 60.0  # undoing the fence after a cancel (nothing is going down then)
IDLE_WAKE = 5.0  # the worker beats at least this often while idle

Redecide = Callable[[JSON], Decision]  # the decision again, on the Node read anew


@dataclass
class Signal:
    """One thing that happened, queued for the worker; `done` is set once handled."""

    occasion: Occasion
    reason: Reason | None = None  # SHUTDOWN
    budget: Budget | None = None  # SHUTDOWN: the drain's time, fixed when the signal arrived
    source: str = ""  # SHUTDOWN: "logind" or "SIGTERM"
    generation: int | None = None  # logind's PrepareForShutdown count; None for SIGTERM
    started_at: str = ""  # SETTLED: the marker seen at start
    unclean: bool = False  # SETTLED: the previous boot ended without a drain
    after: Callable[[], None] | None = None  # run once handled (release logind's lock)
    done: threading.Event = field(default_factory=threading.Event)
    decision: Decision | None = None  # what the worker decided, once handled

    def wait(self, until: float) -> bool:
        return self.done.wait(max(0.0, until - time.monotonic()))


@dataclass
class _Running:
    reason: Reason
    ctx: Context


class Departure:
    """Owns the node while it departs or is evacuated. Producers call `shutdown`,
    `cancel`, `observe` and `settled` from any thread; `run` is the worker's loop body."""

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        events: EventRecorder,
        report: ConditionWriter,
        status: Callable[[str], None],
        send: Callable[..., None],
        pods: Reflector | None = None,
    ) -> None:
        self.cfg = cfg
        self.kube = kube
        self.executor = FenceExecutor(cfg, kube, events, report, self._progress, pods)
        self.status = status
        self.send = send
        self.beat: Callable[[], None] = lambda: None
        self._queue: queue.SimpleQueue[Signal] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._generation = 0
        self._announced: Signal | None = None  # the shutdown signal not yet cancelled
        self._owner: Reason | None = None  # the shutdown that owns the node
        self._running: _Running | None = None
        self._node: JSON | None = None  # the latest own Node observed
        self._node_queued = False
        self._retry_at = 0.0  # memory the Node cannot hold (see Observed)
        # The cloud's early warnings as last read (None: not read yet), and which acts.
        self._notices: tuple[Notice, ...] | None = None
        self._due = Due(None)
        # Warnings read before the Node was first seen, not reported yet (from this baseline):
        # whether one already departed is the Node's to say.
        self._unreported: tuple[Notice, ...] | None = None
        # Called with a warning once the node is drained for it (Azure's approval).
        self.warning_drained: Callable[[Notice], None] = lambda _notice: None

    # -- producers (any thread) ---------------------------------------------------

    def shutdown(
        self,
        reason: Reason,
        budget: Budget,
        source: str,
        generation: int | None = None,
        after: Callable[[], None] | None = None,
    ) -> Signal:
        """The node is going down (or the agent is stopped) for `reason`, in `budget`."""
        signal = Signal(Occasion.SHUTDOWN, reason, budget, source, generation, after=after)
        with self._lock:
            if generation is not None:
                self._generation = generation
            self._announced = signal
            running = self._running
        if running and running.reason.while_up:
            running.ctx.cancel()  # the shutdown owns the node from here
        self._queue.put(signal)
        return signal

    def cancel(self, generation: int) -> Signal:
        """logind called the shutdown off: stop its drain now, undo the fence next."""
        log.info("shutdown cancelled; undoing the fence")
        signal = Signal(Occasion.CANCELLED, generation=generation)
        with self._lock:
            self._generation = generation
            self._announced = None
            running = self._running
        if running and not running.reason.while_up:
            running.ctx.cancel()
        self._queue.put(signal)
        return signal

    def observe(self, node: JSON) -> None:
        """A change of the own Node, from its watch; never blocks."""
        with self._lock:
            self._node = node
            queued, self._node_queued = self._node_queued, True
            running = self._running
            unreported, self._unreported = self._unreported, None
            notices = self._notices or ()
        if unreported is not None:
            self._report_notices(unreported, notices, node)
        if (
            running
            and running.reason is Reason.EVACUATE
            and not evacuation_asked(node, self.cfg.evacuate)
        ):
            log.info("evacuate taint removed during the drain; stopping it")
            running.ctx.cancel()
        if not queued:
            self._queue.put(Signal(Occasion.NODE))

    def warned(self, notices: tuple[Notice, ...]) -> None:
        """The cloud's early warnings as the metadata endpoint shows them now (every
        read); never blocks. A change of the warning that acts is decided on at once."""
        with self._lock:
            before = self._notices
            self._notices = notices
            node = self._node
            if node is None and self._unreported is None:
                self._unreported = before or ()
            elif node is not None and self._unreported is not None:
                before, self._unreported = self._unreported, None
        if node is not None:
            self._report_notices(before or (), notices, node)
        if before is None or {n.event_id for n in before} != {n.event_id for n in notices}:
            self._warnings_changed()
        else:
            self._recheck_warnings()

    def _recheck_warnings(self) -> None:
        """Decide again when the warning acting now is another one (a scheduled event's
        lead reached, a rebalance's lifetime over), by time alone."""
        with self._lock:
            now_due = due(self._notices or (), self.cfg.warnings, time.time())
            changed = now_due.warned != self._due.warned
        if changed:
            self._warnings_changed()

    def _warnings_changed(self) -> None:
        with self._lock:
            self._due = due(self._notices or (), self.cfg.warnings, time.time())
            warned = self._due.warned
            running = self._running
            queued, self._node_queued = self._node_queued, True
        drains = warned is not None and warned.policy is Policy.DRAIN
        if running and running.reason is Reason.WARNING and not drains:
            log.info("the cloud's warning is over or asks for no drain now; stopping its drain")
            running.ctx.cancel()
        if not queued:
            self._queue.put(Signal(Occasion.NODE))

    def _report_notices(
        self, before: tuple[Notice, ...], now: tuple[Notice, ...], node: JSON
    ) -> None:
        """An Event and a count for each warning when it appears; an Event when it goes.
        None for a warning whose departure happened (the endpoint lists it a while after)."""
        events = self.executor.events
        seen = {n.event_id for n in before}
        for notice in now:
            if notice.event_id in seen or self._departed(notice, node):
                continue
            said = f"{notice.describe()}; policy {self.cfg.warnings.policy(notice.kind)}"
            start, _end = window(notice, self.cfg.warnings)
            if start > time.time():  # a scheduled event days ahead: the node serves until
                said += f", from {stamp(start)}"
            log.warning("%s", said)
            metrics.CLOUD_WARNINGS.labels(notice.cloud, notice.kind).inc()
            events.node(node, "CloudWarning", said, WARNING)
        current = {n.event_id for n in now}
        for notice in before:
            if notice.event_id not in current and not self._departed(notice, node):
                log.info("%s is over (canceled, done or gone)", notice.describe())
                events.node(node, "CloudWarningOver", f"{notice.describe()} is over")

    @staticmethod
    def _departed(notice: Notice, node: JSON) -> bool:
        if "spec" not in node:  # not observed
            return False
        fence = marker.NodeFence.of(node)
        return is_departed(notice, fence, marker.boot_id(node), marker.departed_note(node))

    def settled(self, started_at: str, unclean: bool) -> Signal:
        """After start, the node runs pods again: undo the shutdown cordon seen at start."""
        signal = Signal(Occasion.SETTLED, started_at=started_at, unclean=unclean)
        self._queue.put(signal)
        return signal

    def announced(self) -> Signal | None:
        """The shutdown signal under way (queued or being handled), unless cancelled."""
        with self._lock:
            return self._announced

    # -- the worker ---------------------------------------------------------------

    def run(self, ctx: Context, beat: Callable[[], None]) -> None:
        """Loop body: handle signals in order until `ctx` is cancelled; `beat` whenever
        alive (idle, between signals, at every drain progress)."""
        self.beat = beat
        with self._lock:
            # After a restart (the last signal raised), act again on the last Node seen.
            if self._node is not None and not self._node_queued:
                self._node_queued = True
                self._queue.put(Signal(Occasion.NODE))
        while not ctx.cancelled:
            try:
                signal = self._queue.get(timeout=self._idle_wait())
            except queue.Empty:
                self.beat()
                self._retry_if_due()
                self._recheck_warnings()
                continue
            self.beat()
            try:
                self._handle(signal, ctx)
            finally:
                signal.done.set()
                if signal.after is not None:
                    signal.after()

    def _idle_wait(self) -> float:
        if self._retry_at:
            return max(0.01, min(IDLE_WAKE, self._retry_at - time.monotonic()))
        return IDLE_WAKE

    def _retry_if_due(self) -> None:
        if self._retry_at and time.monotonic() >= self._retry_at:
            self._retry_at = 0.0
            self.observe(marker.get_node(self.kube, self.cfg.node_name))

    def _handle(self, signal: Signal, ctx: Context) -> None:
        if signal.occasion is Occasion.SHUTDOWN:
            self._shutdown(signal, ctx)
        elif signal.occasion is Occasion.CANCELLED:
            self._cancelled(signal, ctx)
        elif signal.occasion is Occasion.SETTLED:
            self._settled(signal, ctx)
        else:
            self._node_changed(ctx)

    def _shutdown(self, signal: Signal, ctx: Context) -> None:
        reason = signal.reason or Reason.UNKNOWN
        with self._lock:
            if signal.generation is not None and signal.generation != self._generation:
                return  # cancelled (or superseded) before it started
            if self._owner is not None:
                return  # this shutdown is already handled
        policy = self.cfg.shutdown.policy(reason)
        self.status(f"{signal.source}: {reason}, policy {policy}")
        budget = signal.budget
        assert budget is not None, "a shutdown signal carries its budget"

        def redecide(node: JSON | None) -> Decision:
            observed = self._observe(Occasion.SHUTDOWN, node=node, shutdown=reason, policy=policy)
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
            log.error("shutdown drain failed: %s", exc)
            self.status(f"drain for {reason} failed: {exc}")
            return
        if result is not None:
            self.status(f"drain for {reason}: {result.outcome} in {result.seconds:.1f}s")

    def _cancelled(self, signal: Signal, ctx: Context) -> None:
        with self._lock:
            self._owner = None  # every cancel ends the shutdown, if one was handled
            if signal.generation != self._generation:
                return  # a new shutdown came meanwhile: it decides about the fence
        try:
            with ctx.with_timeout(CANCEL_BUDGET) as bounded:
                node = marker.get_node(self.kube.bounded(bounded.deadline), self.cfg.node_name)

                def redecide(node: JSON) -> Decision:
                    signal.decision = decide(self._observe(Occasion.CANCELLED, node=node))
                    return signal.decision

                self._carry_out(redecide(node), node, bounded, redecide)
        except KubeError as exc:
            log.warning("could not undo the cordon after the cancel: %s", exc)
        self._node_changed(ctx)  # an evacuate taint, if any, applies again

    def _settled(self, signal: Signal, ctx: Context) -> None:
        node = marker.get_node(self.kube, self.cfg.node_name)
        observed = self._observe(
            Occasion.SETTLED, node=node, started_at=signal.started_at, unclean=signal.unclean
        )
        signal.decision = decide(observed)
        self._apply(signal.decision, ctx.child(), node)

    def _node_changed(self, ctx: Context) -> None:
        with self._lock:
            node, self._node_queued = self._node, False
        if node is None:
            return

        def redecide(node: JSON) -> Decision:
            return decide(self._observe(Occasion.NODE, node=node))

        # Decided on the Node as the watch shows it. Our own writes (cordon, result) may
        # not have reached the watch yet: the cordon's resourceVersion precondition then
        # fails, and the decision is made again on the Node as the API has it.
        decision = redecide(node)
        if decision.step is not Step.NOTHING:
            log.info("%s: %s", decision.step.value, decision.why)
        budget = self._while_up_budget(decision)
        result = self._apply(decision, ctx.child(), node, budget=budget, redecide=redecide)
        if result is None:
            return
        if result.blocked:  # the deadline passed, or pods are held or stuck
            self._retry_at = time.monotonic() + RETRY_BLOCKED
        elif decision.warning is not None and result.outcome in FINISHED:
            self._drained_for(decision.warning)

    def _while_up_budget(self, decision: Decision) -> Budget:
        """An evacuation's time; a warning's, cut to end before the cloud acts."""
        now = time.monotonic()
        notice = decision.warning
        if notice is None or notice.deadline is None:
            return budgets.evacuation(now, self.cfg.drain.deadline)
        return budgets.warning(now, self.cfg.drain.deadline, notice.deadline - time.time())

    def _drained_for(self, notice: Notice) -> None:
        try:
            self.warning_drained(notice)
        except Exception as exc:  # the cloud's side; the drain stands either way
            log.warning("after the drain for %s: %s", notice.describe(), exc)

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
        with self._lock:
            if generation is not None and generation != self._generation:
                ctx.release()
                return None  # cancelled while it was being set up
            if owner is not None:
                self._owner = owner
            self._running = _Running(decision.reason or Reason.UNKNOWN, ctx)
        try:
            with ctx:
                node = node or self._node or {"metadata": {"name": self.cfg.node_name}}
                return self._carry_out(decision, node, ctx, redecide, budget)
        finally:
            with self._lock:
                self._running = None

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
                node = marker.get_node(self._bounded(ctx), self.cfg.node_name)
                decision = redecide(node)
        return self.executor.apply(decision, node, ctx, budget)

    def _bounded(self, ctx: Context) -> Kube:
        return self.kube if ctx.deadline == math.inf else self.kube.bounded(ctx.deadline)

    def _progress(self, reason: Reason, message: str) -> None:
        """A drain's progress: alive for the watchdog and, at shutdown, for systemd."""
        self.beat()
        if reason.while_up:
            log.info("%s: %s", reason, message)
            return
        self.send(f"STATUS=draining: {message}", "EXTEND_TIMEOUT_USEC=30000000")
        log.info("%s", message)

    # -- observation ----------------------------------------------------------------

    def _observe(
        self,
        occasion: Occasion,
        *,
        node: JSON | None = None,
        shutdown: Reason | None = None,
        policy: Policy = Policy.NONE,
        started_at: str = "",
        unclean: bool = False,
    ) -> Observed:
        node = node or self._node or {"metadata": {"name": self.cfg.node_name}, "spec": {}}
        with self._lock:
            owner = shutdown or self._owner
            notices = self._notices
        return Observed(
            occasion=occasion,
            fence=marker.NodeFence.of(node),
            boot_id=marker.boot_id(node),
            taint=self._evacuate_taint(node),
            evacuate_policy=self.cfg.evacuate.policy,
            shutdown=owner,
            shutdown_policy=policy,
            started_at=started_at,
            unclean=unclean,
            retry_pending=time.monotonic() < self._retry_at,
            warning=self._acting(node, notices or ()),
            warnings_known=notices is not None,
            warning_ids=frozenset(n.event_id for n in notices or ()),
            warning_departed=marker.departed_note(node),
        )

    def _acting(self, node: JSON, notices: tuple[Notice, ...]) -> Warned | None:
        """The warning acting now, of those whose departure did not happen yet: a departed
        one the endpoint still lists hides no other."""
        live = [n for n in notices if not self._departed(n, node)]
        if len(live) == len(notices):
            return self._due.warned
        return due(live, self.cfg.warnings, time.time()).warned

    def _evacuate_taint(self, node: JSON) -> str:
        return marker.first_taint(node, self.cfg.evacuate.taints)
