"""Who did what to the departing Node (hack/departure/witness.py), as tables over Node
versions, bindings and Events written the way the API server writes them: the writers of a
change from managedFields, the final cordon, taints and labels with who set each, the pods
bound after the departure began, and the duplicate Events. No cluster here."""

from __future__ import annotations

from typing import Any

import pytest

from hack.departure.witness import (
    Binding,
    Change,
    changes,
    duplicate_events,
    final_state,
    scheduled_onto,
    writers,
)

JSON = dict[str, Any]
T0, T1, T2, T3 = (
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:00:01Z",
    "2026-01-01T00:00:02Z",
    ("2026-01-01T00:00:03Z"),
)
HEARTBEAT = {"manager": "kubelet", "operation": "Update", "subresource": "status", "time": T0}
KUBELET = {"manager": "kubelet", "operation": "Update", "time": T0, "fieldsV1": {"f:metadata": {}}}


def entry(manager: str, time: str, *fields: str) -> JSON:
    """A managedFields entry owning `fields` ("f:spec.f:unschedulable": nested as the API
    server writes fieldsV1)."""
    tree: JSON = {}
    for dotted in fields:
        at = tree
        for part in dotted.split(".f:"):
            at = at.setdefault(part if part.startswith("f:") else f"f:{part}", {})
    return {"manager": manager, "operation": "Update", "time": time, "fieldsV1": tree}


def node(
    *managers: JSON,
    cordon: bool = False,
    taints: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    uid: str = "u1",
    deleting: bool = False,
) -> JSON:
    meta: JSON = {
        "name": "n",
        "uid": uid,
        "labels": {"kubernetes.io/hostname": "n", **(labels or {})},
        "managedFields": [HEARTBEAT, KUBELET, *managers],
    }
    if deleting:
        meta["deletionTimestamp"] = T3
    spec: JSON = {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]}
    if cordon:
        spec["unschedulable"] = True
    return {"metadata": meta, "spec": spec}


AGENT_CORDON = entry("nodeagent", T1, "f:spec.f:unschedulable", "f:spec.f:taints")
KUBECTL = entry("kubectl-cordon", T2, "f:spec.f:unschedulable")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, node(), "kubelet"),  # a first version: every entry is new
        (node(), node(), "?"),  # a heartbeat (the status subresource) is nobody's change
        (node(), node(AGENT_CORDON, cordon=True), "nodeagent"),
        # the autoscaler's cordon beside the agent's: the agent only lost its fields
        (
            node(AGENT_CORDON, cordon=True),
            node(entry("nodeagent", T1, "f:spec.f:taints"), KUBECTL),
            "kubectl-cordon",
        ),
        # a write that only took a field away leaves its writer no entry: unknown
        (node(AGENT_CORDON, cordon=True), node(entry("nodeagent", T1, "f:spec.f:taints")), "?"),
        # the same second, but a field newly owned
        (node(entry("nodeagent", T1, "f:spec.f:taints")), node(AGENT_CORDON), "nodeagent"),
    ],
)
def test_the_writers_are_the_entries_that_changed(
    before: JSON | None, after: JSON, expected: str
) -> None:
    assert writers(before, after) == expected


def test_changes_name_the_writer_of_each() -> None:
    versions = [
        (0.0, node()),
        (1.0, node(AGENT_CORDON, cordon=True, taints=("nodeagent.io/departing",))),
        # kubectl's uncordon takes the field away: no entry names it
        (2.0, node(entry("nodeagent", T1, "f:spec.f:taints"), taints=("nodeagent.io/departing",))),
        (
            3.0,
            node(
                entry("nodeagent", T3, "f:spec.f:unschedulable", "f:spec.f:taints"),
                cordon=True,
                taints=("nodeagent.io/departing",),
            ),
        ),
        (4.0, None),
    ]
    assert [c.row(0.0) for c in changes(versions)] == [
        "+1.0s cordon by nodeagent",
        "+1.0s taint+ nodeagent.io/departing by nodeagent",
        "+2.0s uncordon by ?",
        "+3.0s cordon by nodeagent",
        "+4.0s deleted by ?",
    ]


def test_a_node_registered_again_is_a_change_not_a_diff() -> None:
    versions = [(0.0, node(cordon=True)), (1.0, None), (2.0, node(uid="u2"))]
    assert changes(versions) == [Change(1.0, "deleted", "?"), Change(2.0, "registered again",
                                                                      "kubelet")]  # fmt: skip


LB = "node.kubernetes.io/exclude-from-external-load-balancers"
KARPENTER = entry("karpenter", T1, "f:spec.f:taints", f"f:metadata.f:labels.f:{LB}")
# The agent's write of the taint list took the (atomic) list over: Karpenter keeps its label.
KARPENTER_LABEL = entry("karpenter", T1, f"f:metadata.f:labels.f:{LB}")
CA = entry("cluster-autoscaler", T1, "f:spec")


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ([], {"node": "never seen"}),
        (  # cordoned before the departure, nothing changed: "before"
            [(0.0, node(cordon=True))],
            {"node": "present", "cordoned": True, "cordon_by": "before", "taints": {},
             "labels": {}},
        ),
        (  # the autoscaler's taint and cordon, then the Node deleted: its last state
            [(0.0, node()),
             (1.0, node(CA, cordon=True, taints=("ToBeDeletedByClusterAutoscaler",))),
             (9.0, None)],
            {"node": "deleted", "cordoned": True, "cordon_by": "cluster-autoscaler",
             "taints": {"ToBeDeletedByClusterAutoscaler": "cluster-autoscaler"}, "labels": {}},
        ),
        (  # Karpenter's taint and label beside the agent's cordon and taint; the
           # kubelet's own labels are not a departure's
            [
                (0.0, node()),
                (1.0, node(KARPENTER, taints=("karpenter.sh/disrupted",),
                           labels={"node.kubernetes.io/exclude-from-external-load-balancers":
                                   "karpenter"})),
                (2.0, node(KARPENTER_LABEL, AGENT_CORDON, cordon=True,
                           taints=("karpenter.sh/disrupted", "nodeagent.io/departing"),
                           labels={"node.kubernetes.io/exclude-from-external-load-balancers":
                                   "karpenter"})),
            ],
            {"node": "present", "cordoned": True, "cordon_by": "nodeagent",
             "taints": {"karpenter.sh/disrupted": "karpenter",
                        "nodeagent.io/departing": "nodeagent"},
             "labels": {"node.kubernetes.io/exclude-from-external-load-balancers=karpenter":
                        "karpenter"}},
        ),
        (  # uncordoned at the end: no cordon, so nobody set it
            [(0.0, node()), (1.0, node(AGENT_CORDON, cordon=True)), (2.0, node(KUBECTL))],
            {"node": "present", "cordoned": False, "cordon_by": None, "taints": {},
             "labels": {}},
        ),
    ],
)  # fmt: skip
def test_the_final_state_says_who_set_each(versions: list[Any], expected: JSON) -> None:
    assert final_state(versions) == expected


BOUND = [
    Binding(0.5, "old", "ns/web-1"),  # bound before the departure (in `before`)
    Binding(1.5, "new1", "ns/web-2"),  # bound 0.5 s after it began
    Binding(9.0, "new2", "ns/web-3"),  # bound after the rebooted node came back
]


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (1.0, float("inf"), ["ns/web-2", "ns/web-3"]),  # a node that never came back
        (1.0, 5.0, ["ns/web-2"]),  # the node back at 5.0: its later pods are its own
        (2.0, 5.0, []),
    ],
)
def test_scheduled_onto_departing(start: float, end: float, expected: list[str]) -> None:
    assert scheduled_onto(BOUND, {"old"}, start, end) == expected


def event(obj: str, reason: str, component: str, at: str = T2, count: int = 1) -> JSON:
    kind, name = obj.split("/")
    return {
        "metadata": {"creationTimestamp": at},
        "involvedObject": {"kind": kind, "name": name},
        "reason": reason,
        "source": {"component": component},
        "lastTimestamp": at,
        "count": count,
    }


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([event("Node/n", "Drained", "nodeagent")], []),
        (  # one eviction told by two drainers
            [
                event("Pod/web-1", "Evicted", "karpenter"),
                event("Pod/web-1", "Evicted", "nodeagent"),
            ],
            ["Pod/web-1 Evicted: karpenter x1, nodeagent x1"],
        ),
        ([event("Node/n", "Refenced", "nodeagent", count=2)], ["Node/n Refenced: nodeagent x2"]),
        (  # two Events of one component on one object
            [event("Node/n", "ScaleDown", "cluster-autoscaler")] * 2,
            ["Node/n ScaleDown: cluster-autoscaler x2"],
        ),
        # before the departure, or on an object not the departure's: not counted
        ([event("Node/n", "Drained", "nodeagent", at=T0)] * 2, []),
        ([event("Node/other", "Drained", "nodeagent")] * 2, []),
    ],
)
def test_duplicate_events(events: list[JSON], expected: list[str]) -> None:
    assert duplicate_events(events, T1, {"Node/n", "Pod/web-1"}) == expected
