"""The node's departure: one queue of what happened, one worker that routes it.

Everything that may change who holds the node arrives here as a `Signal`: logind's
PrepareForShutdown true and false, SIGTERM, every change of the own Node (an evacuate
taint added or removed) or of the cloud's early warnings, and the moment after start
when the node can run pods again. The worker takes them in order, observes, asks the
pure `decide` what should be and hands that to the executor (the one writer of the fence).
Whether a signal stops the running drain at once is the pure `preempts`, asked by the
producer before it queues. The cloud's warnings are kept and reported by CloudWarnings.
See docs/architecture.md for the flows.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable

from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure.apply import Applier
from nodeagent.departure.budget import Budget
from nodeagent.departure.executor import FenceExecutor
from nodeagent.departure.signal import Running, Signal, State
from nodeagent.departure.warnings import CloudWarnings
from nodeagent.fence import marker
from nodeagent.fence.decision import evacuation_asked, preempts
from nodeagent.fence.others import Others, other_handler, standing_aside
from nodeagent.kube.client import JSON, Kube
from nodeagent.kube.watch import Reflector
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import EventRecorder
from nodeagent.types import Milestone, Notice, Occasion, Reason, milestone

log = logging.getLogger(__name__)

IDLE_WAKE = 5.0  # the worker beats at least this often while idle


class Departure:
    """Owns the node while it departs or is evacuated. Producers call `shutdown`,
    `cancel`, `observe`, `warned` and `settled` from any thread; `run` is the worker's
    loop body. What a signal does once taken is nodeagent/departure/apply.py's."""

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        events: EventRecorder,
        report: ConditionWriter,
        status: Callable[[str], None],
        send: Callable[..., None],
        pods: Reflector | None = None,
        may_taint: bool = True,
    ) -> None:
        """`may_taint`: the identity may change its Node's taints (executor)."""
        self.cfg = cfg
        self.kube = kube
        self.state = State()  # what the worker remembers, shared with the producers
        self.executor = FenceExecutor(
            cfg, kube, events, report, self._progress, pods, self.state.refences, may_taint
        )
        self.warnings = CloudWarnings(cfg.warnings, events)
        self.status = status
        self.send = send
        self.beat: Callable[[], None] = lambda: None
        self._queue: queue.SimpleQueue[Signal] = queue.SimpleQueue()
        self._lock = self.state.lock
        self._announced: Signal | None = None  # the shutdown signal not yet cancelled
        self._node: JSON | None = None  # the latest own Node observed
        self._node_queued = False
        self._handler_said: str | None = None  # the handler line last logged
        # Called with a warning once the node is drained for it (Azure's approval).
        self.warning_drained: Callable[[Notice], None] = lambda _notice: None
        self._apply = Applier(
            cfg,
            kube,
            self.executor,
            self.warnings,
            self.state,
            self.latest_node,
            lambda notice: self.warning_drained(notice),
            status,
            send,
        )

    @property
    def _running(self) -> Running | None:
        return self.state.running

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
                self.state.generation = generation
            self._announced = signal
        self._preempt(Occasion.SHUTDOWN)
        self._queue.put(signal)
        return signal

    def cancel(self, generation: int) -> Signal:
        """logind called the shutdown off: stop its drain now, undo the fence next."""
        milestone(
            log,
            Milestone.SHUTDOWN_CANCELLED,
            "shutdown cancelled; undoing the fence",
            generation=generation,
        )
        signal = Signal(Occasion.CANCELLED, generation=generation)
        with self._lock:
            self.state.generation = generation
            self._announced = None
        self._preempt(Occasion.CANCELLED)
        self._queue.put(signal)
        return signal

    def observe(self, node: JSON) -> None:
        """A change of the own Node, from its watch. What someone else undid of the fence
        is put back here, at once (one guarded write), not behind a running drain."""
        with self._lock:
            self._node = node
            if self.state.deleted and self.state.deleted != node["metadata"].get("uid"):
                self.state.deleted = ""
            self.state.handler_seen = self.state.handler_seen or Others.of(node).handler
            handler = other_handler(self.cfg.warnings.other_handler, self.state.handler_seen)
            said, self._handler_said = self._handler_said, handler
        if handler != said:
            log.info("%s", standing_aside(handler))
        self.warnings.report(node)
        written = self._apply.refence(node)
        if written is not None:
            with self._lock:
                if self._node is node:  # a newer Node is the newer word
                    self._node = written
        self._node_changed()

    def node_deleted(self, node: JSON) -> None:
        """The own Node was deleted from the API (the watch's DELETED): the running drain
        stops at once (its evictions would go on answering while PodGC has not removed the
        pods, and every write to the Node answers 404), and what the agent remembered of
        that object goes. Decisions wait for the kubelet to register the Node again.

        A drain for the machine going down goes on: its pods are still in the API and
        still run on this kubelet, which answers their evictions, and stopped, it would
        release the shutdown with them, killed mid-request (the departure benchmark's
        node-deleted kind cut every long request so)."""
        meta = node["metadata"]
        with self._lock:
            self._node = None
            running = self.state.running
            self.state.retry_at = 0.0
            self.state.refences.reset()
            self.state.deleted = meta.get("uid", "")
            self.state.handler_seen = ""  # memory of that object
        going_on = running is not None and running.reason.going_down
        doing = (
            "no drain was running"
            if running is None
            else f"the {running.reason} drain goes on: the machine is going down"
            if going_on
            else f"stopping the {running.reason} drain"
        )
        log.warning(
            "node %s (uid %s) was deleted from the API; %s; waiting for the kubelet to "
            "register it again",
            meta["name"],
            meta.get("uid", "?"),
            doing,
        )
        if running is not None and not going_on:
            running.ctx.cancel()

    def kured_lock(self, lock: str) -> None:
        """kured's lock on its DaemonSet naming this node, as evidence ("" when none, or
        expired): a change is decided on at once (kured takes the lock, then cordons and
        drains; a failed drain releases it)."""
        with self._lock:
            changed, self.state.kured_lock = self.state.kured_lock != lock, lock
        if changed:
            self._node_changed()

    def warned(self, notices: tuple[Notice, ...]) -> None:
        """The cloud's early warnings as the metadata endpoint shows them now (every
        read); never blocks. A change of the warning that acts is decided on at once."""
        changed = self.warnings.heard(notices)
        with self._lock:
            node = self._node
        if node is not None:
            self.warnings.report(node)
        if changed:
            self._node_changed()

    def settled(self, started_at: str, unclean: bool) -> Signal:
        """After start, the node runs pods again: undo the shutdown cordon seen at start."""
        signal = Signal(Occasion.SETTLED, started_at=started_at, unclean=unclean)
        self._queue.put(signal)
        return signal

    def announced(self) -> Signal | None:
        """The shutdown signal under way (queued or being handled), unless cancelled."""
        with self._lock:
            return self._announced

    def _node_changed(self) -> None:
        """Queue one NODE signal (one is enough: it reads the latest Node and warnings)."""
        self._preempt(Occasion.NODE)
        with self._lock:
            queued, self._node_queued = self._node_queued, True
        if not queued:
            self._queue.put(Signal(Occasion.NODE))

    def _preempt(self, occasion: Occasion) -> None:
        """Stop the running drain at once if `occasion` pre-empts it (fence.decision)."""
        with self._lock:
            running, node = self.state.running, self._node
        if running is None:
            return
        asked = node is None or evacuation_asked(node, self.cfg.evacuate)
        why = preempts(occasion, running.reason, asked, self.warnings.now().drains)
        if why:
            log.info("%s; stopping the %s drain", why, running.reason)
            running.ctx.cancel()

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
                if self.warnings.tick():
                    self._node_changed()
                continue
            self.beat()
            try:
                self._handle(signal, ctx)
            finally:
                signal.done.set()
                if signal.after is not None:
                    signal.after()

    def _handle(self, signal: Signal, ctx: Context) -> None:
        if signal.occasion is Occasion.SHUTDOWN:
            self._apply.shutdown(signal, ctx)
        elif signal.occasion is Occasion.CANCELLED:
            if self._apply.cancelled(signal, ctx):
                self._node_step(ctx)  # an evacuate taint, if any, applies again
        elif signal.occasion is Occasion.SETTLED:
            self._apply.settled(signal, ctx)
        else:
            self._node_step(ctx)

    def _node_step(self, ctx: Context) -> None:
        with self._lock:
            node, self._node_queued = self._node, False
        if node is not None:
            self._apply.node(node, ctx)

    def _idle_wait(self) -> float:
        retry_at = self.state.retry_at
        if retry_at:
            return max(0.01, min(IDLE_WAKE, retry_at - time.monotonic()))
        return IDLE_WAKE

    def _retry_if_due(self) -> None:
        if self.state.retry_at and time.monotonic() >= self.state.retry_at:
            self.state.retry_at = 0.0
            self.observe(marker.get_node(self.kube, self.cfg.node_name))

    def latest_node(self) -> JSON | None:
        with self._lock:
            return self._node

    def _progress(self, reason: Reason, message: str) -> None:
        """A drain's progress: alive for the watchdog and, at shutdown, for systemd."""
        self.beat()
        if reason.while_up:
            log.info("%s: %s", reason, message)
            return
        self.send(f"STATUS=draining: {message}", "EXTEND_TIMEOUT_USEC=30000000")
        log.info("%s", message)
