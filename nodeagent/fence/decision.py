"""Who holds the node, decided from what is observed: one pure function, no I/O.

`decide` maps what the agent sees (the Node's marker and taints, the shutdown that owns
the node if any, what just happened) to the one fence step that should follow. The
departure worker gathers the observation and hands the decision to the executor, the only
code that cordons, uncordons or drains. See docs/architecture.md for the flows.

The precedence, highest first:
1. A shutdown owns the node: only its own policy acts; evacuations and undoing wait.
2. A shutdown just called off: its fence goes, unless an evacuate taint wants the node
   cordoned, in which case the cordon is handed over to the evacuation.
3. The agent just started and the node can run pods again: a shutdown cordon left from
   before is undone (only the very marker seen at start).
4. The cloud's early warning acting now (nodeagent/fence/warning.py) fences per its
   kind's policy; once it is gone (canceled, over, expired), what it did is undone. A
   warning whose departure already happened (the machine went down and came back since
   its fence) fences no more, though the endpoint may list it for minutes after.
5. The Node as it is now: an evacuate taint fences per its policy; its removal undoes
   what the evacuation did. A person's cordon is never undone (one lifted by someone else
   while the departure held, and put back by the agent, is the agent's: fence/refence.py).

Before all of them, on a change of the Node: what someone else undid of the agent's fence
while its reason holds (a foreign uncordon, whoever first cordoned; its taint or label
removed) is put back (fence/refence.py), whoever owns the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nodeagent.config import EvacuateConfig
from nodeagent.fence import marker
from nodeagent.fence.marker import NodeFence
from nodeagent.fence.others import DRAINER_TAINTS, Others
from nodeagent.fence.refence import Refence, missing
from nodeagent.fence.warning import Warned, is_departed
from nodeagent.kube.client import JSON
from nodeagent.report import conditions
from nodeagent.report.conditions import Condition
from nodeagent.types import (
    FINISHED,
    GOING_DOWN,
    SHUTDOWN_REASONS,
    EvacuatePolicy,
    Notice,
    Occasion,
    Policy,
    Reason,
    Step,
    marker_reason,
)


@dataclass(frozen=True)
class Observed:
    """Everything a decision reads. Built by the departure worker from the API's Node."""

    occasion: Occasion
    fence: NodeFence
    boot_id: str  # the Node's current boot ID
    taint: str = ""  # the first configured evacuate taint on the Node, or ""
    evacuate_policy: EvacuatePolicy = EvacuatePolicy.EVACUATE
    # The shutdown that owns the node (set from the shutdown's occasion until cancelled).
    shutdown: Reason | None = None
    shutdown_policy: Policy = Policy.NONE  # for occasion SHUTDOWN: what its reason asks
    started_at: str = ""  # for occasion SETTLED: the marker seen when the agent started
    unclean: bool = False  # the previous boot ended without a drain (its condition stays)
    # Memory the Node cannot hold: a blocked evacuation waiting for its retry.
    retry_pending: bool = False
    # The cloud's early warning acting now, if any, and the others acting now behind it
    # (fence/warning.Due.acting); `warnings_known` is False until the metadata endpoint
    # was first read (a warning's fence is not undone before).
    warning: Warned | None = None
    also_acting: tuple[Warned, ...] = ()
    warnings_known: bool = True
    warning_ids: frozenset[str] = frozenset()  # the event IDs the endpoint lists now
    # The Node's note (marker.WARNING_DEPARTED): the event ID of a warning whose departure
    # happened; it fences no more while the endpoint still lists it.
    warning_departed: str = ""
    # Memory: the cordon was put back too often in this departure (fence/refence.py):
    # only the taint is put back.
    contested: bool = False
    # The identity may change the Node's taints (not the kubelet's, under NodeRestriction):
    # without, the agent's fence is the cordon alone.
    may_taint: bool = True
    # The other actors on the Node (fence/others.py): another drainer, another handler.
    others: Others = field(default_factory=Others)
    # Another handler of the cloud's notices acts here (fence/others.other_handler): the
    # warnings stand aside, but for the one the agent already fences for (it converges).
    handler: str = ""

    @property
    def acting(self) -> Warned | None:
        """The warning acting now whose departure did not happen yet: one the endpoint
        still lists after the machine came back hides none behind it. Departed warnings
        are told apart here and nowhere else."""
        for w in (self.warning, *self.also_acting):
            if w and not is_departed(w.notice, self.fence, self.boot_id, self.warning_departed):
                if self.handler and w.notice.event_id != self.fence.warning_id:
                    continue  # another handler acts on it
                return w
        return None

    @property
    def fencing(self) -> Warned | None:
        """The warning acting now, if its policy fences the node."""
        w = self.acting
        return w if w is not None and w.policy is not Policy.NONE else None

    @property
    def warning_fences(self) -> bool:
        return self.fencing is not None

    @property
    def evacuation_requested(self) -> bool:
        return asks_evacuation(self.taint, self.evacuate_policy)


@dataclass(frozen=True)
class Decision:
    """One step, and what to say about it (Event message when the write happened,
    NodeAgentDrained condition to report afterwards)."""

    step: Step
    reason: Reason | None = None  # the marker's reason for CORDON and DRAIN
    # CORDON and DRAIN: the agent's own marker with one of these reasons, written in this
    # boot, stays as it is (an evacuation never takes over a shutdown going down).
    keep: frozenset[Reason] = frozenset()
    # UNCORDON: only a marker with one of these reasons, and with `started_at` if given.
    undo: frozenset[Reason] = frozenset()
    started_at: str = ""
    event: str = ""
    condition: Condition | None = None
    why: str = ""
    # CORDON and DRAIN for the cloud's warning, or a shutdown's while the warning fenced:
    # which (its notes go into the marker; a shutdown's keeps them, so the next boot knows
    # the warning departed).
    warning: Notice | None = None
    # REFENCE: what to put back.
    refence: Refence | None = None
    # DRAIN at a shutdown: another actor drains the node (its evidence): fence, evict
    # nothing while it does, then drain what is left before the deadline.
    wait_for: str = ""


NOTHING = Decision(Step.NOTHING)


def asks_evacuation(taint: str, policy: EvacuatePolicy) -> bool:
    """An evacuate taint (`taint`, "" for none) whose policy does something."""
    return bool(taint) and policy is not EvacuatePolicy.IGNORE


def evacuation_asked(node: JSON, cfg: EvacuateConfig) -> bool:
    """The Node carries a configured evacuate taint whose policy does something."""
    return asks_evacuation(marker.first_taint(node, cfg.taints), cfg.policy)


def preempts(occasion: Occasion, running: Reason, asked: bool, drains: bool) -> str:
    """Why `occasion` stops the drain running for `running` at once, or "" when it waits
    its turn. `asked`: an evacuation is asked now (evacuation_asked); `drains`: the
    cloud's warning acting now asks for a drain (fence.warning.Heard.drains).

    The worker takes signals in order and a drain can take minutes; these cannot wait
    behind it, so the producer cancels the running drain's Context before queueing:

    | Occasion | Producer | Pre-empts the running drain? |
    | --- | --- | --- |
    | SHUTDOWN | logind's PrepareForShutdown(true) (lockholder), SIGTERM (sigterm) | an evacuation's or a warning's drain |
    | CANCELLED | logind's PrepareForShutdown(false) (lockholder) | the shutdown's drain |
    | NODE | the own-Node watch, a blocked drain's retry | an evacuation's drain, when the taint is gone |
    | NODE | the cloud's warnings changed, or a warning's time came | a warning's drain, when no warning asks a drain |
    | SETTLED | the after-start reconcile, once the node is Ready | never |
    """  # noqa: E501 (the table is read as a table)
    if occasion is Occasion.SHUTDOWN and running.while_up:
        return "the shutdown owns the node from here"
    if occasion is Occasion.CANCELLED and not running.while_up:
        return "the shutdown was called off"
    if occasion is Occasion.NODE and running is Reason.EVACUATE and not asked:
        return "evacuate taint removed during the drain"
    if occasion is Occasion.NODE and running is Reason.WARNING and not drains:
        return "the cloud's warning is over or asks for no drain now"
    return ""


def decide(o: Observed) -> Decision:
    """The fence step the observation asks for."""
    if o.occasion is Occasion.NODE:
        put_back = refence(o)
        if put_back:
            return Decision(Step.REFENCE, refence=put_back, why="; ".join(put_back.changes()))
    if o.occasion is Occasion.SHUTDOWN:
        return _shutdown(o)
    if o.shutdown is not None:
        return Decision(Step.NOTHING, why=f"the {o.shutdown} shutdown owns the node")
    if o.occasion is Occasion.CANCELLED:
        return _cancelled(o)
    if o.occasion is Occasion.SETTLED:
        return _settled(o)
    return _node(o)


def reason_holds(o: Observed) -> str:
    """Why the departure written on the Node (its marker's reason) is still wanted, or ""
    when it is not: its shutdown owns the node (a marker of this boot), its warning acts
    and fences, or its evacuate taint is there."""
    fence = o.fence
    reason = marker_reason(fence.reason) if fence.recorded else None
    if reason is None:
        return ""
    if reason.shutdown:
        this_boot = not fence.boot_id or not o.boot_id or fence.boot_id == o.boot_id
        return f"the {reason} shutdown" if o.shutdown is not None and this_boot else ""
    if reason is Reason.WARNING:
        w = o.fencing
        ours = w is not None and w.notice.event_id == fence.warning_id
        return w.notice.describe() if ours and w is not None else ""
    if reason is Reason.EVACUATE and o.evacuation_requested:
        return f"the evacuate taint {o.taint}"
    return ""


def _shutdown_over(o: Observed) -> bool:
    """A shutdown's taint with no shutdown owning the node (the agent started again): the
    departure is over, its taint goes at once, so DaemonSet pods (which tolerate the cordon,
    never the agent's taint) come back while the cordon waits for the node to be Ready."""
    reason = marker_reason(o.fence.reason) if o.fence.recorded else None
    shutdown = reason is not None and reason.shutdown
    return o.fence.tainted and shutdown and not reason_holds(o)


def refence(o: Observed) -> Refence:
    """What of the agent's fence to put back now (fence/refence.py); the cordon is left to
    whoever keeps lifting it once the repairs are contested, where the agent's taint holds
    the fence. Under the kubelet's identity the cordon is the whole fence: it is put back
    every time (each repair answers one write of theirs)."""
    put_back = missing(o.fence, reason_holds(o), o.may_taint)
    if o.contested and o.may_taint:
        return replace(put_back, cordon=False, adopt=False)
    return put_back


def _shutdown(o: Observed) -> Decision:
    reason = o.shutdown or Reason.UNKNOWN
    warning = o.fencing.notice if o.fencing is not None else None
    if o.shutdown_policy is Policy.CORDON:
        return Decision(Step.CORDON, reason, why=f"{reason}: policy cordon", warning=warning)
    if o.shutdown_policy is Policy.DRAIN:
        other = o.others.maybe_drainer(o.fence.cordoned_by_other)
        why = f"{reason}: policy drain" + (f"; {other} is draining it" if other else "")
        return Decision(Step.DRAIN, reason, why=why, warning=warning, wait_for=other)
    return Decision(Step.NOTHING, why=f"{reason}: policy none")


def _cancelled(o: Observed) -> Decision:
    if o.fencing is not None:
        # The warning holds the fence; its drain, if it asks one, follows as a NODE step.
        # The marker becomes the warning's (nothing of the called-off shutdown is kept),
        # so the warning's end undoes the cordon.
        cordon = _warning_cordon(o.fencing.notice, "shutdown cancelled; cloud warning")
        return replace(cordon, keep=frozenset())
    if o.evacuation_requested:
        # Rewrite the marker to the evacuation's, so the shutdown's cordon of this boot
        # is not kept as one that is still going down.
        return Decision(Step.CORDON, Reason.EVACUATE, why="shutdown cancelled; evacuate taint")
    return Decision(
        Step.UNCORDON,
        undo=SHUTDOWN_REASONS,
        event="Shutdown cancelled",
        condition=conditions.not_draining("Shutdown cancelled"),
        why="shutdown cancelled",
    )


def _settled(o: Observed) -> Decision:
    fence = o.fence
    reason = _shutdown_reason(fence)
    if reason is None or o.evacuation_requested or o.warning_fences:
        return Decision(Step.NOTHING, why="no shutdown cordon to undo")
    message = f"Uncordoned after {reason}"
    return Decision(
        Step.UNCORDON,
        undo=SHUTDOWN_REASONS,
        started_at=o.started_at,
        event=message,
        condition=None if o.unclean else conditions.not_draining(message),
        why=f"after start: the {reason} cordon",
    )


def _node(o: Observed) -> Decision:
    decision = _beside_drainer(o, _fence_step(o))
    if decision.step is Step.NOTHING and _forgotten(o):
        return Decision(
            Step.FORGET, why=f"the departed warning {o.warning_departed} is off the endpoint"
        )
    if decision.step is Step.NOTHING and _shutdown_over(o):
        return Decision(
            Step.UNTAINT,
            why=f"the {o.fence.reason} departure is over; its cordon stays until the node "
            "runs pods again",
        )
    return decision


def _beside_drainer(o: Observed, decision: Decision) -> Decision:
    """A drain the Node asks for (an evacuate taint, a warning) while another actor drains
    it: fence only (the cordon and the agent's taint; theirs stay theirs), never a second
    drain. Once fenced for that reason, nothing more; their drain gone, the drain follows."""
    drainer = o.others.drainer
    if decision.step is not Step.DRAIN or not drainer or o.taint in DRAINER_TAINTS:
        return decision  # (their taint configured as an evacuate taint: drain ahead of them)
    fence = o.fence
    fenced = fence.reason == decision.reason and (fence.cordoned_by_agent or fence.recorded)
    if fenced and (fence.tainted or not o.may_taint):
        return NOTHING
    why = f"{decision.reason}: {drainer} is draining this node; not draining it a second time"
    return replace(decision, step=Step.CORDON, why=why)


def _forgotten(o: Observed) -> bool:
    """The departed warning's note can go: the endpoint, read, no longer lists its ID, so
    a later warning reusing it (GCP's, AWS's Spot: one string for every notice) fences again."""
    return bool(o.warning_departed) and o.warnings_known and o.warning_departed not in o.warning_ids


def _fence_step(o: Observed) -> Decision:
    fence = o.fence
    if o.fencing is not None:
        return _warned(o, o.fencing)
    if fence.reason == Reason.WARNING and not o.warnings_known:
        return Decision(Step.NOTHING, why="a warning's fence; the endpoint not read yet")
    if fence.reason == Reason.WARNING and not o.taint:
        return Decision(
            Step.UNCORDON,
            undo=frozenset({Reason.WARNING}),
            event="Cloud warning over; uncordoned",
            condition=conditions.not_draining("Cloud warning over"),
            why="the cloud's warning is over (gone, or past its lifetime)",
        )
    if not o.taint:
        # The agent's evacuate cordon, or its record of an evacuation under a person's
        # cordon (the executor clears the record and leaves that cordon).
        if fence.reason == Reason.EVACUATE:
            return Decision(
                Step.UNCORDON,
                undo=frozenset({Reason.EVACUATE}),
                event="Evacuate taint removed; uncordoned",
                condition=conditions.not_draining("Evacuate taint removed"),
                why="evacuate taint removed",
            )
        return NOTHING
    policy = o.evacuate_policy
    if policy is EvacuatePolicy.IGNORE:
        return NOTHING
    if fence.cordoned_by_other and policy is EvacuatePolicy.NO_SCHEDULE:
        return NOTHING  # a person's cordon already keeps pods off
    ours = fence.cordoned_by_agent and fence.reason == Reason.EVACUATE
    if policy is EvacuatePolicy.NO_SCHEDULE:
        if ours:
            return NOTHING
        return Decision(
            Step.CORDON,
            Reason.EVACUATE,
            keep=GOING_DOWN,
            event="Cordoned by nodeagent (evacuate taint)",
            why=f"taint {o.taint}, policy NoSchedule",
        )
    if _fenced(fence) and fence.reason == Reason.EVACUATE and fence.result in FINISHED:
        return NOTHING  # drained under its cordon, the agent's or a person's
    if o.retry_pending:
        return NOTHING  # the last drain hit its deadline; the retry comes back to it
    return Decision(
        Step.DRAIN, Reason.EVACUATE, keep=GOING_DOWN, why=f"taint {o.taint}, policy Evacuate"
    )


def _warned(o: Observed, warned: Warned) -> Decision:
    """The fence the warning acting now asks for (an evacuate taint waits behind it)."""
    fence, notice = o.fence, warned.notice
    # The fence carries this very warning: its own, or a shutdown's that took it over (the
    # shutdown keeps the warning's keys; before the Node shows the next boot's ID, that
    # shutdown's marker is all that says the warning departed).
    ours = fence.warning_id == notice.event_id
    if warned.policy is Policy.CORDON:
        if fence.cordoned_by_other or (fence.unschedulable and ours):
            return NOTHING
        return _warning_cordon(notice, f"{notice.describe()}: policy cordon")
    if _fenced(fence) and ours and fence.result in FINISHED:
        return NOTHING  # drained for this very warning
    if o.retry_pending:
        return NOTHING  # the last drain hit its deadline; the retry comes back to it
    return Decision(
        Step.DRAIN,
        Reason.WARNING,
        keep=GOING_DOWN,
        warning=notice,
        why=f"{notice.describe()}: policy drain",
    )


def _fenced(fence: NodeFence) -> bool:
    """The departure's fence stands: its cordon, or the agent's own marker with its taint
    where someone keeps lifting the cordon (a drain done is not done again for that)."""
    return fence.unschedulable or (fence.marked and fence.tainted)


def _warning_cordon(notice: Notice, why: str) -> Decision:
    return Decision(
        Step.CORDON,
        Reason.WARNING,
        keep=GOING_DOWN,
        event=f"Cordoned by nodeagent ({notice.describe()})",
        warning=notice,
        why=why,
    )


def _shutdown_reason(fence: NodeFence) -> Reason | None:
    """The shutdown reason of the agent's marker, if it is one."""
    reason = marker_reason(fence.reason) if fence.marked else None
    return reason if reason is not None and reason.shutdown else None
