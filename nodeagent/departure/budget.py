"""One departure's time, fixed once when its signal arrives: the one place that adds the
margins (docs/architecture.md, "One time budget").

A drain at shutdown evicts until `drain_until`, then has FINISH_GRACE to delete what is
left (when forced) and record the result (`finish_until`); the stop handler waits for it
a little longer (`stop_until`), and systemd's stop timeout is extended past that
(`extend_until`), so neither kills the drain before it is done. logind waits at most its
InhibitDelayMaxSec, so a shutdown it announces drains for the configured deadline cut to
that delay minus LOGIND_MARGIN. An evacuation has no one waiting on it: its deadline is the
configured one, with the engine's own finish grace. Pure: every reader reads, none adds.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.host.logindconf import FINISH_GRACE, LOGIND_MARGIN
from nodeagent.types import Notice

ANNOUNCED_SLACK = 2.0  # the stop handler's wait beyond a shutdown drain's finish
EXTEND_SLACK = 10.0  # systemd's stop timeout beyond a shutdown drain's deadline
EVACUATE_FINISH = 10.0  # an evacuation's time after its deadline (forced deletes, result)
SHORTEST_DRAIN = 1.0  # a shutdown drain is never cut below this, however short the delay


@dataclass(frozen=True)
class Budget:
    """When each part of one drain must be over, in time.monotonic() seconds."""

    drain_until: float  # evictions stop: the drain's deadline
    finish_until: float  # forced deletes and the recorded result; no request after it
    stop_until: float  # a stop handler waits for the drain until here, then exits
    extend_until: float  # systemd's stop timeout reaches at least here
    # The kubelet's graceful node shutdown stops the node's ordinary pods from the signal
    # on (its logind lock was held when logind announced the shutdown): their time is the
    # kubelet's, and the drain deletes them at once (DrainOptions.kubelet_kills).
    kubelet_kills: bool = False
    # The cloud acts at the end of this budget (its warning's deadline cut the drain): as
    # at a shutdown, pods get no more grace than is left, and what is left is forced.
    final: bool = False

    @property
    def finish_grace(self) -> float:
        """Seconds after the deadline for finishing (what DrainOptions.finish_grace holds)."""
        return self.finish_until - self.drain_until

    def drain_seconds(self, now: float) -> float:
        """Seconds of evicting left at `now`."""
        return max(0.0, self.drain_until - now)


def shutdown_drain_seconds(deadline: float, inhibit_delay: float | None) -> float:
    """Seconds a drain at shutdown may take: the drain deadline, inside logind's delay
    (None: the delay is not known, and logind proceeds at it whatever the agent does)."""
    if inhibit_delay is None:
        return deadline
    return max(SHORTEST_DRAIN, min(deadline, inhibit_delay - LOGIND_MARGIN))


def inhibit_delay_short(deadline: float, inhibit_delay: float) -> bool:
    """logind's delay, less the margin for closing the lock, cuts a drain's deadline."""
    return inhibit_delay - LOGIND_MARGIN < deadline


def _going_down(now: float, seconds: float, kubelet_kills: bool = False) -> Budget:
    drain_until = now + seconds
    finish_until = drain_until + FINISH_GRACE
    return Budget(
        drain_until=drain_until,
        finish_until=finish_until,
        stop_until=finish_until + ANNOUNCED_SLACK,
        extend_until=drain_until + EXTEND_SLACK,
        kubelet_kills=kubelet_kills,
    )


def logind(
    now: float, deadline: float, inhibit_delay: float | None, kubelet_kills: bool = False
) -> Budget:
    """A shutdown logind announced at `now` (PrepareForShutdown true); `kubelet_kills`:
    the kubelet held its own delay lock then, so its graceful shutdown is killing pods."""
    return _going_down(now, shutdown_drain_seconds(deadline, inhibit_delay), kubelet_kills)


def sigterm(now: float, deadline: float) -> Budget:
    """A SIGTERM logind did not announce: nothing else bounds it but the deadline."""
    return _going_down(now, deadline)


WARNING_MARGIN = 10.0  # a warning's drain ends this long before the cloud acts


def warning(now: float, deadline: float, seconds_left: float | None) -> Budget:
    """A drain for the cloud's warning starting at `now`: the configured deadline, cut to
    end WARNING_MARGIN before the cloud acts (`seconds_left` from now; None: not said)."""
    if seconds_left is None or seconds_left - WARNING_MARGIN >= deadline:
        return evacuation(now, deadline)
    drain_until = now + max(SHORTEST_DRAIN, seconds_left - WARNING_MARGIN - FINISH_GRACE)
    finish_until = drain_until + FINISH_GRACE
    return Budget(drain_until, finish_until, finish_until, finish_until, final=True)


def evacuation(now: float, deadline: float) -> Budget:
    """An evacuation's drain starting at `now`."""
    drain_until = now + deadline
    finish_until = drain_until + EVACUATE_FINISH
    return Budget(drain_until, finish_until, finish_until, finish_until)


def while_up(now: float, deadline: float, notice: Notice | None, epoch: float) -> Budget:
    """A drain while the machine runs on, starting at `now` (`epoch` on the wall clock, as
    the cloud's times are): an evacuation's time, or the warning's (`notice`), cut to end
    before the cloud acts."""
    if notice is None or notice.deadline is None:
        return evacuation(now, deadline)
    return warning(now, deadline, notice.deadline - epoch)
