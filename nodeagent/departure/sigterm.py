"""SIGTERM: work out why the agent is being stopped, and drain when the policy says so.

In the host form SIGTERM is the fallback for a shutdown logind did not announce (one that
bypassed logind, `systemctl stop`), and systemd's job queue says which it is. In the pod
form a SIGTERM is a rollout, an uninstall or an eviction of the agent's own pod, and starts
a drain only inside a shutdown logind announced. A shutdown already announced by logind is
waited for: exiting would kill its drain midway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from nodeagent import metrics
from nodeagent.config import Config
from nodeagent.departure import budget
from nodeagent.departure.signal import Signal
from nodeagent.departure.worker import Departure
from nodeagent.report.conditions import ConditionWriter, ReadyReason
from nodeagent.report.readiness import Readiness
from nodeagent.types import Milestone, Reason, milestone

log = logging.getLogger(__name__)


class StopHandler:
    """What the daemon does with its SIGTERM, once, on the main thread."""

    def __init__(
        self,
        cfg: Config,
        departure: Departure,
        readiness: Readiness,
        report: ConditionWriter,
        announce: Callable[[bool, Reason], None],
        status: Callable[[str], None],
    ) -> None:
        self.cfg = cfg
        self.departure = departure
        self.readiness = readiness
        self.report = report
        self.announce = announce  # as if logind had said PrepareForShutdown
        self.status = status

    def on_stop(self) -> None:
        announced = self.departure.announced()
        if announced is not None:
            self._finish_announced(announced)
            return
        if self.cfg.form == "pod":
            self._pod_stopping()
            return
        from nodeagent.host.systemd_manager import why_stopping

        evidence = why_stopping()
        reason = evidence.kind
        jobs = ", ".join(evidence.jobs) or "none"
        milestone(
            log,
            Milestone.STOPPING,
            "stopping: reason %s (evidence: %s)",
            reason,
            jobs,
            reason=reason,
        )
        if reason is Reason.REMOVE:
            # The package is going away, the node is not: no drain, whatever the policy. The
            # heartbeat stops here, so say so instead of leaving a condition that looks alive.
            self.status("SIGTERM: package removal, no drain")
            self.readiness.removed()
            return
        milestone(
            log,
            Milestone.SHUTDOWN_ANNOUNCED,
            "SIGTERM taken as a shutdown: %s",
            reason,
            source="SIGTERM",
            reason=reason,
        )
        fixed = budget.sigterm(time.monotonic(), self.cfg.drain.deadline)
        signal = self.departure.shutdown(reason, fixed, "SIGTERM")
        signal.wait(fixed.stop_until)

    def check_termination_grace(self) -> None:
        """At start in the pod form: a pod grace shorter than the drain deadline means the
        kubelet's graceful node shutdown, where on, would kill the agent mid-drain."""
        grace = self.cfg.shutdown.termination_grace
        needed = budget.sigterm(0.0, self.cfg.drain.deadline).finish_until
        if self.cfg.form == "pod" and grace and grace < needed:
            self._grace_too_short(
                f"terminationGracePeriodSeconds {grace:.0f}s is shorter than the drain deadline "
                f"{self.cfg.drain.deadline:.0f}s: the kubelet's graceful node shutdown, if on, "
                "kills this agent mid-drain"
            )

    def _finish_announced(self, signal: Signal) -> None:
        """logind's drain is under way (or queued): exiting now would kill it midway."""
        assert signal.budget is not None, "a shutdown signal carries its budget"
        until = signal.budget.stop_until
        if signal.done.is_set():
            return
        self.status("stopping; waiting for the logind-triggered drain")
        if self.cfg.form == "pod":
            self._report_grace(until - time.monotonic())
        signal.wait(until)

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
        self.announce(True, Reason.UNKNOWN)
        signal = self.departure.announced()
        if signal is not None and signal.budget is not None:
            self.status("stopping inside a shutdown; draining first")
            signal.wait(signal.budget.stop_until)

    def _report_grace(self, needed: float) -> None:
        """SIGTERM mid-drain in a pod: said in NodeAgentReady (mid_drain_stop_message)."""
        self._grace_too_short(mid_drain_stop_message(needed, self.cfg.shutdown.termination_grace))
        self.report.flush(min(2.0, max(0.1, needed)))

    def _grace_too_short(self, message: str) -> None:
        log.warning("%s", message)
        metrics.TERMINATION_GRACE_SHORT.set(1)
        self.readiness.note(ReadyReason.TERMINATION_GRACE_TOO_SHORT, message)


def mid_drain_stop_message(needed: float, grace: float) -> str:
    """Why a pod agent got SIGTERM `needed` seconds before its drain deadline.

    Inside a shutdown that is most likely the kubelet's graceful node shutdown, which stops
    the agent with grace min(terminationGracePeriodSeconds, shutdownGracePeriodCriticalPods);
    the second is the kubelet's and not visible here, and a failed liveness probe or a
    rollout sends the same signal, so the message names the likely cause as such."""
    bound = f"at most {grace:.0f}s" if grace else "unknown"
    return (
        f"SIGTERM {needed:.0f}s before the drain deadline, with a grace of {bound}: most "
        "likely the kubelet's graceful node shutdown (no more than its "
        "shutdownGracePeriodCriticalPods), otherwise a liveness probe or a rollout; turn "
        "the kubelet's off, or keep both above the deadline"
    )
