"""The node's departure: drain when it shuts down, undo when the shutdown is cancelled.

logind is heard first: the agent holds a delay inhibitor lock, and on
`PrepareForShutdown(true)` it drains inside logind's delay, then releases the lock.
SIGTERM is the fallback (a shutdown that bypassed logind, `systemctl stop`) in the host
form; in the pod form a SIGTERM is a rollout, an uninstall or an eviction of the
agent's own pod, and starts a drain only inside a shutdown logind announced.
`PrepareForShutdown(false)` (cancelled) stops the drain, undoes the fence and keeps a
lock for the next shutdown.

Signals can arrive in any order, so every PrepareForShutdown starts a new generation:
only the generation still current may drain, release the lock or undo the fence, and
one drain runs at a time. Every wait on this path has a deadline fixed when the
signal arrived.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from nodeagent.config import Config
from nodeagent.departure.evacuate import REASON as EVACUATE
from nodeagent.departure.evacuate import Evacuator, outcome_condition, requested
from nodeagent.drain.engine import Drain, DrainOptions, DrainResult
from nodeagent.drain.podfilter import FinishedPods
from nodeagent.fence import marker as fence
from nodeagent.fence.marker import SHUTDOWN_REASONS
from nodeagent.host.kubeletshutdown import CHECK_INTERVAL, KubeletShutdownReport, kubelet_lock
from nodeagent.host.kubeletshutdown import message as message_for_kubelet
from nodeagent.kube.client import Kube, KubeError
from nodeagent.report import conditions, metrics
from nodeagent.report.events import EventRecorder

log = logging.getLogger(__name__)

LOGIND_MARGIN = 5.0  # seconds kept back from logind's delay for closing the lock
# After its deadline a shutdown drain gets this long to delete what is left and record
# the result: inside LOGIND_MARGIN, and inside TimeoutStopSec (150 s) after 120 s.
FINISH_GRACE = 3.0
CANCEL_BUDGET = 60.0  # undoing the fence after a cancel (nothing is going down then)


class Departure:
    """Owns the node while it departs. Construct once; the daemon feeds it signals."""

    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        events: EventRecorder,
        report: conditions.ConditionWriter,
        evacuator: Evacuator,
        status: Callable[[str], None],
        send: Callable[..., None],
    ) -> None:
        self.cfg = cfg
        self.kube = kube
        self.events = events
        self.report = report
        self.evacuator = evacuator
        self.status = status
        self.send = send
        self.ready_condition = conditions.agent_ready()
        self._ready_notes: dict[conditions.ReadyReason, str] = {}
        self._kubelet = KubeletShutdownReport()
        self._state = threading.Lock()
        self._gen = 0  # bumped by every PrepareForShutdown, true or false
        self._active: int | None = None  # generation being handled (-1: SIGTERM)
        self._drain: Drain | None = None
        self._drain_mutex = threading.Lock()
        self._inhibitor: Any = None
        self._inhibit_delay: float | None = None  # logind's InhibitDelayMaxUSec, seconds
        self._logind_thread: threading.Thread | None = None
        self._logind_until = 0.0

    @property
    def shutting_down(self) -> bool:
        with self._state:
            return self._active is not None

    def while_not_shutting_down(self, action: Callable[[], None]) -> bool:
        """Run `action` unless a shutdown owns the node; no shutdown starts meanwhile."""
        with self._drain_mutex:
            if self.shutting_down:
                return False
            action()
            return True

    # -- logind -----------------------------------------------------------------

    def hold_logind_lock(self, stop: threading.Event, beat: Callable[[], None]) -> None:
        """Loop body: hold the delay lock until `stop`; raise (to be restarted) if lost."""
        from nodeagent.host.logind import LogindInhibitor

        lost = threading.Event()
        inhibitor = LogindInhibitor(self.on_prepare, on_lost=lambda _exc: lost.set())
        self._read_inhibit_delay(inhibitor)
        with self._state:
            self._inhibitor = inhibitor  # before start(): a pending shutdown is reported there
        inhibitor.start()
        next_check = time.monotonic()
        try:
            while True:
                if time.monotonic() >= next_check:
                    self._check_kubelet_lock(inhibitor)
                    next_check = time.monotonic() + CHECK_INTERVAL
                if stop.wait(1.0):
                    return
                if lost.is_set():
                    raise KubeError("lost the system bus; taking the logind lock again")
                beat()  # the listener thread delivers signals; the lock is an fd
        finally:
            inhibitor.close()

    def _check_kubelet_lock(self, inhibitor: Any) -> None:
        from nodeagent.host.logind import LogindUnavailableError

        try:
            lock = kubelet_lock(inhibitor.inhibitors())
        except LogindUnavailableError as exc:
            log.warning("%s; cannot tell whether the kubelet's graceful shutdown is on", exc)
            return
        if self._kubelet.observe(lock):
            note = None if lock is None else message_for_kubelet(lock)
            self._note_ready(conditions.ReadyReason.KUBELET_GRACEFUL_SHUTDOWN, note)

    def _note_ready(self, reason: conditions.ReadyReason, note: str | None) -> None:
        """Add or drop one finding of NodeAgentReady and report the condition."""
        if note is None:
            self._ready_notes.pop(reason, None)
        else:
            self._ready_notes[reason] = note
        self.ready_condition = conditions.agent_ready_with(self._ready_notes)
        self.report.set(self.ready_condition)

    def _read_inhibit_delay(self, inhibitor: Any) -> None:
        from nodeagent.host.logind import LogindUnavailableError

        try:
            delay = float(inhibitor.inhibit_delay_max_seconds())
        except LogindUnavailableError as exc:
            # The lock still works; only the budget is unknown. logind proceeds at its
            # ceiling whatever the agent does, so drain to the configured deadline.
            log.warning("%s; drains at shutdown use the configured deadline", exc)
            return
        self._inhibit_delay = delay
        metrics.INHIBIT_DELAY.set(delay)
        short = delay - LOGIND_MARGIN < self.cfg.drain.deadline
        metrics.INHIBIT_SHORT.set(1 if short else 0)
        if short:
            message = (
                f"logind InhibitDelayMaxSec is {delay:.0f}s, shorter than the drain deadline "
                f"{self.cfg.drain.deadline:.0f}s + {LOGIND_MARGIN:.0f}s margin: drains at "
                "shutdown are cut to fit"
            )
            log.warning("%s", message)
        self._note_ready(conditions.ReadyReason.INHIBIT_DELAY_TOO_SHORT, message if short else None)

    def on_prepare(self, active: bool, kind: Any) -> None:
        """logind's PrepareForShutdown(WithMetadata), on the D-Bus listener thread."""
        reason = str(getattr(kind, "value", kind))
        if reason == "unknown":
            # logind before v255 sends no type; PrepareForShutdown only ever means the
            # machine is going down, so treat it as a poweroff rather than doing nothing.
            reason = "poweroff"
        budget = self.cfg.drain.deadline
        if self._inhibit_delay is not None:
            budget = max(1.0, min(budget, self._inhibit_delay - LOGIND_MARGIN))
        with self._state:
            self._gen += 1
            token = self._gen
        if not active:
            threading.Thread(target=self._cancelled, args=(token,), daemon=True).start()
            return
        thread = threading.Thread(
            target=self._logind_shutdown, args=(reason, budget, token), daemon=True
        )
        with self._state:
            self._logind_thread = thread
            self._logind_until = time.monotonic() + budget + FINISH_GRACE + 2
        thread.start()

    def _logind_shutdown(self, reason: str, budget: float, token: int) -> None:
        try:
            self._handle(reason, budget, "logind", token)
        finally:
            with self._state:
                # A shutdown cancelled meanwhile keeps the lock: it guards the next one.
                if token == self._gen and self._inhibitor is not None:
                    self._inhibitor.release()  # logind goes on with the shutdown

    def _cancelled(self, token: int) -> None:
        log.info("shutdown cancelled; undoing the fence")
        with self._state:
            self._active = None
            drain, inhibitor = self._drain, self._inhibitor
        if inhibitor is not None and not inhibitor.held:
            try:
                inhibitor.retake()
            except Exception as exc:  # the logind loop notices a dead bus and restarts
                log.warning("could not take the logind lock again: %s", exc)
        if drain:
            drain.cancel()
        if not self._drain_mutex.acquire(timeout=CANCEL_BUDGET):
            log.warning("the cancelled drain did not stop; leaving the fence")
            return
        try:
            if token == self._gen:  # else a new shutdown came meanwhile and owns the node
                self._undo_fence(time.monotonic() + CANCEL_BUDGET)
        finally:
            self._drain_mutex.release()
        if token == self._gen:
            self.evacuator.resume()  # an evacuate taint, if any, applies again

    def _undo_fence(self, deadline: float) -> None:
        kube = self.kube.bounded(deadline)
        try:
            node = fence.get_node(kube, self.cfg.node_name)
            if requested(node, self.cfg.evacuate):
                # The node was (or is now) asked to evacuate: keep it cordoned for that.
                fence.cordon(kube, node, EVACUATE)
                return
            if fence.uncordon(kube, self.cfg.node_name, only_reasons=SHUTDOWN_REASONS):
                self.events.node(node, "Uncordoned", "Shutdown cancelled")
            self.report.set(conditions.not_draining("Shutdown cancelled"))
        except KubeError as exc:
            log.warning("could not undo the cordon after the cancel: %s", exc)

    # -- SIGTERM ----------------------------------------------------------------

    def on_stop(self) -> None:
        """SIGTERM: work out why systemd is stopping us, then act per policy."""
        with self._state:
            thread, until = self._logind_thread, self._logind_until
            handled = self._active is not None
        if handled:
            if thread is not None:
                # logind's drain is still running: exiting now would kill it midway.
                self.status("stopping; waiting for the logind-triggered drain")
                if self.cfg.form == "pod":
                    self._report_grace(until - time.monotonic())
                thread.join(max(0.0, until - time.monotonic()))
            return
        if self.cfg.form == "pod":
            self._pod_stopping()
            return
        from nodeagent.host.logind import ShutdownKind, why_stopping

        evidence = why_stopping()
        reason = evidence.kind.value
        log.info("stopping: reason %s (evidence: %s)", reason, ", ".join(evidence.jobs) or "none")
        if evidence.kind is ShutdownKind.REMOVE:
            # The package is going away, the node is not: no drain, whatever the policy. The
            # heartbeat stops here, so say so instead of leaving a condition that looks alive.
            self.status("SIGTERM: package removal, no drain")
            self.ready_condition = conditions.agent_removed()
            self.report.set(self.ready_condition)
            return
        self._handle(reason, self.cfg.drain.deadline, "SIGTERM", None)

    def check_termination_grace(self) -> None:
        """At start in the pod form: a pod grace shorter than the drain deadline means the
        kubelet's graceful node shutdown, where on, would kill the agent mid-drain."""
        grace = self.cfg.shutdown.termination_grace
        if self.cfg.form == "pod" and grace and grace < self.cfg.drain.deadline + FINISH_GRACE:
            self._grace_too_short(
                f"terminationGracePeriodSeconds {grace:.0f}s is shorter than the drain deadline "
                f"{self.cfg.drain.deadline:.0f}s: the kubelet's graceful node shutdown, if on, "
                "kills this agent mid-drain"
            )

    def _report_grace(self, needed: float) -> None:
        """SIGTERM mid-drain in a pod: the kubelet's graceful node shutdown is stopping it
        with grace min(terminationGracePeriodSeconds, shutdownGracePeriodCriticalPods).
        The second is the kubelet's and not visible here, so this is always reported: the
        supported setting is that shutdown off."""
        grace = self.cfg.shutdown.termination_grace
        bound = f"at most {grace:.0f}s" if grace else "unknown"
        self._grace_too_short(
            f"The kubelet's graceful node shutdown stopped this agent {needed:.0f}s before its "
            f"drain deadline, with a grace of {bound} (and no more than the kubelet's "
            "shutdownGracePeriodCriticalPods): turn it off, or keep both above the deadline"
        )
        self.report.flush(min(2.0, max(0.1, needed)))

    def _grace_too_short(self, message: str) -> None:
        log.warning("%s", message)
        metrics.TERMINATION_GRACE_SHORT.set(1)
        self._note_ready(conditions.ReadyReason.TERMINATION_GRACE_TOO_SHORT, message)

    def _pod_stopping(self) -> None:
        """The pod's SIGTERM: a rollout, `helm uninstall` or an eviction never drains.

        Only when logind says a shutdown is under way that this agent has not handled
        (it started, or got its bus back, in the middle of it) does it drain, exactly as
        for PrepareForShutdown(true).
        """
        from nodeagent.host.logind import preparing_for_shutdown

        if not (self.cfg.shutdown.use_logind and preparing_for_shutdown()):
            self.status("pod stopping (rollout, uninstall or eviction), not a shutdown: no drain")
            return
        self.on_prepare(True, "unknown")
        with self._state:
            thread, until = self._logind_thread, self._logind_until
        if thread is not None:
            self.status("stopping inside a shutdown; draining first")
            thread.join(max(0.0, until - time.monotonic()))

    # -- the drain ----------------------------------------------------------------

    def _handle(self, reason: str, budget: float, source: str, token: int | None) -> None:
        deadline = time.monotonic() + budget
        policy = getattr(self.cfg.shutdown, reason.replace("-", "_"), self.cfg.shutdown.unknown)
        self.status(f"{source}: {reason}, policy {policy}")
        if policy == "none":
            return
        if not self._drain_mutex.acquire(timeout=max(0.0, deadline - time.monotonic())):
            log.error("shutdown drain for %s not started: the previous one did not stop", reason)
            return
        try:
            with self._state:
                if token is not None and token != self._gen:
                    return  # cancelled before it started
                if self._active is not None:
                    return  # this shutdown is already handled
                self._active = -1 if token is None else token
            self.evacuator.pause()  # the shutdown owns the node from here
            self.send(f"EXTEND_TIMEOUT_USEC={int((budget + 10) * 1e6)}")
            self._drain_for(reason, policy, deadline, token)
        except KubeError as exc:
            log.error("shutdown drain failed: %s", exc)
            self.status(f"drain for {reason} failed: {exc}")
        finally:
            self._drain_mutex.release()

    def _drain_for(self, reason: str, policy: str, deadline: float, token: int | None) -> None:
        kube = self.kube.bounded(deadline + FINISH_GRACE)
        if policy == "cordon":
            fence.cordon(kube, fence.get_node(kube, self.cfg.node_name), reason)
            return
        budget = max(0.0, deadline - time.monotonic())
        options = DrainOptions(
            reason=reason,
            deadline=budget,
            do_not_disrupt_ceiling=min(self.cfg.drain.do_not_disrupt_ceiling, budget / 2),
            force_after_deadline=self.cfg.shutdown.force_after_deadline,
            force_grace_seconds=1,
            concurrency=self.cfg.drain.concurrency,
            finished_pods=FinishedPods(self.cfg.drain.finished_pods),
            finish_grace=FINISH_GRACE,
        )

        def progress(msg: str) -> None:
            self.send(f"STATUS=draining: {msg}", "EXTEND_TIMEOUT_USEC=30000000")
            log.info("%s", msg)

        drain = Drain(self.kube, self.cfg.node_name, options, self.events, progress)
        with self._state:
            if token is not None and token != self._gen:
                return  # cancelled while it was being set up
            self._drain = drain
        self.report.set(conditions.draining(reason))
        result = drain.run()
        self._record(reason, result, deadline + FINISH_GRACE)

    def _record(self, reason: str, result: DrainResult, until: float) -> None:
        metrics.DRAINS.labels(reason, result.outcome).inc()
        metrics.DRAIN_SECONDS.observe(result.seconds)
        if result.outcome != "cancelled":
            self.report.set(outcome_condition(reason, result))
            # Before logind or systemd go on and take the network.
            self.report.flush(max(0.1, min(2.0, until - time.monotonic())))
        self.status(f"drain for {reason}: {result.outcome} in {result.seconds:.1f}s")
