"""A drain's result written late (nodeagent/departure/lateresult.py): when it still applies
to the Node, and how the decision reads the Node meanwhile; pure tables (its retries are
kube/backoff.py's, tested in tests/test_condition_retries.py)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.departure.lateresult import (
    Unrecorded,
    overlay,
)
from nodeagent.fence import marker
from nodeagent.kube.client import api_stamp
from nodeagent.types import DrainOutcome

LOST = 1_800_000_000.0  # wall clock when the result was lost
LATE = Unrecorded("evacuate", DrainOutcome.TIMED_OUT, "uid-1", LOST, 0.0)


def node(uid: str = "uid-1", **ann: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "uid": uid, "annotations": ann},
        "spec": {"unschedulable": True},
    }


MARKER = {marker.CORDONED_BY: "nodeagent", marker.DRAIN_REASON: "evacuate"}
BEGUN = {marker.DRAIN_STARTED_AT: api_stamp(LOST - 20)}

APPLIES = {
    "its own marker, no result yet": (node(**MARKER, **BEGUN), True),
    "its record under a person's cordon": (
        node(**{marker.DRAIN_REASON: "evacuate"}, **BEGUN),
        True,
    ),
    "a result written meanwhile": (
        node(**MARKER, **BEGUN, **{marker.DRAIN_RESULT: "drained"}),
        False,
    ),
    "uncordoned since (no marker)": (node(), False),
    "another reason's fence": (node(**MARKER | {marker.DRAIN_REASON: "reboot"}, **BEGUN), False),
    "a drain begun after the loss": (
        node(**MARKER, **{marker.DRAIN_STARTED_AT: api_stamp(LOST + 30)}),
        False,
    ),
    "another Node object": (node("uid-2", **MARKER, **BEGUN), False),
}


@pytest.mark.parametrize("case", APPLIES)
def test_a_late_result_applies_only_to_its_own_drains_marker(case: str) -> None:
    obj, applies = APPLIES[case]
    assert LATE.applies(obj) is applies
    read = overlay(obj, LATE)
    result = read["metadata"]["annotations"].get(marker.DRAIN_RESULT)
    if applies:
        assert result == "timed-out"
        assert marker.DRAIN_RESULT not in obj["metadata"]["annotations"]  # a copy
    else:
        assert read is obj


def test_nothing_kept_reads_the_node_as_it_is() -> None:
    obj = node(**MARKER, **BEGUN)
    assert overlay(obj, None) is obj
    assert overlay({"metadata": {"name": "n"}}, LATE) == {"metadata": {"name": "n"}}
