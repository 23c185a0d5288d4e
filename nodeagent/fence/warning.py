"""A cloud's early warning as the fence reads it, and which one acts now: pure, no I/O.

The readers in nodeagent/cloud/ turn what the node's metadata endpoint says into
`Notice`s (nodeagent/types.py); `due` picks the one that acts at a given time under the
``[warnings]`` policies (the strongest policy, then the soonest deadline). A scheduled
event acts only from its start less the configured lead, so a node told days ahead keeps
serving until then; a rebalance recommendation, which never ends by itself, acts only for
its configured lifetime, so no node stays cordoned for a warning that did not come true.
A notice gone from the endpoint (canceled, completed, or over) is simply absent: the
decision then undoes what the warning did (nodeagent/fence/decision.py).

Times here are wall-clock epoch seconds: the cloud states them that way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.config import WarningsConfig
from nodeagent.fence import marker
from nodeagent.types import DEPARTING, Notice, Policy, WarningKind, stamp

# The strongest policy acts when two warnings are due at once.
_STRENGTH = {Policy.NONE: 0, Policy.CORDON: 1, Policy.DRAIN: 2}
# A notice whose times are this far from the node's clock is not believed: a stale or
# garbled answer, or a clock far off, must never drain a node.
PAST_LIMIT = 3600.0  # its deadline passed this long ago
FUTURE_LIMIT = {  # its deadline this far ahead (a scheduled event may be weeks away)
    WarningKind.INTERRUPTION: 3600.0,
    WarningKind.TERMINATION: 3 * 3600.0,
    WarningKind.MIGRATION: 7 * 86400.0,
    WarningKind.MAINTENANCE: 60 * 86400.0,
    WarningKind.REBALANCE: 86400.0,
}


def marker_notes(notice: Notice) -> dict[str, str]:
    """The marker's warning keys for a fence taken for `notice`."""
    notes = {marker.WARNING: f"{notice.cloud} {notice.kind}", marker.WARNING_ID: notice.event_id}
    if notice.deadline is not None:
        notes[marker.WARNING_DEADLINE] = stamp(notice.deadline)
    return notes


def is_departed(notice: Notice, fence: marker.NodeFence, boot_id: str, noted: str) -> bool:
    """`notice` announces a departure that already happened: its ID is the Node's note
    (marker.WARNING_DEPARTED) or that of the fence's departed warning; it fences no more."""
    if notice.kind not in DEPARTING:
        return False
    return notice.event_id in {noted, fence.departed(boot_id)} - {""}


@dataclass(frozen=True)
class Warned:
    """The warning that acts now, with what its kind's policy asks."""

    notice: Notice
    policy: Policy


@dataclass(frozen=True)
class Due:
    """What `due` found: the warnings that act now (strongest policy first, then the
    soonest deadline), those that act later, and when the answer next changes by time
    alone (math.inf: not by time)."""

    acting: tuple[Warned, ...] = ()
    later: tuple[Notice, ...] = ()
    next_change: float = math.inf

    @property
    def warned(self) -> Warned | None:
        """The warning that acts now, if any (whether it departed is the decision's)."""
        return self.acting[0] if self.acting else None


@dataclass(frozen=True)
class Heard:
    """The cloud's warnings as the departure last heard them, handed into one decision
    (nodeagent/departure/warnings.py keeps them; the decision reads only this)."""

    known: bool = False  # the endpoint was read (a warning's fence is not undone before)
    ids: frozenset[str] = frozenset()  # the event IDs the endpoint lists
    acting: tuple[Warned, ...] = ()  # as Due.acting

    @property
    def drains(self) -> bool:
        """The warning acting now asks for a drain."""
        return bool(self.acting) and self.acting[0].policy is Policy.DRAIN


def window(notice: Notice, cfg: WarningsConfig) -> tuple[float, float]:
    """From when to when `notice` acts (epoch seconds)."""
    start = -math.inf
    end = math.inf
    if notice.kind is WarningKind.MAINTENANCE and notice.deadline is not None:
        start = notice.deadline - cfg.maintenance_lead
    if notice.kind is WarningKind.REBALANCE:
        end = notice.since + cfg.rebalance_lifetime
    return start, end


def due(notices: Iterable[Notice], cfg: WarningsConfig, now: float) -> Due:
    """The warnings acting at `now`: the strongest policy, then the soonest deadline."""
    acting: list[Warned] = []
    later: list[Notice] = []
    next_change = math.inf
    for notice in notices:
        start, end = window(notice, cfg)
        if now < start:
            later.append(notice)
            next_change = min(next_change, start)
        elif now < end:
            acting.append(Warned(notice, cfg.policy(notice.kind)))
            next_change = min(next_change, end)
    # Stable: of two alike, the one the endpoint listed first.
    acting.sort(key=lambda w: (-_STRENGTH[w.policy], _deadline(w.notice)))
    return Due(tuple(acting), tuple(later), next_change)


def _deadline(notice: Notice) -> float:
    return notice.deadline if notice.deadline is not None else math.inf


def implausible(notice: Notice, now: float) -> str:
    """Why `notice` is not to be believed at `now`, or "" (a clock far off, a stale one)."""
    if notice.deadline is None:
        return ""
    if notice.deadline < now - PAST_LIMIT:
        return f"its time {stamp(notice.deadline)} passed more than {PAST_LIMIT:.0f}s ago"
    limit = FUTURE_LIMIT[notice.kind]
    if notice.deadline > now + limit:
        return f"its time {stamp(notice.deadline)} is more than {limit:.0f}s ahead"
    return ""
