"""When the node is back after a boot: Ready by a heartbeat of this boot's kubelet
(nodeagent/agent/reconcile.py, ready_in_this_boot)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.reconcile import ready_in_this_boot
from nodeagent.kube.client import api_stamp

BOOT = 1_800_000_000.6  # this boot began (epoch seconds), mid-second


def node(status: str | None, heartbeat: float | None) -> dict[str, Any]:
    if status is None:
        return {"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}}
    ready: dict[str, Any] = {"type": "Ready", "status": status}
    if heartbeat is not None:
        ready["lastHeartbeatTime"] = api_stamp(heartbeat)
    return {"status": {"conditions": [ready]}}


@pytest.mark.parametrize(
    ("status", "heartbeat", "back"),
    [
        # This boot's kubelet posted Ready.
        ("True", BOOT + 12, True),
        # The same whole second as the boot: heartbeats carry no fraction.
        ("True", BOOT, True),
        # The last boot's kubelet: its Ready outlives it for the controller's grace.
        ("True", BOOT - 5, False),
        ("True", BOOT - 3600, False),
        # This boot's kubelet, not Ready (yet), or lost.
        ("False", BOOT + 12, False),
        ("Unknown", BOOT + 12, False),
        # No heartbeat, no Ready condition.
        ("True", None, False),
        (None, None, False),
    ],
)
def test_ready_in_this_boot(status: str | None, heartbeat: float | None, back: bool) -> None:
    assert ready_in_this_boot(node(status, heartbeat), BOOT) is back
