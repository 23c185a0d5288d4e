"""Who did what to a departing Node, told by the real API server's managedFields: the
actors' re-enactments (hack/actors/) write through clients of their own field manager
(api.client_as), the departure scene's NodeWatch (hack/departure/trackers.py) follows the
Node and the pods bound to it, and witness.py names each change's writer. Against the
harness's control plane and simulated kubelet; no real node."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hack import kubeutil as ku
from hack.actors import api, cluster_autoscaler, karpenter, kubectl
from hack.departure.trackers import NodeWatch
from nodeagent.kube.client import ApiError, Kube


def taint_for_termination(karp: karpenter.Karpenter, kube: Kube, node: str) -> None:
    """Karpenter's taint and label, its optimistic lock's 409 requeued as its controller
    does (the node controller's taint may land in between)."""
    for _ in range(5):
        try:
            karp.taint_for_termination(ku.node(kube, node))
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
    raise AssertionError("Karpenter's taint refused five times")


def test_the_writers_the_api_server_names(cluster: Any, kube: Kube, tmp_path: Path) -> None:
    """The autoscaler marks the node and its restart's cleanup undoes it, a scale-up lands
    a pod there, a person cordons, Karpenter taints and labels it: each change is named
    after its tool's field manager, the pod scheduled onto the departing node is counted,
    and the autoscaler's second ScaleDown on the Node is a duplicate Event."""
    group, node, _spare = ku.node_pair(cluster, kube, "wit")
    ku.deployment(kube, group, "web", group, 1)
    ku.wait_running(kube, node, 1)
    config = Path(cluster.workdir) / "admin.kubeconfig"
    ca = cluster_autoscaler.ClusterAutoscaler(api.client_as(config, "cluster-autoscaler"))
    person = kubectl.Kubectl(api.client_as(config, "kubectl-cordon"))
    karp = karpenter.Karpenter(api.client_as(config, "karpenter"))
    watch = NodeWatch(kube, node)
    try:
        watch.begin()
        started = time.time()
        ca.mark_to_be_deleted(node)
        ca.mark_to_be_deleted(node)  # already marked: no write, a second ScaleDown Event
        ca.clean_all_to_be_deleted([node])  # its restart: taint and cordon go
        kube.merge_patch(f"/apis/apps/v1/namespaces/{group}/deployments/web",
                         {"spec": {"replicas": 2}})  # fmt: skip
        ku.wait_running(kube, node, 2)  # the spare is cordoned: onto the departing node
        person.cordon(node)
        taint_for_termination(karp, kube, node)
        ku.wait_until(
            lambda: "karpenter.sh/disrupted" in str(watch.versions[-1][1]), 10, "the last write"
        )
    finally:
        watch.stop()
    seen = watch.figures(kube, started, None, tmp_path / "witnessed.json")
    rows = [r.split(" ", 1)[1] for r in seen.node_changes]
    print("\n".join(seen.node_changes))
    assert "cordon by cluster-autoscaler" in rows
    assert f"taint+ {cluster_autoscaler.TO_BE_DELETED} by cluster-autoscaler" in rows
    assert "uncordon by cluster-autoscaler" in rows or "uncordon by ?" in rows
    assert "cordon by kubectl-cordon" in rows
    assert f"label+ {karpenter.EXCLUDE_LB}=karpenter by karpenter" in rows
    final = seen.final_state
    assert final["node"] == "present" and final["cordon_by"] == "kubectl-cordon"
    assert final["taints"]["karpenter.sh/disrupted"] == "karpenter"
    assert final["labels"][f"{karpenter.EXCLUDE_LB}=karpenter"] == "karpenter"
    assert len(seen.scheduled_onto_departing) == 1
    assert f"Node/{node} ScaleDown: cluster-autoscaler x2" in seen.duplicate_events
    assert (tmp_path / "witnessed.json").exists()
