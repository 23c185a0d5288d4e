"""The agent's own Node deleted under it (`kubectl delete node`, an autoscaler), against the
real control plane: the deletion is one clear line from the watch, a drain on the deleted
Node ends at once with its result, no traceback or retry loop follows, and the Node the
kubelet registers again gets the agent's condition within seconds, with nothing inherited."""

from __future__ import annotations

import time
from typing import Any

from hack import kubeutil as ku
from hack.actors import kubectl
from nodeagent.fence import marker
from nodeagent.report import conditions
from tests.test_evacuate import Node, node
from tests.test_fence_actors import slow_workloads, wait_fenced

__all__ = ["node"]  # the fixture, shared with tests/test_evacuate.py

DELETED_LINE = "was deleted from the API"


def test_a_node_deleted_mid_drain_ends_the_drain_and_the_new_node_is_reported(
    node: Node, cluster: Any
) -> None:
    slow_workloads(node)
    agent = node.agent()
    ku.wait_until(lambda: node.condition(conditions.READY), 15, "NodeAgentReady")
    node.taint()
    wait_fenced(node)
    time.sleep(1)
    assert kubectl.Kubectl(node.kube).delete_node(node.name)
    deleted = time.monotonic()
    ku.wait_until(lambda: DELETED_LINE in agent.output(), 10, "the deletion's line", step=0.02)
    said = time.monotonic()
    ku.wait_until(lambda: "ended: the node was deleted" in agent.output(), 10, "the drain's end")
    ended = time.monotonic()
    print(f"node deleted -> line {said - deleted:.3f}s, -> drain ended {ended - deleted:.3f}s")
    assert ended - deleted < 3.0  # not the drain's 30 s deadline

    # The kubelet registers it again: a new object, the condition on it within seconds.
    cluster.add_node(node.name, {ku.GROUP_LABEL: node.group})
    registered = time.monotonic()
    ku.wait_until(lambda: node.condition(conditions.READY), 15, "NodeAgentReady on the new Node")
    print(f"registered again -> NodeAgentReady {time.monotonic() - registered:.3f}s")
    assert time.monotonic() - registered < 10
    # Said just after the condition write is handed over, which may land first.
    ku.wait_until(lambda: "registered again" in agent.output(), 5, "the line")
    fresh = node.obj()
    assert marker.CORDONED_BY not in (fresh["metadata"].get("annotations") or {})
    assert marker.DRAIN_RESULT not in (fresh["metadata"].get("annotations") or {})
    assert agent.output().count(DELETED_LINE) == 1
    assert "Traceback" not in agent.output()
    assert agent.output().count("could not write node conditions") == 0
