"""NodeAgentReady at the kubelet's cadence: every condition write refreshes it, the
heartbeat fills the quiet intervals, and `status` calls it stale after two of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hack import kubeutil as ku
from nodeagent.agent.status import STALE_AFTER, warnings
from nodeagent.kube.client import Kube
from nodeagent.report import conditions
from nodeagent.report.conditions import ConditionWriter, heartbeat_wait
from nodeagent.report.readiness import Readiness


@pytest.mark.parametrize(
    ("last_write", "now", "interval", "wait"),
    [
        (0.0, 1000.0, 300.0, 0.0),  # never written: at once
        (1000.0, 1000.0, 300.0, 300.0),  # just written: a whole interval
        (1000.0, 1200.0, 300.0, 100.0),  # another write 200 s ago: the rest of it
        (1000.0, 1300.0, 300.0, 0.0),  # due
        (1000.0, 5000.0, 300.0, 0.0),  # overdue
    ],
)
def test_heartbeat_wait(last_write: float, now: float, interval: float, wait: float) -> None:
    assert heartbeat_wait(last_write, now, interval) == wait


def node_with_heartbeat(age: float) -> dict[str, Any]:
    beat = (datetime.now(UTC) - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {"type": conditions.READY, "status": "True", "lastHeartbeatTime": beat}
    return {"metadata": {"name": "n"}, "status": {"conditions": [ready]}}


def test_status_calls_a_heartbeat_stale_after_two_intervals() -> None:
    assert warnings(node_with_heartbeat(STALE_AFTER - 60)) == []
    [stale] = warnings(node_with_heartbeat(STALE_AFTER + 60))
    assert "heartbeat is stale" in stale
    assert warnings({"metadata": {"name": "n"}, "status": {}}) == []  # never reported: no claim


def test_every_condition_write_carries_the_heartbeat(cluster: Any, kube: Kube) -> None:
    _group, node, _spare = ku.node_pair(cluster, kube, "hb")
    writer = ConditionWriter(kube, node)
    readiness = Readiness(writer)
    writer.write_now(readiness.condition)
    first = writer.last_write
    before = conditions.find(ku.node(kube, node), conditions.READY)
    assert first > 0 and before is not None

    # A NodeAgentDrained write, a second later, refreshes NodeAgentReady as well.
    ku.wait_until(lambda: datetime.now(UTC).replace(microsecond=0) > _stamp(before), 5)
    writer.set(conditions.not_draining("test"))
    assert writer.flush(10)
    after = conditions.find(ku.node(kube, node), conditions.READY)
    assert after is not None and _stamp(after) > _stamp(before)
    assert after["lastTransitionTime"] == before["lastTransitionTime"]
    assert writer.last_write > first


def _stamp(cond: dict[str, Any]) -> datetime:
    return datetime.strptime(cond["lastHeartbeatTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
