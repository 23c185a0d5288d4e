"""The departure scene's table of kinds (hack/departure/ways.py): every kind has its row, and
when the node was let go is told by the row, from what the agent's milestones say and what
the scene saw (a table over a scene of recorded values: no node boots here)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from hack import milestones as ms
from hack.departure.kinds import CONFIGS, Kind
from hack.departure.ways import WAYS, released

OFF = 40.0
# The agent's drains, by reason, and when each ended.
DRAINS = {"poweroff": 50.0, "reboot": 60.0, "warning": 70.0, "soft-reboot": 80.0}


@dataclass
class Seen:
    """What ways.released reads of a scene."""

    agent: bool
    shape: str
    evacuated: float | None = 10.0
    stopped: float | None = 20.0
    returned: float | None = 30.0
    records: list[ms.Record] = field(default_factory=list)

    @property
    def config(self) -> object:
        return CONFIGS["nodeagent" if self.agent else "none"]

    def agent_milestones(self) -> list[ms.Record]:
        return self.records


def scene(agent: bool, shape: str = "nspawn") -> Seen:
    records = [
        ms.Record(ms.DRAIN_FINISHED, at, {"reason": reason, "outcome": "drained"})
        for reason, at in DRAINS.items()
    ]
    return Seen(agent, shape, records=records)


def test_every_kind_has_its_row() -> None:
    assert set(WAYS) == set(Kind)


@pytest.mark.parametrize(
    ("kind", "agent", "shape", "expected"),
    [
        (Kind.POWEROFF, True, "nspawn", DRAINS["poweroff"]),
        (Kind.POWEROFF, False, "nspawn", OFF),
        (Kind.SIGTERM_IGNORING, True, "nspawn", DRAINS["poweroff"]),
        (Kind.DAEMONSET_POWEROFF, True, "nspawn", DRAINS["poweroff"]),
        (Kind.POWEROFF_TARGET, True, "nspawn", DRAINS["poweroff"]),
        # systemd 252's logind does not say a reboot: the agent drains it for poweroff.
        (Kind.REBOOT, True, "nspawn", DRAINS["poweroff"]),
        (Kind.REBOOT, True, "vm", DRAINS["reboot"]),
        (Kind.REBOOT, False, "vm", OFF),
        (Kind.SOFT_REBOOT, True, "vm", DRAINS["soft-reboot"]),
        (Kind.ROLLING_REBOOT, True, "nspawn", 30.0),  # the wave's end, either way
        (Kind.ROLLING_REBOOT, False, "nspawn", 30.0),
        (Kind.EVACUATE, True, "nspawn", 10.0),
        (Kind.EVACUATE, False, "nspawn", OFF),
        (Kind.STOP, True, "nspawn", 20.0),
        (Kind.STOP, False, "nspawn", OFF),
        (Kind.SPOT_INTERRUPTION, True, "nspawn", DRAINS["warning"]),
        (Kind.SPOT_INTERRUPTION, False, "nspawn", OFF),
        # Beside the other actors: the agent's drain for the poweroff they meddle with, or
        # the actor's own drain's end (scene.evacuated) with the agent or without it.
        (Kind.FOREIGN_UNCORDON, True, "nspawn", DRAINS["poweroff"]),
        (Kind.FOREIGN_UNCORDON, False, "nspawn", OFF),
        (Kind.NODE_DELETED, True, "nspawn", DRAINS["poweroff"]),
        (Kind.NODE_DELETED, False, "nspawn", OFF),
        (Kind.AUTOSCALER_SCALE_DOWN, True, "nspawn", 10.0),
        (Kind.AUTOSCALER_SCALE_DOWN, False, "nspawn", 10.0),
        (Kind.KARPENTER_TERMINATION, True, "nspawn", 10.0),
        (Kind.KARPENTER_TERMINATION, False, "nspawn", 10.0),
        (Kind.KURED_REBOOT, True, "nspawn", 10.0),
        (Kind.KURED_REBOOT, False, "nspawn", 10.0),
    ],
)
def test_the_release_is_the_rows(kind: Kind, agent: bool, shape: str, expected: float) -> None:
    assert released(scene(agent, shape), kind, OFF) == expected  # type: ignore[arg-type]


def test_no_drain_milestone_means_no_release() -> None:
    seen = scene(True)
    seen.records = [r for r in seen.records if r.fields["reason"] != "poweroff"]
    assert released(seen, Kind.POWEROFF, OFF) is None  # type: ignore[arg-type]


def test_only_a_notice_counts_its_cap_from_the_poweroff() -> None:
    assert {k for k, way in WAYS.items() if way.cap_from_poweroff} == {Kind.SPOT_INTERRUPTION}
    assert {k for k, way in WAYS.items() if way.both_nodes} == {Kind.ROLLING_REBOOT}


def test_only_karpenter_runs_without_the_do_not_disrupt_pod() -> None:
    """Karpenter waits for a do-not-disrupt pod without end: its kind has none."""
    assert {k for k, way in WAYS.items() if not way.dnd} == {Kind.KARPENTER_TERMINATION}
