"""The kubelet's own graceful node shutdown, seen as the kubelet's inhibitor in logind.

With `shutdownGracePeriod` above 0 the kubelet holds a logind delay inhibitor (who
`kubelet`, mode `delay`) and, the moment `PrepareForShutdown(true)` arrives, kills every
active pod by priority group with no regard for PodDisruptionBudgets (Kubernetes 1.35,
`pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go`, `processShutdownEvent`), at the
same instant the agent starts. The PDB guarantee does not hold then, and the drain deletes
the pods the kubelet is killing (nodeagent/drain/eviction.py,
Evictor.delete_for_kubelet_shutdown): this module tells whether that is the case, and says
so once per change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nodeagent import metrics
from nodeagent.host.logind import Inhibitor

log = logging.getLogger(__name__)

KUBELET = "kubelet"
# Where the kubelet asks logind for the delay its graceful shutdown needs (the sum of its
# priority groups' time), when logind's is shorter (kubelet 1.35,
# pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go, OverrideInhibitDelay).
KUBELET_DROPIN = "/etc/systemd/logind.conf.d/99-kubelet.conf"
# The kubelet takes its inhibitor when its shutdown manager starts, which may be after the
# agent; logind says nothing when an inhibitor is taken, so the agent looks again this often.
CHECK_INTERVAL = 30.0
# ... and every second in its first minutes, until it sees it: a shutdown soon after boot
# (a reboot loop, a scale-in of a node just up) must find it known already, since the
# drain takes the kubelet's pods out at once only if it is (seen on the real node: a
# reboot 10 s after the agent started, the lock seen 9 s into the drain, requests lost).
FAST_CHECK_INTERVAL = 1.0
FAST_CHECK_FOR = 120.0


def next_check(now: float, started: float, seen: bool) -> float:
    """When to look for the kubelet's lock next."""
    fast = not seen and now - started < FAST_CHECK_FOR
    return now + (FAST_CHECK_INTERVAL if fast else CHECK_INTERVAL)


def kubelet_inhibitor(inhibitors: Iterable[Inhibitor]) -> Inhibitor | None:
    """The kubelet's inhibitor (a shutdown delay) among logind's inhibitors, if it holds one."""
    return next((i for i in inhibitors if i.who == KUBELET and i.delays_shutdown()), None)


def message(inhibitor: Inhibitor) -> str:
    return (
        f"the kubelet holds a logind delay lock (pid {inhibitor.pid}): its graceful node shutdown "
        "is on and kills every pod at shutdown within its own budget, without regard for "
        "PodDisruptionBudgets; the agent deletes the pods it kills so that they leave their "
        "Services at once, but cannot give them more time than the kubelet does; set the "
        "kubelet's shutdownGracePeriod to 0s to let nodeagent drain with PDBs and each "
        "pod's own grace"
    )


def requested_delay(text: str) -> float | None:
    """InhibitDelayMaxSec in the kubelet's drop-in (whole seconds, as it writes it)."""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "InhibitDelayMaxSec":
            try:
                return float(value.strip())
            except ValueError:
                return None
    return None


def outvoted_message(requested: float, delay: float) -> str | None:
    """What to say when logind's delay is shorter than the one the kubelet asked for:
    its shutdown manager then refuses to start (it checks at its own start and gives up
    after a few reads), so its graceful shutdown is off until it restarts."""
    if requested <= delay:
        return None
    return (
        f"the kubelet asked logind for {requested:.0f}s ({KUBELET_DROPIN}) and logind's delay "
        f"is {delay:.0f}s: the kubelet's graceful node shutdown cannot start ('Failed to "
        "start node shutdown manager' in its log) and nodeagent drains this node alone"
    )


def check_outvoted(delay: float, path: str = KUBELET_DROPIN) -> str | None:
    """Read the kubelet's drop-in, if it wrote one, and say whether `delay` outvotes it."""
    try:
        requested = requested_delay(Path(path).read_text())
    except OSError:
        return None
    return None if requested is None else outvoted_message(requested, delay)


@dataclass
class KubeletShutdownReport:
    """Remembers what was last seen, so a change is logged once and the metric follows."""

    seen: Inhibitor | None = None
    checked: bool = False
    outvoted: str | None = None  # what was last said of a kubelet logind outvoted

    def observe_outvoted(self, said: str | None) -> None:
        """The kubelet's request against logind's delay (check_outvoted), said once: the
        kubelet writes its drop-in when its shutdown manager starts, after the agent may
        have looked, so this is looked at with every check of its lock."""
        if said and said != self.outvoted:
            log.warning("%s", said)
        self.outvoted = said

    def observe(self, inhibitor: Inhibitor | None) -> bool:
        """Record the latest look; True when it differs from the previous one."""
        first = not self.checked
        changed = first or (inhibitor is None) != (self.seen is None)
        self.seen, self.checked = inhibitor, True
        metrics.KUBELET_GRACEFUL_SHUTDOWN.set(0 if inhibitor is None else 1)
        if changed and inhibitor is not None:
            log.warning("PDBs are not guaranteed at shutdown: %s", message(inhibitor))
        elif changed and not first:
            log.info("the kubelet no longer holds a logind delay lock")
        return changed
