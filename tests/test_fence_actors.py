"""The fence nobody else undoes, against the real control plane: `nodeagent run` evacuates a
node, and the other actors' own writes (hack/actors/, each citing its source) uncordon it,
drop the agent's taint or its load-balancer label, as they do in their code. The agent puts
back what they undid from its Node watch, says so in a `Refenced` Event, and undoes only its
own when its departure ends. Each test prints what it measured."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.actors import api, cluster_autoscaler, kubectl, nth
from hack.agentproc import AgentProcess
from nodeagent.fence import marker
from nodeagent.kube.client import JSON, node_path, pods_path
from tests.test_evacuate import Node, node, workloads

__all__ = ["node"]  # the fixture, shared with tests/test_evacuate.py

SLOW = {"sim.nodeagent.io/termination-delay": "6s"}  # each pod takes 6 s to stop


def has_our_taint(n: JSON) -> bool:
    return marker.has_taint(n, marker.TAINT)


def fenced(n: JSON) -> bool:
    return bool(n["spec"].get("unschedulable")) and has_our_taint(n)


def refenced_events(node: Node) -> list[str]:
    return [e["message"] for e in ku.node_events(node.kube, node.name) if e["reason"] == "Refenced"]


def wait_fenced(node: Node, timeout: float = 15) -> float:
    """Until the Node is cordoned with the agent's taint; returns when (monotonic)."""
    ku.wait_until(lambda: fenced(node.obj()), timeout, "the agent's cordon and taint", step=0.01)
    return time.monotonic()


def slow_workloads(node: Node, replicas: int = 2) -> None:
    ku.deployment(node.kube, node.ns, "web", node.group, replicas, annotations=SLOW)
    ku.wait_running(node.kube, node.name, replicas)
    ku.open_node(node.kube, node.spare)


def test_a_foreign_uncordon_mid_drain_is_put_back_and_scale_up_lands_elsewhere(node: Node) -> None:
    """kubectl uncordon 2 s into an evacuation's drain, a Deployment scaled up at that
    moment: the taint stands throughout, the cordon is back within a watch event, no new
    pod is bound to the node, and the drain ends Drained with none of its pods left."""
    slow_workloads(node)
    node.agent()
    node.taint()
    wait_fenced(node)
    time.sleep(2)
    assert kubectl.Kubectl(node.kube).uncordon(node.name)  # whoever cordoned, it goes
    lifted = time.monotonic()
    node.kube.merge_patch(
        f"/apis/apps/v1/namespaces/{node.ns}/deployments/web", {"spec": {"replicas": 6}}
    )
    seen = node.obj()
    back = wait_fenced(node, 5)
    print(f"foreign uncordon -> cordoned again: {back - lifted:.3f}s")
    assert has_our_taint(seen), "the taint stood while the node was uncordoned"
    assert back - lifted < 2.0
    ku.wait_until(lambda: refenced_events(node), 10, "Refenced event")
    assert "spec.unschedulable set false" in refenced_events(node)[0]
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    assert not node.workload_pods()
    ku.wait_until(
        lambda: len(ku.running(ku.pods_on(node.kube, node.spare))) >= 6, 30, "six replicas"
    )
    # Every pod bound to the leaving node since the departure began (none stays bound).
    onto_departing = [p for p in ku.pods_on(node.kube, node.name) if p["metadata"]["name"]]
    print(f"scheduled_onto_departing: {len(onto_departing)}")
    assert not onto_departing
    assert node.cordoned() and has_our_taint(node.obj())


def test_nth_cancel_and_the_autoscalers_clean_up_are_put_back(node: Node) -> None:
    """NTH's cancel uncordons and removes a load-balancer label that is not its own (the
    agent's); the autoscaler's CleanToBeDeleted uncordons a node carrying its taint. Each
    is put back, one Event naming every change; the other actors' taints stay as they are."""
    workloads(node)
    node.agent()
    node.taint()
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    assert node.obj()["metadata"]["labels"][marker.EXCLUDE_LB_LABEL] == marker.AGENT

    handler = nth.NodeTerminationHandler(node.kube, node.name)
    # Its scheduled event's labels, as written when it saw the event before any cordon
    # (with one missing, its cancel's clean-up stops before the load-balancer label).
    for key, value in (
        (nth.EVENT_ID, "ev-1"),
        (nth.ACTION, nth.UNCORDON_AFTER_REBOOT),
        (nth.ACTION_TIME, "1795939200"),
    ):
        handler.add_label(key, value, skip_existing=False)
    handler.cancel()
    assert not handler.errors
    lifted = time.monotonic()
    back = wait_fenced(node, 5)
    ku.wait_until(
        lambda: node.obj()["metadata"]["labels"].get(marker.EXCLUDE_LB_LABEL) == marker.AGENT,
        5,
        "the agent's LB label back",
    )
    print(f"NTH cancel -> cordoned again: {back - lifted:.3f}s")
    # NTH's uncordon and its label removal are separate writes: the agent may put each back
    # in a write of its own, and each Event goes out after its write, on the sender's
    # thread. The label's, then, may come after the label is seen back.
    label_removed = f"label {marker.EXCLUDE_LB_LABEL} removed"
    ku.wait_until(
        lambda: label_removed in " ".join(refenced_events(node)), 10, "the label's Refenced"
    )
    message = " ".join(refenced_events(node))
    assert "spec.unschedulable set false" in message

    ca = cluster_autoscaler.ClusterAutoscaler(node.kube)
    ca.mark_to_be_deleted(node.name)
    ca.clean_to_be_deleted(api.get_node(node.kube, node.name))
    lifted = time.monotonic()
    back = wait_fenced(node, 5)
    print(f"autoscaler CleanToBeDeleted -> cordoned again: {back - lifted:.3f}s")
    assert not api.has_taint(node.obj(), cluster_autoscaler.TO_BE_DELETED)  # theirs: gone


def test_a_dropped_taint_is_put_back_and_the_undo_removes_only_the_agents(node: Node) -> None:
    """A whole-list taint patch without the resourceVersion (Karpenter's reboot
    controller's kind of write) drops the agent's taint: put back. When the evacuate taint
    goes, the agent's cordon, taint and label go; a foreign taint stays, and so does a label
    value that is no longer the agent's."""
    workloads(node)
    node.agent()
    node.taint()
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    other = {"key": "example.com/maintenance", "value": "x", "effect": "PreferNoSchedule"}
    taints = [t for t in node.obj()["spec"]["taints"] if t["key"] != marker.TAINT]
    node.kube.merge_patch(node_path(node.name), {"spec": {"taints": [*taints, other]}})
    dropped = time.monotonic()
    ku.wait_until(lambda: has_our_taint(node.obj()), 5, "taint back", step=0.01)
    print(f"taint dropped -> put back: {time.monotonic() - dropped:.3f}s")
    ku.wait_until(lambda: any("removed" in m for m in refenced_events(node)), 10, "Event")

    node.untaint()
    ku.wait_until(lambda: not node.cordoned(), 15, "uncordoned")
    after = node.obj()
    assert not has_our_taint(after)
    assert api.has_taint(after, other["key"])
    assert marker.EXCLUDE_LB_LABEL not in (after["metadata"].get("labels") or {})

    # Karpenter's termination overwrites the label's value: it is Karpenter's from then on.
    node.taint()
    ku.wait_until(lambda: fenced(node.obj()), 15, "fenced again")
    labels = {marker.EXCLUDE_LB_LABEL: "karpenter"}
    node.kube.merge_patch(node_path(node.name), {"metadata": {"labels": labels}})
    node.untaint()
    ku.wait_until(lambda: not node.cordoned(), 15, "uncordoned")
    assert node.obj()["metadata"]["labels"][marker.EXCLUDE_LB_LABEL] == "karpenter"


def test_a_persons_cordon_keeps_and_only_the_agents_taint_goes(node: Node) -> None:
    workloads(node)
    assert kubectl.Kubectl(node.kube).cordon(node.name)
    node.agent()
    node.taint()
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    assert has_our_taint(node.obj()) and node.cordoned()
    node.untaint()
    ku.wait_until(lambda: not has_our_taint(node.obj()), 15, "the agent's taint gone")
    assert node.cordoned()  # the person's cordon stays
    assert not refenced_events(node)


def test_a_pod_bound_after_the_drain_began_is_drained_too(node: Node) -> None:
    """A pod bound to the node mid-drain (it tolerates everything and names the node, as
    a bare pod may): `Drained` only once it is gone too."""
    slow_workloads(node)
    agent = node.agent()
    node.taint()
    wait_fenced(node)
    time.sleep(1)
    tolerate = [{"operator": "Exists"}]
    ku.bare_pod(node.kube, node.ns, "late", node.name, tolerations=tolerate)
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    assert not ku.exists(node.kube, f"{pods_path(node.ns)}/late")
    ku.wait_until(lambda: "bound after it began" in agent.output(), 5, "the late count")


def test_a_writer_that_keeps_uncordoning_is_left_the_cordon_and_the_taint_holds(
    node: Node,
) -> None:
    """F7: the cordon put back three times within five minutes in one departure, then
    `RefenceContested` once; from there the taint alone holds the fence."""
    workloads(node)
    node.agent()
    node.taint()
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    person = kubectl.Kubectl(node.kube)
    for _ in range(3):
        assert person.uncordon(node.name)
        wait_fenced(node, 5)
    ku.wait_until(lambda: "RefenceContested" in node.event_reasons(), 10, "RefenceContested")
    assert person.uncordon(node.name)
    time.sleep(2)
    assert not node.cordoned() and has_our_taint(node.obj())
    assert node.event_reasons().count("RefenceContested") == 1


def start_agent(node: Node, cluster: Any, tmp_path: Path, identity: str) -> AgentProcess:
    """`nodeagent run` under the kubelet's identity (its certificate: NodeRestriction
    forbids it its Node's taints) or under the agent's own (the admin kubeconfig)."""
    if identity != "kubelet":
        return node.agent()
    conf = cluster.mint_node_kubeconfig(node.name, tmp_path / "kubelet.conf")
    config = {"": {"kubelet_kubeconfig": str(conf)}}
    agent = AgentProcess.start(node.workdir, None, node.name, config)
    node.agents.append(agent)
    return agent


@pytest.mark.parametrize("identity", ["kubelet", "agent"])
def test_a_persons_cordon_lifted_mid_departure_is_put_back_as_the_agents(
    node: Node, cluster: Any, tmp_path: Path, identity: str
) -> None:
    """A person cordons; the evacuation drains under that cordon (its record beside it);
    the autoscaler's failed scale-down (CleanToBeDeleted) lifts the cordon, whoever set it.
    The node is still leaving: the cordon is put back and is the agent's now (under the
    kubelet's identity, which may not taint its Node, it is the whole fence), and the
    departure's undo lifts it as its own."""
    workloads(node)
    assert kubectl.Kubectl(node.kube).cordon(node.name)
    start_agent(node, cluster, tmp_path, identity)
    node.taint()
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    before = node.obj()
    assert marker.CORDONED_BY not in before["metadata"]["annotations"]  # the person's
    assert has_our_taint(before) == (identity == "agent")

    ca = cluster_autoscaler.ClusterAutoscaler(node.kube)
    ca.mark_to_be_deleted(node.name)
    ca.clean_to_be_deleted(api.get_node(node.kube, node.name))
    lifted = time.monotonic()
    ku.wait_until(node.cordoned, 5, "the cordon put back", step=0.01)
    print(
        f"{identity}: CleanToBeDeleted of a person's cordon -> cordoned again: "
        f"{time.monotonic() - lifted:.3f}s"
    )
    ku.wait_until(
        lambda: node.annotations().get(marker.CORDONED_BY) == marker.AGENT, 5, "taken over"
    )
    ku.wait_until(lambda: refenced_events(node), 10, "Refenced event")
    assert "is nodeagent's now" in refenced_events(node)[0]
    assert node.annotations()[marker.DRAIN_RESULT] == "drained"  # not drained a second time
    assert has_our_taint(node.obj()) == (identity == "agent")

    node.untaint()  # the departure is over: the cordon it holds goes, as its own
    ku.wait_until(lambda: not node.cordoned(), 15, "uncordoned")
    after = node.obj()
    assert not has_our_taint(after)
    assert marker.DRAIN_REASON not in (after["metadata"].get("annotations") or {})
    assert "forbidden" not in node.agents[0].output().lower()


def test_under_the_kubelets_identity_a_writer_that_keeps_uncordoning_is_answered_each_time(
    node: Node, cluster: Any, tmp_path: Path
) -> None:
    """F7 under the kubelet's identity: no taint can hold the fence, so the cordon is put
    back each time (one repair per lift of theirs), and `RefenceContested` says so once."""
    workloads(node)
    start_agent(node, cluster, tmp_path, "kubelet")
    node.taint()
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "Drained")
    person = kubectl.Kubectl(node.kube)
    for _ in range(5):
        assert person.uncordon(node.name)
        ku.wait_until(node.cordoned, 5, "the cordon put back", step=0.01)
    ku.wait_until(lambda: "RefenceContested" in node.event_reasons(), 10, "RefenceContested")
    time.sleep(1)  # said once, however many lifts follow
    assert node.cordoned() and not has_our_taint(node.obj())
    reasons = node.event_reasons()
    assert reasons.count("RefenceContested") == 1
    contested = [
        e for e in ku.node_events(node.kube, node.name) if e["reason"] == "RefenceContested"
    ]
    assert "the cordon is the fence and is put back each time" in contested[0]["message"]
