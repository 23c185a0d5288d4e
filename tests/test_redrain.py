"""A drain that finds the node already drained (nodeagent/departure/redrain.py): the table
of what the Node's Events say, and an evacuation then a poweroff against the real control
plane, whose Events say each step once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from hack import kubeutil as ku
from nodeagent.config import Config
from nodeagent.departure import budget
from nodeagent.departure.redrain import ALREADY_DRAINED, Said, drained_before, said
from nodeagent.departure.worker import Departure
from nodeagent.drain.engine import DrainResult
from nodeagent.drain.eviction import PodOutcome
from nodeagent.fence import marker
from nodeagent.fence.marker import NodeFence
from nodeagent.kube.client import JSON, Kube
from nodeagent.report.events import WARNING
from nodeagent.types import DrainOutcome, FinishedPods, Reason
from tests.test_departure import running_departure
from tests.test_evacuate import Node, node, workloads

__all__ = ["node"]  # the fixture, shared with tests/test_evacuate.py


def fence(reason: str = "evacuate", result: str = "drained", marked: bool = True) -> NodeFence:
    return NodeFence(True, marked, reason, "2026-11-29T12:40:01Z", "b", result)


def pod(name: str, owner: str = "ReplicaSet", phase: str = "Running") -> JSON:
    meta: JSON = {"name": name, "namespace": "ns", "uid": name}
    meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


DS = pod("ds-1", owner="DaemonSet")
WEB = pod("web-1")
DONE = pod("job-1", owner="Job", phase="Succeeded")

# (row, the fence before this drain's cordon, the node's pods, the drain before or "")
BEFORE: list[tuple[str, NodeFence, list[JSON], str]] = [
    ("drained for evacuate, only a DaemonSet pod left", fence(), [DS], "evacuate"),
    ("drained, nothing at all", fence(), [], "evacuate"),
    ("forced counts as drained", fence(result="forced"), [DS], "evacuate"),
    ("a finished pod is left alone", fence(), [DS, DONE], "evacuate"),
    ("a pod to move: a drain as any", fence(), [DS, WEB], ""),
    ("the earlier drain timed out", fence(result="timed-out"), [DS], ""),
    ("no result yet (the drain ran on)", fence(result=""), [], ""),
    ("a person's cordon, no record", fence(reason="", marked=False), [], ""),
    ("the record beside a person's cordon", fence(marked=False), [DS], "evacuate"),
]


@pytest.mark.parametrize(("row", "f", "pods", "want"), BEFORE, ids=[r[0] for r in BEFORE])
def test_drained_before(row: str, f: NodeFence, pods: list[JSON], want: str) -> None:
    assert drained_before(f, pods, FinishedPods.KEEP) == want


def test_a_finished_pod_a_drain_deletes_is_something_to_move() -> None:
    assert drained_before(fence(), [DONE], FinishedPods.DELETE) == ""


def result(outcome: DrainOutcome, moved: int = 0, left: int = 0) -> DrainResult:
    r = DrainResult("n", outcome, seconds=1.25)
    r.evicted = [PodOutcome("ns", f"p{i}", f"u{i}") for i in range(moved)]
    r.blocked = [PodOutcome("ns", f"b{i}", f"v{i}", detail="pdb") for i in range(left)]
    return r


SINCE = " (its drain began 2026-11-29T12:40:01Z)"
SAID: list[tuple[str, DrainResult, Said | None]] = [
    (
        "nothing to move: one Event",
        result(DrainOutcome.DRAINED),
        Said(
            ALREADY_DRAINED,
            f"Nothing left to drain for poweroff: the node was drained for evacuate{SINCE}; "
            "the cordon stays, now for poweroff",
        ),
    ),
    (
        "a pod bound in between, moved",
        result(DrainOutcome.DRAINED, moved=1),
        Said(
            "Drained",
            f"Drained for poweroff after the evacuate drain{SINCE}: 1 pod(s) bound since, "
            "moved in 1.2s",
        ),
    ),
    (
        "a pod bound in between, left at the deadline",
        result(DrainOutcome.TIMED_OUT, left=1),
        Said(
            "DrainTimedOut",
            f"Drained for poweroff after the evacuate drain{SINCE}: 0 pod(s) bound since, "
            "moved in 1.2s; left: ns/b0 (pdb)",
            WARNING,
        ),
    ),
    ("called off: nothing", result(DrainOutcome.CANCELLED), None),
]


@pytest.mark.parametrize(("row", "r", "want"), SAID, ids=[s[0] for s in SAID])
def test_what_is_said(row: str, r: DrainResult, want: Said | None) -> None:
    assert said("evacuate", "2026-11-29T12:40:01Z", "poweroff", r) == want


# -- against the control plane ----------------------------------------------------------------


@pytest.fixture
def worker(kube: Kube, node: Node) -> Iterator[Departure]:
    yield from running_departure(Config(node=node.name), kube)


def reasons(n: Node) -> list[str]:
    return [e["reason"] for e in ku.node_events(n.kube, n.name)]


def test_evacuate_then_poweroff_says_each_step_once(node: Node, worker: Departure) -> None:
    """The evacuation drains; the poweroff then finds the node drained: its cordon stays,
    now for poweroff, with no second Cordoned, DrainStarted or Drained, and one
    AlreadyDrained naming the evacuation."""
    workloads(node)
    node.taint()
    worker.observe(node.obj())  # as the own-Node watch delivers it
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 30, "evacuated")
    ku.wait_until(lambda: "Drained" in reasons(node), 10, "the evacuation's Events")
    start = time.monotonic()
    signal = worker.shutdown(Reason.POWEROFF, budget.sigterm(start, 30), "logind", 1)
    assert signal.wait(start + 30)
    print(f"poweroff of the evacuated node: lock held {time.monotonic() - start:.3f}s")
    ku.wait_until(lambda: ALREADY_DRAINED in reasons(node), 10, "AlreadyDrained")
    time.sleep(0.5)  # any Event still queued
    said_: Any = {r: reasons(node).count(r) for r in ("Cordoned", "DrainStarted", "Drained")}
    assert said_ == {"Cordoned": 1, "DrainStarted": 1, "Drained": 1}, reasons(node)
    message = next(
        e["message"] for e in ku.node_events(node.kube, node.name) if e["reason"] == ALREADY_DRAINED
    )
    assert message.startswith(
        "Nothing left to drain for poweroff: the node was drained for evacuate"
    )
    ann = node.annotations()
    assert ann[marker.DRAIN_REASON] == "poweroff" and ann[marker.DRAIN_RESULT] == "drained"
    assert node.cordoned()
