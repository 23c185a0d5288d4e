"""The own Node deleted while the agent drains for the machine going down: the drain goes
on (its pods still run on this kubelet and answer their evictions; stopped, the shutdown
would take them down mid-request, as the departure benchmark's node-deleted kind showed).
The departure worker in process, against the real API server."""

from __future__ import annotations

import time

from hack import kubeutil as ku
from hack.actors import kubectl
from nodeagent.departure import budget
from nodeagent.departure.worker import Departure
from nodeagent.kube.client import Kube
from nodeagent.types import Reason
from tests.test_departure import blocked_node, drain_running, worker

__all__ = ["blocked_node", "worker"]  # the fixtures, shared with tests/test_departure.py


def test_a_shutdown_drain_goes_on_when_the_node_is_deleted(
    kube: Kube, blocked_node: str, worker: Departure
) -> None:
    worker.shutdown(Reason.POWEROFF, budget.logind(time.monotonic(), 60, None), "logind", 1)
    ku.wait_until(lambda: drain_running(worker), 15, "the poweroff drain")
    node = ku.node(kube, blocked_node)
    assert kubectl.Kubectl(kube).delete_node(blocked_node)
    worker.node_deleted(node)  # the watch's DELETED, as the daemon hands it on
    time.sleep(2.0)
    assert drain_running(worker), "the drain for the poweroff stopped with the Node's deletion"
