"""The daemon's own-Node watch: the evacuate taint, its undo, and restarts mid-way.

Every test runs `nodeagent run` as a real process against the real control plane.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack import milestones as ms
from hack.actors import api
from hack.agentproc import JSON_LOG, AgentProcess
from nodeagent.fence.marker import CORDONED_BY, DRAIN_REASON, DRAIN_RESULT, cordon
from nodeagent.kube.client import JSON, Kube, node_path, pods_path
from nodeagent.report import conditions

TAINT = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}


@dataclass
class Node:
    kube: Kube
    name: str
    spare: str
    ns: str
    group: str
    workdir: Path
    kubeconfig: str
    agents: list[AgentProcess]

    def agent(self, *, json_log: bool = False, **config: dict[str, Any]) -> AgentProcess:
        """`json_log`: its milestones readable (AgentProcess.milestones)."""
        settings = {**config, **JSON_LOG} if json_log else config
        agent = AgentProcess.start(self.workdir, self.kubeconfig, self.name, settings)
        self.agents.append(agent)
        return agent

    def obj(self) -> JSON:
        return ku.node(self.kube, self.name)

    # Taints change as `kubectl taint` users and client-go's taint helpers change them: an
    # update of the Node as read (its resourceVersion), read again after a conflict. A
    # whole-list write without it would drop a taint another writer (the agent's own,
    # the node controller's unschedulable) added since the read.
    def taint(self, taint: JSON = TAINT) -> None:
        def add(n: JSON) -> bool:
            others = [t for t in api.taints(n) if t["key"] != taint["key"]]
            if len(others) + 1 == len(api.taints(n)) and taint in api.taints(n):
                return False
            n.setdefault("spec", {})["taints"] = [*others, taint]
            return True

        api.update_node(self.kube, self.obj(), add)

    def untaint(self, key: str = TAINT["key"]) -> None:
        api.update_node(self.kube, self.obj(), api.drop_taint(key))

    def annotations(self) -> dict[str, str]:
        return dict(self.obj()["metadata"].get("annotations") or {})

    def cordoned(self) -> bool:
        return bool(self.obj()["spec"].get("unschedulable"))

    def condition(self, cond_type: str = conditions.DRAINED) -> JSON:
        return conditions.find(self.obj(), cond_type) or {}

    def workload_pods(self) -> list[JSON]:
        return [
            p
            for p in ku.running(ku.pods_on(self.kube, self.name))
            if p["metadata"]["labels"].get("app") != "ds"
        ]

    def event_reasons(self) -> list[str]:
        return [e["reason"] for e in ku.node_events(self.kube, self.name)]


@pytest.fixture
def node(cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path) -> Iterator[Node]:
    group, name, spare = ku.node_pair(cluster, kube, "ev")
    n = Node(kube, name, spare, group, group, tmp_path, admin_kubeconfig, [])
    try:
        yield n
    finally:
        for agent in n.agents:
            agent.stop(signal.SIGKILL)


def workloads(n: Node, replicas: int = 2) -> None:
    ku.deployment(n.kube, n.ns, "web", n.group, replicas)
    ku.daemonset(n.kube, n.ns, "ds", n.group)
    ku.wait_running(n.kube, n.name, replicas + 1)
    ku.open_node(n.kube, n.spare)


def test_evacuate_taint_drains_and_removal_undoes(node: Node) -> None:
    workloads(node)
    node.agent()
    node.taint()

    ku.wait_until(lambda: not node.workload_pods(), 30, "workload pods evicted")
    ann = node.annotations()
    assert node.cordoned()
    assert ann[CORDONED_BY] == "nodeagent" and ann[DRAIN_REASON] == "evacuate"
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 10, "Drained condition")
    assert node.condition()["status"] == "True"
    ds = [p for p in ku.running(ku.pods_on(node.kube, node.name))]
    assert [p["metadata"]["labels"]["app"] for p in ds] == ["ds"]  # DaemonSet pod stays

    node.untaint()
    ku.wait_until(lambda: not node.cordoned(), 15, "uncordon after the taint goes")
    assert CORDONED_BY not in node.annotations()
    ku.wait_until(lambda: "Uncordoned" in node.event_reasons(), 10, "Uncordoned event")
    ku.wait_until(lambda: node.condition().get("reason") == "NotDraining", 10, "NotDraining")


def test_no_schedule_policy_only_cordons(node: Node) -> None:
    workloads(node)
    node.agent(evacuate={"policy": "NoSchedule"})
    node.taint()

    ku.wait_until(node.cordoned, 15, "cordon")
    assert node.annotations()[DRAIN_REASON] == "evacuate"
    assert len(node.workload_pods()) == 2  # nothing evicted
    node.untaint()
    ku.wait_until(lambda: not node.cordoned(), 15, "uncordon")


def test_ignore_policy_does_nothing(node: Node) -> None:
    workloads(node)
    agent = node.agent(evacuate={"policy": "Ignore"})
    seen = "nodeagent_loop_last_success_timestamp_seconds"
    before = ku.wait_until(lambda: agent.metric(seen, loop="node"), 15, "the node watch")
    node.taint()
    # The watch delivered the tainted Node once its last success moved on.
    ku.wait_until(lambda: agent.metric(seen, loop="node") > before, 15, "the taint seen")
    assert not node.cordoned()
    assert CORDONED_BY not in node.annotations()
    assert len(node.workload_pods()) == 2
    assert "evacuate: " not in agent.output()


def test_extra_taint_keys_from_config(node: Node) -> None:
    workloads(node, 1)
    node.agent(evacuate={"taints": ["ToBeDeletedByClusterAutoscaler"]})
    node.taint(
        {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}
    )
    ku.wait_until(lambda: not node.workload_pods(), 30, "evicted for the autoscaler's taint")
    assert node.annotations()[DRAIN_REASON] == "evacuate"


def test_a_persons_cordon_is_never_undone(node: Node) -> None:
    workloads(node)
    node.kube.merge_patch(node_path(node.name), {"spec": {"unschedulable": True}})
    first = node.agent(json_log=True)
    node.taint()
    ku.wait_until(lambda: not node.workload_pods(), 30, "drained under the person's cordon")
    # The Node records the drain beside the person's cordon, without claiming it.
    ku.wait_until(lambda: node.annotations().get(DRAIN_RESULT) == "drained", 10, "the record")
    assert CORDONED_BY not in node.annotations()
    assert node.annotations()[DRAIN_REASON] == "evacuate"

    # A restarted agent reads that record and does not drain the node again.
    first.kill()
    second = node.agent(json_log=True)
    seen = "nodeagent_loop_last_success_timestamp_seconds"
    ku.wait_until(lambda: second.metric(seen, loop="node"), 15, "the node watch")
    # No moment says "decided to do nothing": a window after the watch handed the Node
    # over, long enough for a wrong decision's drain to start.
    time.sleep(3)
    # Both agents log to one file: the first agent's drain is the only one that started.
    drains = [r for r in second.milestones() if r.name == ms.DRAIN_STARTED]
    assert [r.fields.get("reason") for r in drains] == ["evacuate"], second.output()

    node.untaint()
    ku.wait_until(lambda: "Evacuate taint removed" in str(node.condition()), 15, "undo seen")
    ku.wait_until(lambda: DRAIN_REASON not in node.annotations(), 10, "the record cleared")
    assert node.cordoned()  # still the person's
    assert "Uncordoned" not in node.event_reasons()


def test_killed_mid_evacuation_finishes_after_restart(node: Node) -> None:
    # Three replicas, one disruption at a time, each replacement Ready after 2 s: the
    # drain takes about 6 s, long enough to kill the agent in the middle of it.
    ku.deployment(
        node.kube, node.ns, "web", node.group, 3, annotations={"sim.nodeagent.io/ready-delay": "2s"}
    )
    ku.pdb(node.kube, node.ns, "web", {"app": "web"}, maxUnavailable=1)
    ku.wait_running(node.kube, node.name, 3, timeout=60)
    ku.wait_pdb_ready(node.kube, node.ns, "web")
    ku.open_node(node.kube, node.spare)
    first = node.agent()
    node.taint()
    ku.wait_until(lambda: len(node.workload_pods()) == 2, 30, "the first eviction")
    first.kill()
    left = len(node.workload_pods())
    assert left >= 1, "the drain finished before the kill; the test proves nothing"
    assert node.annotations().get(DRAIN_RESULT) is None

    node.agent()
    ku.wait_until(lambda: not node.workload_pods(), 60, "the restarted agent finishes")
    ku.wait_until(lambda: node.annotations().get(DRAIN_RESULT) == "drained", 10, "result")


def test_taint_removed_while_agent_down_is_undone_on_start(node: Node) -> None:
    workloads(node, 1)
    first = node.agent()
    node.taint()
    ku.wait_until(lambda: not node.workload_pods(), 30, "evacuated")
    first.kill()
    node.untaint()
    assert node.cordoned()

    node.agent()
    ku.wait_until(lambda: not node.cordoned(), 15, "undone on start")
    assert CORDONED_BY not in node.annotations()


def test_taint_removed_during_drain_stops_it_and_undoes(node: Node) -> None:
    ku.deployment(node.kube, node.ns, "quorum", node.group, 2)
    ku.pdb(node.kube, node.ns, "quorum", {"app": "quorum"}, minAvailable=2)  # never allows
    ku.wait_running(node.kube, node.name, 2)
    ku.wait_pdb_ready(node.kube, node.ns, "quorum")
    agent = node.agent()
    node.taint()
    ku.wait_until(lambda: node.condition().get("reason") == "Draining", 15, "Draining")
    ku.wait_until(
        lambda: agent.metric("nodeagent_evictions_total", result="blocked"),
        15,
        "blocked by the PDB",
    )

    node.untaint()
    ku.wait_until(lambda: not node.cordoned(), 10, "uncordoned promptly")
    assert len(node.workload_pods()) == 2
    # The condition writer writes after the uncordon and the cancel's line, on its own.
    ku.wait_until(lambda: node.condition().get("reason") == "NotDraining", 10, "NotDraining")


def test_heartbeat_advances_and_transition_time_holds(node: Node) -> None:
    node.agent(reporting={"heartbeat_interval": "1s"})
    first = ku.wait_until(lambda: node.condition(conditions.READY), 15, "NodeAgentReady")
    assert first["status"] == "True" and first["reason"] == "AgentRunning"
    later = ku.wait_until(
        lambda: (
            (c := node.condition(conditions.READY))["lastHeartbeatTime"]
            != first["lastHeartbeatTime"]
            and c
        ),
        10,
        "a newer heartbeat",
    )
    assert later["lastHeartbeatTime"] > first["lastHeartbeatTime"]
    assert later["lastTransitionTime"] == first["lastTransitionTime"]


def test_healthz_and_metrics(node: Node) -> None:
    agent = node.agent()
    ku.wait_until(lambda: agent.healthz() == (200, "ok\n"), 15, "healthy")
    ku.wait_until(
        lambda: agent.metric("nodeagent_loop_last_success_timestamp_seconds", loop="heartbeat"),
        10,
    )
    assert agent.metric("nodeagent_watch_restarts_total", resource="nodes") == 0


def test_after_boot_uncordon_waits_for_named_daemonsets(node: Node) -> None:
    assert cordon(node.kube, node.obj(), "reboot")
    agent = node.agent(uncordon={"wait_for_daemonsets": [f"{node.ns}/cni"], "ready_timeout": "2s"})
    ku.wait_until(lambda: "UncordonDelayed" in node.event_reasons(), 15, "the delay reported")
    assert node.cordoned()
    assert f"Ready pods of {node.ns}/cni" in agent.output()

    ku.daemonset(node.kube, node.ns, "cni", node.group)
    ku.wait_until(lambda: not node.cordoned(), 20, "uncordon once the CNI pod is Ready")
    assert CORDONED_BY not in node.annotations()
    # Events go out in the background, just after the write they report.
    ku.wait_until(lambda: "Uncordoned" in node.event_reasons(), 10, "Uncordoned event")


def test_the_daemon_wipes_a_rejected_pods_state(node: Node, tmp_path: Path) -> None:
    from hack.localcluster import REJECT

    root = tmp_path / "state"
    agent = node.agent(
        rejection={"state_roots": [str(root)], "state_paths": [f"{root}/{{namespace}}/{{name}}"]}
    )
    state = root / node.ns / "big"
    state.mkdir(parents=True)
    (state / "scratch").write_text("half-created")
    ku.bare_pod(node.kube, node.ns, "big", node.name, annotations={REJECT: "OutOfcpu"})

    def wiped() -> JSON | None:
        pod = node.kube.get(pods_path(node.ns, "big"))
        return conditions.find(pod, "StateWiped")

    cond = ku.wait_until(wiped, 20, "StateWiped on the rejected pod")
    assert cond["status"] == "True" and cond["reason"] == "Wiped"
    rejected = conditions.find(node.kube.get(pods_path(node.ns, "big")), "PodRejected")
    assert rejected and rejected["reason"] == "OutOfcpu"
    assert not state.exists()
    assert agent.metric("nodeagent_pod_rejections_total", reason="OutOfcpu") == 1
    assert agent.metric("nodeagent_wipes_total", result="Wiped") == 1


def test_a_shutdown_cordon_under_an_evacuate_taint_is_handed_over_after_boot(
    node: Node,
) -> None:
    from hack.localcluster.kubelet_sim import BOOT_ID

    workloads(node, 1)
    assert cordon(node.kube, node.obj(), "reboot")  # the last boot's shutdown ...
    old_boot = node.obj()["status"]["nodeInfo"]["bootID"]
    node.kube.merge_patch(  # ... and the node came back with a new boot ID
        node_path(node.name), {"metadata": {"annotations": {BOOT_ID: "after-reboot"}}}
    )
    ku.wait_until(lambda: node.obj()["status"]["nodeInfo"]["bootID"] != old_boot, 15, "reboot")
    node.taint()
    node.agent()
    # The evacuator takes the cordon over; reconcile must not undo it meanwhile.
    ku.wait_until(lambda: node.annotations().get(DRAIN_REASON) == "evacuate", 15, "handover")
    ku.wait_until(lambda: not node.workload_pods(), 30, "evacuated")
    assert node.cordoned()
    node.untaint()
    ku.wait_until(lambda: not node.cordoned(), 15, "undone with the taint")
    assert CORDONED_BY not in node.annotations()
