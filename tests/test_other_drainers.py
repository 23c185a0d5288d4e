"""Beside another drainer, against the real control plane: the Cluster Autoscaler's
scale-down re-enacted (hack/actors/cluster_autoscaler.py, each write citing its source). At
a shutdown the agent fences, evicts nothing while the autoscaler drains, and drains only
what is left at its reserve; an evacuation beside it fences only, and drains once the
autoscaler gives the node back; the autoscaler's taint and cordon stay the autoscaler's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from hack import kubeutil as ku
from hack.actors import api, cluster_autoscaler, nth
from nodeagent.config import Config
from nodeagent.departure import budget
from nodeagent.departure.executor import AutoscalerHold
from nodeagent.departure.worker import Departure
from nodeagent.fence import marker
from nodeagent.fence.others import DELAY_DELETION
from nodeagent.kube.client import JSON, Kube
from nodeagent.types import Cloud, Notice, Reason, WarningKind
from tests.test_departure import running_departure
from tests.test_evacuate import Node, node
from tests.test_fence_actors import SLOW, has_our_taint

__all__ = ["node"]  # the fixture, shared with tests/test_evacuate.py


@pytest.fixture
def worker(kube: Kube, node: Node) -> Iterator[Departure]:
    yield from running_departure(Config(node=node.name), kube)


def agents_evictions(kube: Kube, ns: str) -> list[JSON]:
    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [
        e
        for e in events
        if e.get("reason") == "Evicted" and (e.get("source") or {}).get("component") == "nodeagent"
    ]


def marked_by_the_autoscaler(node: Node, worker: Departure) -> cluster_autoscaler.ClusterAutoscaler:
    ku.deployment(node.kube, node.ns, "web", node.group, 2, annotations=SLOW)
    ku.wait_running(node.kube, node.name, 2)
    ku.open_node(node.kube, node.spare)
    ca = cluster_autoscaler.ClusterAutoscaler(node.kube)
    ca.mark_to_be_deleted(node.name)
    worker.observe(node.obj())  # as the own-Node watch delivers it
    return ca


def test_a_shutdown_waits_for_the_autoscalers_drain(node: Node, worker: Departure) -> None:
    ca = marked_by_the_autoscaler(node, worker)
    threading.Thread(target=ca.drain, args=(node.name,), daemon=True).start()
    start = time.monotonic()
    signal = worker.shutdown(Reason.POWEROFF, budget.sigterm(start, 40), "logind", 1)
    assert signal.wait(start + 40)
    took = time.monotonic() - start
    print(f"shutdown beside the autoscaler's drain: lock held {took:.2f}s")
    assert signal.decision is not None and "cluster-autoscaler" in signal.decision.wait_for
    assert not node.workload_pods()
    assert len(ca.evicted) == 2 and not agents_evictions(node.kube, node.ns)
    after = node.obj()
    assert api.has_taint(after, cluster_autoscaler.TO_BE_DELETED) and has_our_taint(after)
    assert marker.CORDONED_BY not in after["metadata"]["annotations"]  # theirs
    assert took < 15  # its drain (6 s pods), not the 40 s budget


def test_a_shutdown_drains_what_a_stalled_autoscaler_left(node: Node, worker: Departure) -> None:
    marked_by_the_autoscaler(node, worker)  # marked, never drains (a failed scale-down)
    start = time.monotonic()
    signal = worker.shutdown(Reason.POWEROFF, budget.sigterm(start, 24), "logind", 1)
    assert signal.wait(start + 30)
    took = time.monotonic() - start
    print(f"shutdown beside a stalled autoscaler: drained itself after {took:.2f}s")
    assert not node.workload_pods()
    assert len(agents_evictions(node.kube, node.ns)) == 2
    assert took >= 10  # it waited for the other drain first


def test_an_evacuation_beside_the_autoscaler_fences_then_drains_once_given_back(
    node: Node,
) -> None:
    ku.deployment(node.kube, node.ns, "web", node.group, 2)
    ku.wait_running(node.kube, node.name, 2)
    ku.open_node(node.kube, node.spare)
    ca = cluster_autoscaler.ClusterAutoscaler(node.kube)
    ca.mark_to_be_deleted(node.name)
    agent = node.agent()
    node.taint()
    ku.wait_until(lambda: has_our_taint(node.obj()), 15, "the agent's taint beside theirs")
    time.sleep(2)
    assert len(node.workload_pods()) == 2  # not drained a second time
    assert "not draining it a second time" in agent.output()
    assert node.obj()["metadata"]["annotations"][marker.DRAIN_REASON] == "evacuate"

    ca.clean_to_be_deleted(api.get_node(node.kube, node.name))  # a failed scale-down
    ku.wait_until(lambda: not node.workload_pods(), 30, "the evacuation's own drain")
    after = node.obj()
    assert after["spec"].get("unschedulable") and has_our_taint(after)
    assert after["metadata"]["annotations"][marker.CORDONED_BY] == "nodeagent"


def test_the_autoscalers_deletion_is_held_by_one_annotation_of_the_agents(
    node: Node, kube: Kube
) -> None:
    hold = AutoscalerHold(kube, node.name, "cluster-autoscaler (taint ...)")
    hold.hold("poweroff: 2 volume(s) detaching")
    held = node.obj()["metadata"]["annotations"]
    assert held[DELAY_DELETION] == "poweroff: 2 volume(s) detaching"
    assert cluster_autoscaler.has_delay_deletion(node.obj())  # what the autoscaler reads
    hold.release()
    assert DELAY_DELETION not in node.obj()["metadata"]["annotations"]
    AutoscalerHold(kube, node.name, "").hold("x")  # not removing the node: nothing written
    assert DELAY_DELETION not in node.obj()["metadata"]["annotations"]


@pytest.mark.parametrize("nth_acts", [False, True], ids=["alone", "beside NTH"])
def test_a_spot_notice_stands_aside_where_nth_acts(
    node: Node, worker: Departure, nth_acts: bool
) -> None:
    """The same Spot notice: alone the agent drains for it; where aws-node-termination-
    handler's marks are on the Node (its event-id label, as its scheduled event writes it)
    the warning stands aside: no cordon, no drain, no taint (the shutdown path stays on)."""
    ku.deployment(node.kube, node.ns, "web", node.group, 1)
    ku.wait_running(node.kube, node.name, 1)
    ku.open_node(node.kube, node.spare)
    if nth_acts:
        handler = nth.NodeTerminationHandler(node.kube, node.name)
        handler.add_label(nth.EVENT_ID, "ev-1", skip_existing=False)
    worker.observe(node.obj())
    now = time.time()
    spot = Notice(Cloud.AWS, WarningKind.INTERRUPTION, "spot-1", "spot terminate", now + 120, now)
    worker.warned((spot,))
    if nth_acts:
        time.sleep(3)
        assert not node.cordoned() and not has_our_taint(node.obj())
        assert len(node.workload_pods()) == 1
    else:
        ku.wait_until(lambda: not node.workload_pods(), 20, "the warning's drain")
        assert node.cordoned() and has_our_taint(node.obj())
