"""`nodeagent status`: what it shows for each state of a node, as text and JSON."""

from __future__ import annotations

import json
import re
from typing import Any

from hack import kubeutil as ku
from nodeagent.fence.marker import cordon
from nodeagent.kube.client import Kube, node_path
from nodeagent.report import conditions


def status(node: str, kubeconfig: str, *extra: str) -> Any:
    return ku.run_agent("status", "--node", node, "--kubeconfig", kubeconfig, *extra)


def test_status_of_a_fresh_node(cluster: Any, kube: Kube, admin_kubeconfig: str) -> None:
    group, node, _spare = ku.node_pair(cluster, kube, "st")
    ku.deployment(kube, group, "web", group, 2)
    ku.daemonset(kube, group, "ds", group)
    ku.wait_running(kube, node, 3)

    res = status(node, admin_kubeconfig)
    assert res.returncode == 0, res.stderr
    assert "Cordoned:   no" in res.stdout
    assert "Heartbeat:  never" in res.stdout
    assert "Pods left to drain: 2" in res.stdout  # the DaemonSet pod is not counted

    data = json.loads(status(node, admin_kubeconfig, "-o", "json").stdout)
    assert data["cordoned"] is False and data["marker"] == {} and data["conditions"] == []
    assert len(data["pods_left"]) == 2 and all(not p["blocked_by"] for p in data["pods_left"])


def test_status_of_a_blocked_agent_cordon(cluster: Any, kube: Kube, admin_kubeconfig: str) -> None:
    group, node, _spare = ku.node_pair(cluster, kube, "st")
    ku.deployment(kube, group, "quorum", group, 2)
    ku.pdb(kube, group, "quorum", {"app": "quorum"}, minAvailable=2)
    ku.wait_running(kube, node, 2)
    ku.wait_pdb_ready(kube, group, "quorum")
    assert cordon(kube, ku.node(kube, node), "evacuate")
    obj = ku.node(kube, node)
    conditions.patch_node_conditions(
        kube,
        obj,
        [
            conditions.agent_ready(),
            conditions.blocked("evacuate", [f"{group}/quorum"], ["x (PDB)"]),
        ],
    )
    kube.merge_patch(
        node_path(node),
        {"spec": {"taints": [{"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}]}},
    )

    res = status(node, admin_kubeconfig)
    assert res.returncode == 0, res.stderr
    assert "Cordoned:   yes (by nodeagent)" in res.stdout
    assert "drain-reason=evacuate" in res.stdout
    assert "nodeagent.io/evacuate:NoSchedule" in res.stdout
    assert "NodeAgentDrained: False Blocked" in res.stdout
    assert f"blocked by PDB {group}/quorum" in res.stdout
    beat = re.search(r"^Heartbeat:  (\d+)s ago$", res.stdout, re.M)
    assert beat and int(beat.group(1)) < 30, res.stdout  # written just before the command

    data = json.loads(status(node, admin_kubeconfig, "-o", "json").stdout)
    assert data["cordoned_by"] == "nodeagent"
    assert {c["type"] for c in data["conditions"]} == {"NodeAgentReady", "NodeAgentDrained"}
    assert [p["blocked_by"] for p in data["pods_left"]] == [[f"{group}/quorum"]] * 2
    assert data["heartbeat_age_seconds"] < 30


def test_status_of_a_persons_cordon(cluster: Any, kube: Kube, admin_kubeconfig: str) -> None:
    _group, node, _spare = ku.node_pair(cluster, kube, "st")
    kube.merge_patch(node_path(node), {"spec": {"unschedulable": True}})
    res = status(node, admin_kubeconfig)
    assert "Cordoned:   yes (by someone else)" in res.stdout
    assert "Marker:     -" in res.stdout


def test_status_of_a_missing_node_is_a_one_line_error(admin_kubeconfig: str) -> None:
    res = status("no-such-node", admin_kubeconfig)
    assert res.returncode == 1
    assert res.stderr == 'nodeagent: error: node "no-such-node" not found\n'


def test_label_selector_matching() -> None:
    from nodeagent.agent.status import selects

    labels = {"app": "web", "tier": "front"}
    assert selects({"matchLabels": {"app": "web"}}, labels)
    assert not selects({"matchLabels": {"app": "db"}}, labels)
    assert not selects(None, labels)  # a PDB without a selector selects nothing
    assert selects({}, labels)  # an empty selector selects everything
    exprs = [
        ({"key": "tier", "operator": "In", "values": ["front", "back"]}, True),
        ({"key": "tier", "operator": "NotIn", "values": ["front"]}, False),
        ({"key": "app", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
        ({"key": "app", "operator": "DoesNotExist"}, False),
    ]
    for expr, want in exprs:
        assert selects({"matchExpressions": [expr]}, labels) is want, expr


def test_ready_reason_names_the_weightiest_finding() -> None:
    R = conditions.ReadyReason
    table = [
        ({}, R.RUNNING, "nodeagent is running"),
        ({R.INHIBIT_DELAY_TOO_SHORT: "short"}, R.INHIBIT_DELAY_TOO_SHORT, "short"),
        ({R.KUBELET_GRACEFUL_SHUTDOWN: "race"}, R.KUBELET_GRACEFUL_SHUTDOWN, "race"),
        (
            {R.INHIBIT_DELAY_TOO_SHORT: "short", R.KUBELET_GRACEFUL_SHUTDOWN: "race"},
            R.KUBELET_GRACEFUL_SHUTDOWN,
            "race; short",
        ),
    ]
    for notes, reason, message in table:
        got = conditions.agent_ready_with(notes)
        assert (got.status, got.reason, got.message) == ("True", reason, message), notes
