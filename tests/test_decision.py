"""The fence decision as a table: what is observed -> the one step that should follow.

Every case the integration tests drive through a real API server (cancel mid-drain,
evacuate during shutdown, reconcile after reboot with a taint, a person's cordon) has its
row here, where it runs in microseconds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nodeagent.fence.decision import Decision, Observed, decide
from nodeagent.fence.marker import NodeFence
from nodeagent.report.conditions import DRAINED
from nodeagent.types import (
    GOING_DOWN,
    SHUTDOWN_REASONS,
    EvacuatePolicy,
    Occasion,
    Policy,
    Reason,
    Step,
)

BOOT = "boot-2"
TAINT = "nodeagent.io/evacuate"

FREE = NodeFence(False, False, "", "", "", "")
PERSON = NodeFence(True, False, "", "", "", "")


def ours(reason: str, result: str = "", boot: str = BOOT, started: str = "t1") -> NodeFence:
    """The agent's cordon: its marker, its taint beside it."""
    return NodeFence(True, True, reason, started, boot, result, tainted=True)


def recorded(reason: str, result: str = "") -> NodeFence:
    """A person's cordon with the agent's record of a drain under it (no marker), and the
    agent's taint."""
    return NodeFence(True, False, reason, "t1", BOOT, result, tainted=True)


def seen(occasion: Occasion, fence: NodeFence = FREE, **kw: Any) -> Observed:
    return replace(Observed(occasion, fence, BOOT), **kw)


UNDO_SHUTDOWN = Decision(Step.UNCORDON, undo=SHUTDOWN_REASONS)
UNDO_EVACUATE = Decision(Step.UNCORDON, undo=frozenset({Reason.EVACUATE}))


def step(d: Decision) -> tuple[Step, Reason | None, frozenset[Reason], frozenset[Reason], str]:
    return (d.step, d.reason, d.keep, d.undo, d.started_at)


NOTHING = (Step.NOTHING, None, frozenset(), frozenset(), "")
EVAC_CORDON = (Step.CORDON, Reason.EVACUATE, GOING_DOWN, frozenset(), "")
EVAC_DRAIN = (Step.DRAIN, Reason.EVACUATE, GOING_DOWN, frozenset(), "")
EVAC_UNDO = (Step.UNCORDON, None, frozenset(), frozenset({Reason.EVACUATE}), "")
CANCEL_UNDO = (Step.UNCORDON, None, frozenset(), SHUTDOWN_REASONS, "")
HANDOVER = (Step.CORDON, Reason.EVACUATE, frozenset(), frozenset(), "")

NO_SCHEDULE = EvacuatePolicy.NO_SCHEDULE
IGNORE = EvacuatePolicy.IGNORE

ROWS: list[tuple[str, Observed, tuple[object, ...]]] = [
    # -- a shutdown: its policy, nothing else ------------------------------------------
    *[
        (
            f"shutdown {r} drain",
            seen(Occasion.SHUTDOWN, shutdown=r, shutdown_policy=Policy.DRAIN),
            (Step.DRAIN, r, frozenset(), frozenset(), ""),
        )
        for r in sorted(SHUTDOWN_REASONS)
    ],
    (
        "shutdown cordon policy",
        seen(Occasion.SHUTDOWN, shutdown=Reason.REBOOT, shutdown_policy=Policy.CORDON),
        (Step.CORDON, Reason.REBOOT, frozenset(), frozenset(), ""),
    ),
    (
        "shutdown none policy",
        seen(Occasion.SHUTDOWN, shutdown=Reason.RESTART, shutdown_policy=Policy.NONE),
        NOTHING,
    ),
    (
        "shutdown over an evacuation: the shutdown drains with its own reason",
        seen(
            Occasion.SHUTDOWN,
            ours("evacuate"),
            taint=TAINT,
            shutdown=Reason.POWEROFF,
            shutdown_policy=Policy.DRAIN,
        ),
        (Step.DRAIN, Reason.POWEROFF, frozenset(), frozenset(), ""),
    ),
    (
        "shutdown over a person's cordon still drains",
        seen(Occasion.SHUTDOWN, PERSON, shutdown=Reason.STOP, shutdown_policy=Policy.DRAIN),
        (Step.DRAIN, Reason.STOP, frozenset(), frozenset(), ""),
    ),
    # -- while a shutdown owns the node, nothing else acts ---------------------------
    (
        "evacuate taint during a shutdown",
        seen(Occasion.NODE, ours("poweroff"), taint=TAINT, shutdown=Reason.POWEROFF),
        NOTHING,
    ),
    (
        "taint removed during a shutdown",
        seen(Occasion.NODE, ours("poweroff"), shutdown=Reason.POWEROFF),
        NOTHING,
    ),
    (
        "settled while a shutdown owns the node",
        seen(Occasion.SETTLED, ours("reboot", boot="boot-1"), shutdown=Reason.REBOOT),
        NOTHING,
    ),
    # -- a cancelled shutdown ---------------------------------------------------------
    ("cancel mid-drain undoes the fence", seen(Occasion.CANCELLED, ours("poweroff")), CANCEL_UNDO),
    (
        "cancel before any cordon still asks (nothing to undo)",
        seen(Occasion.CANCELLED),
        CANCEL_UNDO,
    ),
    (
        "cancel with an evacuate taint hands the cordon over",
        seen(Occasion.CANCELLED, ours("poweroff"), taint=TAINT),
        HANDOVER,
    ),
    (
        "cancel with an ignored taint undoes",
        seen(Occasion.CANCELLED, ours("reboot"), taint=TAINT, evacuate_policy=IGNORE),
        CANCEL_UNDO,
    ),
    # -- after start: the last boot's shutdown cordon ----------------------------------
    (
        "reboot cordon undone once settled, only that marker",
        seen(Occasion.SETTLED, ours("reboot", boot="boot-1"), started_at="t1"),
        (Step.UNCORDON, None, frozenset(), SHUTDOWN_REASONS, "t1"),
    ),
    (
        "stop cordon undone after a restart in the same boot",
        seen(Occasion.SETTLED, ours("stop"), started_at="t1"),
        (Step.UNCORDON, None, frozenset(), SHUTDOWN_REASONS, "t1"),
    ),
    (
        "reconcile after reboot with a taint leaves it to the evacuation",
        seen(Occasion.SETTLED, ours("reboot", boot="boot-1"), taint=TAINT, started_at="t1"),
        NOTHING,
    ),
    (
        "settled: an evacuation's cordon is not the shutdown's",
        seen(Occasion.SETTLED, ours("evacuate"), started_at="t1"),
        NOTHING,
    ),
    ("settled: a person's cordon stays", seen(Occasion.SETTLED, PERSON), NOTHING),
    ("settled: a manual drain's marker stays", seen(Occasion.SETTLED, ours("manual")), NOTHING),
    # -- the Node as it is: evacuate taints ---------------------------------------------
    ("taint: cordon and drain", seen(Occasion.NODE, taint=TAINT), EVAC_DRAIN),
    (
        "taint NoSchedule: cordon only",
        seen(Occasion.NODE, taint=TAINT, evacuate_policy=NO_SCHEDULE),
        EVAC_CORDON,
    ),
    (
        "taint NoSchedule, already ours",
        seen(Occasion.NODE, ours("evacuate"), taint=TAINT, evacuate_policy=NO_SCHEDULE),
        NOTHING,
    ),
    (
        "taint NoSchedule under a person's cordon",
        seen(Occasion.NODE, PERSON, taint=TAINT, evacuate_policy=NO_SCHEDULE),
        NOTHING,
    ),
    ("taint Ignore", seen(Occasion.NODE, taint=TAINT, evacuate_policy=IGNORE), NOTHING),
    (
        "evacuation already drained",
        seen(Occasion.NODE, ours("evacuate", "drained"), taint=TAINT),
        NOTHING,
    ),
    (
        "a shutdown cordon seen after start: its taint goes, the cordon waits",
        seen(Occasion.NODE, ours("reboot")),
        (Step.UNTAINT, None, frozenset(), frozenset(), ""),
    ),
    (
        # Someone else uncordoned while the taint holds: put back, not drained again
        # (tests/test_refence.py has the whole table).
        "evacuation drained, then uncordoned by someone else",
        seen(Occasion.NODE, replace(ours("evacuate", "drained"), unschedulable=False), taint=TAINT),
        (Step.REFENCE, None, frozenset(), frozenset(), ""),
    ),
    (
        "evacuation drained, uncordoned again and again (contested): no second drain",
        seen(
            Occasion.NODE,
            replace(ours("evacuate", "drained"), unschedulable=False),
            taint=TAINT,
            contested=True,
        ),
        NOTHING,
    ),
    (
        "evacuation forced is finished too",
        seen(Occasion.NODE, ours("evacuate", "forced"), taint=TAINT),
        NOTHING,
    ),
    (
        "evacuation timed out earlier: drain again",
        seen(Occasion.NODE, ours("evacuate", "timed-out"), taint=TAINT),
        EVAC_DRAIN,
    ),
    (
        "evacuation killed mid-drain (no result): finish it after restart",
        seen(Occasion.NODE, ours("evacuate"), taint=TAINT),
        EVAC_DRAIN,
    ),
    (
        "blocked evacuation waits for its retry",
        seen(Occasion.NODE, ours("evacuate", "timed-out"), taint=TAINT, retry_pending=True),
        NOTHING,
    ),
    (
        "a person's cordon with a taint: drain under it",
        seen(Occasion.NODE, PERSON, taint=TAINT),
        EVAC_DRAIN,
    ),
    (
        "a person's cordon already drained under (the agent's record beside it)",
        seen(Occasion.NODE, recorded("evacuate", "drained"), taint=TAINT),
        NOTHING,
    ),
    (
        "a person's cordon, an evacuation cut short under it: drain again",
        seen(Occasion.NODE, recorded("evacuate"), taint=TAINT),
        EVAC_DRAIN,
    ),
    (
        "a person's cordon, the taint removed: the record goes, the cordon stays",
        seen(Occasion.NODE, recorded("evacuate", "drained")),
        EVAC_UNDO,
    ),
    (
        "a person's cordon, the record of a shutdown's drain: nothing to undo",
        seen(Occasion.NODE, replace(recorded("poweroff", "drained"), tainted=False)),
        NOTHING,
    ),
    (
        "the last boot's shutdown cordon under a taint: the evacuation takes it over",
        seen(Occasion.NODE, ours("reboot", boot="boot-1"), taint=TAINT),
        EVAC_DRAIN,
    ),
    # -- the taint removed ---------------------------------------------------------------
    (
        "taint removed: undo the evacuation",
        seen(Occasion.NODE, ours("evacuate", "drained")),
        EVAC_UNDO,
    ),
    (
        "taint removed under Ignore still undoes an earlier evacuation",
        seen(Occasion.NODE, ours("evacuate"), evacuate_policy=IGNORE),
        EVAC_UNDO,
    ),
    ("taint removed: a person's cordon stays", seen(Occasion.NODE, PERSON), NOTHING),
    (
        "no taint: a shutdown's cordon is not the evacuation's",
        seen(Occasion.NODE, replace(ours("stop"), tainted=False)),  # its taint went at start
        NOTHING,
    ),
    ("nothing at all", seen(Occasion.NODE), NOTHING),
    (
        "a departed warning's note, its event off the endpoint: forgotten",
        seen(Occasion.NODE, warning_departed="ev-1"),
        (Step.FORGET, None, frozenset(), frozenset(), ""),
    ),
]


@pytest.mark.parametrize(("observed", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_decision_table(observed: Observed, expected: tuple[object, ...]) -> None:
    assert step(decide(observed)) == expected


def test_the_table_covers_every_occasion_and_step() -> None:
    assert {r[1].occasion for r in ROWS} == set(Occasion)
    assert {r[2][0] for r in ROWS} == set(Step)


def test_what_a_decision_says() -> None:
    cancel = decide(seen(Occasion.CANCELLED, ours("poweroff")))
    assert cancel.event == "Shutdown cancelled"
    assert cancel.condition is not None and cancel.condition.reason == "NotDraining"
    settled = decide(seen(Occasion.SETTLED, ours("reboot"), started_at="t1"))
    assert settled.event == "Uncordoned after reboot"
    assert settled.condition is not None and settled.condition.type == DRAINED
    # After an unclean boot its UncleanShutdown condition stays: no NotDraining over it.
    unclean = decide(seen(Occasion.SETTLED, ours("reboot"), started_at="t1", unclean=True))
    assert unclean.step is Step.UNCORDON and unclean.condition is None
    removed = decide(seen(Occasion.NODE, recorded("evacuate", "drained")))
    assert removed.step is Step.UNCORDON and removed.condition is not None
    assert removed.condition.message == "Evacuate taint removed"
    cordon = decide(seen(Occasion.NODE, taint=TAINT, evacuate_policy=NO_SCHEDULE))
    assert cordon.event == "Cordoned by nodeagent (evacuate taint)"


def test_every_reason_has_a_policy_and_only_shutdowns_go_down() -> None:
    from nodeagent.config import ShutdownConfig

    cfg = ShutdownConfig(restart="cordon", unknown="drain")
    assert cfg.policy(Reason.SOFT_REBOOT) is Policy.DRAIN
    assert cfg.policy(Reason.RESTART) is Policy.CORDON
    assert cfg.policy(Reason.UNKNOWN) is Policy.DRAIN
    assert cfg.policy(Reason.REMOVE) is Policy.NONE  # a removal never drains
    assert cfg.policy(Reason.EVACUATE) is Policy.NONE  # not a shutdown
    assert {r for r in Reason if r.going_down} == GOING_DOWN
    assert Reason.STOP.shutdown and not Reason.STOP.going_down
    assert not Reason.EVACUATE.shutdown and not Reason.RESTART.shutdown
