"""logind's delay lock: held while the agent runs, and the shutdowns it announces.

The lock makes logind announce a shutdown (PrepareForShutdown) and wait for the agent,
up to InhibitDelayMaxSec. Each announcement starts a new generation: the departure worker
drains only for the generation still current, and only that generation releases the
lock when its drain is done; a cancel takes the lock again at once, for the next one.
The drain's budget is fixed when the signal arrives (nodeagent/departure/budget.py): the
drain deadline, cut to fit logind's delay with a margin for closing the lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from nodeagent import metrics
from nodeagent.context import Context
from nodeagent.departure import budget
from nodeagent.departure.budget import Budget
from nodeagent.host.kubeletshutdown import (
    KubeletShutdownReport,
    check_outvoted,
    kubelet_inhibitor,
)
from nodeagent.host.kubeletshutdown import message as message_for_kubelet
from nodeagent.host.kubeletshutdown import next_check as kubelet_check_after
from nodeagent.host.logindconf import LOGIND_MARGIN
from nodeagent.kube.client import KubeError
from nodeagent.report.conditions import ReadyReason
from nodeagent.report.readiness import Readiness
from nodeagent.types import Milestone, Reason, milestone

log = logging.getLogger(__name__)


# on_shutdown(reason, budget, generation, after) and on_cancel(generation)
OnShutdown = Callable[[Reason, Budget, int, Callable[[], None]], object]
OnCancel = Callable[[int], object]


def logind_reason(kind: Reason) -> Reason:
    """logind before v255 sends no type; PrepareForShutdown only ever means the machine is
    going down, so an unknown type is a poweroff (SIGTERM's unknown is not: see sigterm)."""
    return Reason.POWEROFF if kind is Reason.UNKNOWN else kind


class LogindLockHolder:
    """Holds the lock (the `run` loop body) and turns logind's signals into departures."""

    def __init__(
        self,
        drain_deadline: float,
        readiness: Readiness,
        on_shutdown: OnShutdown,
        on_cancel: OnCancel,
    ) -> None:
        self.drain_deadline = drain_deadline
        self.readiness = readiness
        self.on_shutdown = on_shutdown
        self.on_cancel = on_cancel
        self._kubelet = KubeletShutdownReport()
        self._lock = threading.Lock()
        self._generation = 0
        self._inhibitor: Any = None
        self._inhibit_delay: float | None = None  # InhibitDelayMaxUSec, seconds

    def run(self, ctx: Context, beat: Callable[[], None]) -> None:
        """Loop body: hold the lock until `ctx` is cancelled; raise (to be restarted) if lost."""
        from nodeagent.host.logind import DelayInhibitor

        lost = threading.Event()
        inhibitor = DelayInhibitor(self.on_prepare, on_lost=lambda _exc: lost.set())
        self._read_inhibit_delay(inhibitor)
        with self._lock:
            self._inhibitor = inhibitor  # before start(): a pending shutdown is reported there
        inhibitor.start()
        started = next_check = time.monotonic()
        try:
            while True:
                if time.monotonic() >= next_check:
                    self._check_kubelet_lock(inhibitor)
                    seen = self._kubelet.seen is not None
                    next_check = kubelet_check_after(time.monotonic(), started, seen)
                if ctx.wait(1.0):
                    return
                if lost.is_set():
                    raise KubeError("lost the system bus; taking the logind lock again")
                beat()  # the listener thread delivers signals; the lock is an fd
        finally:
            inhibitor.close()

    def on_prepare(self, active: bool, kind: Reason) -> None:
        """logind's PrepareForShutdown(WithMetadata), on the D-Bus listener thread."""
        with self._lock:
            self._generation += 1
            generation, inhibitor = self._generation, self._inhibitor
        if not active:
            self.on_cancel(generation)
            if inhibitor is not None and not inhibitor.held:
                # Off the listener thread: the call waits for a reply that thread reads.
                threading.Thread(target=self._retake, args=(inhibitor,), daemon=True).start()
            return
        # The kubelet's lock as last seen: asking logind now would wait on this thread.
        kubelet_kills = self._kubelet.seen is not None
        fixed = budget.logind(
            time.monotonic(), self.drain_deadline, self._inhibit_delay, kubelet_kills
        )
        reason = logind_reason(kind)
        milestone(
            log,
            Milestone.SHUTDOWN_ANNOUNCED,
            "shutdown announced by logind: %s (generation %d)",
            reason,
            generation,
            source="logind",
            reason=reason,
            generation=generation,
        )
        self.on_shutdown(reason, fixed, generation, lambda: self._release(generation))

    def _release(self, generation: int) -> None:
        """The drain for `generation` is done: let logind go on, unless a cancel (or a
        newer shutdown) came meanwhile; that one keeps the lock for the next shutdown."""
        with self._lock:
            if generation == self._generation and self._inhibitor is not None:
                self._inhibitor.release()
                milestone(
                    log,
                    Milestone.LOCK_RELEASED,
                    "logind may go on (generation %d)",
                    generation,
                    generation=generation,
                )

    @staticmethod
    def _retake(inhibitor: Any) -> None:
        try:
            inhibitor.retake()
        except Exception as exc:  # the loop notices a dead bus and restarts
            log.warning("could not take the logind lock again: %s", exc)

    def _check_kubelet_lock(self, inhibitor: Any) -> None:
        from nodeagent.host.logind import LogindUnavailableError

        try:
            lock = kubelet_inhibitor(inhibitor.inhibitors())
        except LogindUnavailableError as exc:
            log.warning("%s; cannot tell whether the kubelet's graceful shutdown is on", exc)
            return
        if lock is None and self._inhibit_delay is not None:
            self._kubelet.observe_outvoted(check_outvoted(self._inhibit_delay))
        if self._kubelet.observe(lock):
            note = None if lock is None else message_for_kubelet(lock)
            self.readiness.note(ReadyReason.KUBELET_GRACEFUL_SHUTDOWN, note)

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
        short = budget.inhibit_delay_short(self.drain_deadline, delay)
        metrics.INHIBIT_SHORT.set(1 if short else 0)
        message = None
        if short:
            message = (
                f"logind InhibitDelayMaxSec is {delay:.0f}s, shorter than the drain deadline "
                f"{self.drain_deadline:.0f}s + {LOGIND_MARGIN:.0f}s margin: drains at "
                "shutdown are cut to fit"
            )
            log.warning("%s", message)
        self.readiness.note(ReadyReason.INHIBIT_DELAY_TOO_SHORT, message)
