"""The kubelet's own graceful node shutdown, seen as the kubelet's inhibitor in logind.

With `shutdownGracePeriod` above 0 the kubelet holds a logind delay inhibitor (who
`kubelet`, mode `delay`) and, the moment `PrepareForShutdown(true)` arrives, kills every
active pod by priority group with no regard for PodDisruptionBudgets (Kubernetes 1.35,
`pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go`, `processShutdownEvent`), at the
same instant the agent starts evicting. The agent still cordons and evicts what it can,
but the PDB guarantee does not hold: this module tells whether that is the case, and says
so once per change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.host.logind import Inhibitor
from nodeagent.report import metrics

log = logging.getLogger(__name__)

KUBELET = "kubelet"
# The kubelet takes its inhibitor when its shutdown manager starts, which may be after the
# agent; logind says nothing when an inhibitor is taken, so the agent looks again this often.
CHECK_INTERVAL = 30.0


def kubelet_inhibitor(inhibitors: Iterable[Inhibitor]) -> Inhibitor | None:
    """The kubelet's inhibitor (a shutdown delay) among logind's inhibitors, if it holds one."""
    return next((i for i in inhibitors if i.who == KUBELET and i.delays_shutdown()), None)


def message(inhibitor: Inhibitor) -> str:
    return (
        f"the kubelet holds a logind delay lock (pid {inhibitor.pid}): its graceful node shutdown "
        "is on and kills every pod at shutdown without regard for PodDisruptionBudgets, "
        "racing the drain; set the kubelet's shutdownGracePeriod to 0s and let nodeagent "
        "drain"
    )


@dataclass
class KubeletShutdownReport:
    """Remembers what was last seen, so a change is logged once and the metric follows."""

    seen: Inhibitor | None = None
    checked: bool = False

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
