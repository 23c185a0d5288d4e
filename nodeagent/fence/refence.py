"""The fence put back: what of the agent's departure someone else undid. Pure, no I/O.

`spec.unschedulable` is one shared boolean: the Cluster Autoscaler's clean-up, kured after
a failed drain and aws-node-termination-handler on a cancelled event set it false whoever
cordoned. A taint or label can also go by accident (Karpenter's reboot controller patches
the whole taint list without the resourceVersion). While the agent's reason for the
departure holds (fence.decision.reason_holds), each piece of its fence that is missing is
put back: the cordon whoever first set it, the taint (marker.TAINT) whenever a departure of
its own is recorded and the identity may taint, the load-balancer label only if the agent
set it and nobody gave it another value since (then it is theirs).

A cordon the agent found (a person's, another drainer's) and only recorded its drain under
is put back too: the node is leaving whoever cordoned it first, and under the kubelet's
identity (NodeRestriction: a node may not change its own taints) that cordon is the
departure's whole fence. The write that puts it back takes it over (`Refence.adopt`: the
marker's `cordoned-by`), so the departure's undo lifts it as its own. That is the right
undo: the cordon it first found had already been lifted by someone else (a person changing
their mind, or a tool that uncordons whoever cordoned; the API server cannot tell which),
so the last word anyone but the agent said on `spec.unschedulable` was "schedulable", and
the node goes back to that once the departure is over. Keeping it cordoned instead would
leave a node out of service with no owner to lift it, against the last word on it.

`missing` says what to restore; `Refences` counts the repairs of one departure, so that a
writer that keeps uncordoning (a loop of its own) is left the cordon after the third
within five minutes, and the taint alone holds the fence (docs/architecture.md). Without
the taint (the kubelet's identity) the cordon is the fence, and it is put back every time:
each repair answers one write of theirs, never faster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeagent.fence import marker
from nodeagent.fence.marker import NodeFence
from nodeagent.kube.client import JSON

CONTESTED_AFTER = 3  # cordons put back within CONTESTED_WINDOW, then only the taint
CONTESTED_WINDOW = 300.0  # seconds


@dataclass(frozen=True)
class Refence:
    """The pieces of the agent's fence to put back, and for the Event what changed."""

    cordon: bool = False  # spec.unschedulable, set false while the departure holds
    # The cordon put back was not the agent's (its drain recorded under someone else's):
    # the write takes it over (marker.CORDONED_BY), and the departure's undo lifts it.
    adopt: bool = False
    taint: bool = False  # marker.TAINT, removed
    label: bool = False  # marker.EXCLUDE_LB_LABEL, removed
    reason: str = ""  # the departure's reason (the taint's value)
    holds: str = ""  # why the departure still holds, for the Event

    def __bool__(self) -> bool:
        return self.cordon or self.taint or self.label

    def changes(self) -> list[str]:
        """What someone else changed, one phrase each (the Event and the log name them)."""
        said = []
        if self.cordon:
            said.append("spec.unschedulable set false")
        if self.taint:
            said.append(f"taint {marker.TAINT} removed")
        if self.label:
            said.append(f"label {marker.EXCLUDE_LB_LABEL} removed")
        return said

    def message(self, writer: str) -> str:
        what = "; ".join(self.changes())
        # A write that only removes a field (an uncordon) leaves no managedFields entry, so
        # the API server cannot name who removed it: the last writer it names is a hint.
        said = (
            f"{what} while {self.holds} holds (the API server does not record who removes a "
            f"field; the Node's last named writer: {writer}); set again"
        )
        if self.adopt:
            said += (
                "; the cordon, first someone else's and lifted, is nodeagent's now: it goes "
                "when the departure is over"
            )
        return said


NONE = Refence()


def missing(fence: NodeFence, holds: str, may_taint: bool = True) -> Refence:
    """What of the agent's fence on the Node (`fence`) is gone while its departure holds
    (`holds`: why, "" when it does not hold any more: nothing is put back then). Without
    `may_taint` (the kubelet's identity) the taint is never the agent's to put back.

    | the departure on the Node | cordon lifted | put back |
    | --- | --- | --- |
    | the agent's cordon and marker | yes | the cordon |
    | its drain recorded under someone else's cordon | yes | the cordon, taken over (adopt) |
    | none (a person's cordon alone) | yes | nothing: theirs |
    """
    if not holds or not fence.recorded:
        return NONE
    lifted = not fence.unschedulable
    return Refence(
        cordon=lifted,
        adopt=lifted and not fence.marked,
        taint=may_taint and not fence.tainted,
        label=fence.excluded_lb and fence.lb_label is None,
        reason=fence.reason,
        holds=holds,
    )


def last_writer(node: JSON, besides: str = "") -> str:
    """Who last wrote the Node's object (not its status), from managedFields: the manager,
    its operation and time; "unknown" when the API server keeps none. `besides`: a manager
    left out (the agent's own, read from the object its repair wrote)."""
    entries = [
        e
        for e in node["metadata"].get("managedFields") or []
        if not e.get("subresource") and e.get("manager") and e["manager"] != besides
    ]
    if not entries:
        return "unknown"
    last = max(entries, key=lambda e: str(e.get("time") or ""))
    return f"{last['manager']} ({last.get('operation', '?')} at {last.get('time', '?')})"


@dataclass
class Refences:
    """The cordons put back in one departure (keyed by its marker's start), in time."""

    departure: str = ""
    times: list[float] = field(default_factory=list)

    def contested(self, departure: str, now: float) -> bool:
        """The cordon was put back CONTESTED_AFTER times within CONTESTED_WINDOW in this
        departure: something keeps uncordoning; leave it the cordon where the taint holds
        (decision.refence)."""
        if departure != self.departure:
            return False
        return len([t for t in self.times if now - t < CONTESTED_WINDOW]) >= CONTESTED_AFTER

    def reset(self) -> None:
        """Forget every cordon put back (the Node they were put back on is gone); in place,
        as the worker's state and the executor share this one record."""
        self.departure, self.times = "", []

    def count(self, departure: str, now: float) -> int:
        """Note one cordon put back; returns how many in the window."""
        if departure != self.departure:
            self.departure, self.times = departure, []
        self.times = [t for t in self.times if now - t < CONTESTED_WINDOW] + [now]
        return len(self.times)


def contested_message(writer: str, may_taint: bool) -> str:
    """RefenceContested: the cordon was put back CONTESTED_AFTER times in one departure.
    Where the agent's taint holds the fence the cordon is left to them from here; under the
    kubelet's identity the cordon is the fence, and it goes on being put back."""
    said = (
        f"something keeps uncordoning this node ({writer}): the cordon was put back "
        f"{CONTESTED_AFTER} times; "
    )
    if may_taint:
        return said + f"the taint {marker.TAINT} holds the fence from here"
    return said + (
        "the identity may not taint its Node (the kubelet's), so the cordon is the fence and "
        "is put back each time it is lifted; stop the tool that lifts it, or give the agent "
        f"a dedicated identity for the taint {marker.TAINT}"
    )
