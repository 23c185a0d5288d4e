"""The real Cluster API (v1.14.2 core manager; hack/actors/cluster_api_real.py) deleting a
Machine whose Node is simulated: the ends hack/actors/cluster_api.py's re-enactment asserts in
tests/test_actors.py, now from Cluster API's own code. Built from the Go module proxy on first
use (hack/build-cluster-api.sh), hence the artifacts tier."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.actors import api, cluster_api
from hack.actors.cluster_api_real import RealClusterAPI
from nodeagent.kube.client import JSON, Kube, node_path, pods_path


@pytest.fixture
def capi(
    cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path
) -> Iterator[tuple[RealClusterAPI, str, str]]:
    group, node, spare = ku.node_pair(cluster, kube, "capi")
    real = RealClusterAPI.start(kube, admin_kubeconfig, group, tmp_path)
    try:
        yield real, node, spare
    finally:
        real.stop()


def test_real_cluster_api_drains_and_deletes_a_machines_node(
    capi: tuple[RealClusterAPI, str, str],
) -> None:
    """The join-time annotations; on the Machine's deletion a cordon and evictions and
    nothing else on the Node (no taint, label or annotation of its own); DaemonSet pods and
    a pod labelled cluster.x-k8s.io/drain=skip stay; then the Node deleted."""
    real, node, spare = capi
    kube, ns = real.kube, real.ns
    machine = real.adopt(node)
    ku.deployment(kube, ns, "web", ns, 2)
    ku.daemonset(kube, ns, "ds", ns)
    ku.bare_pod(kube, ns, "pinned", node)
    skip = {"metadata": {"labels": {cluster_api.DRAIN_LABEL: "skip"}}}
    kube.merge_patch(pods_path(ns, "pinned"), skip)
    ku.wait_running(kube, node, 4)
    ku.open_node(kube, spare)
    before = ku.node(kube, node)
    assert api.annotations_of(before)[cluster_api.MACHINE_ANNOTATION] == machine
    assert api.annotations_of(before)["cluster.x-k8s.io/cluster-name"] == ns

    real.delete_machine(machine)
    seen: list[JSON] = []

    def sample() -> bool:
        try:
            seen.append(ku.node(kube, node))
        except AssertionError:
            raise
        except Exception:  # the Node is gone: the last DELETE happened
            return True
        time.sleep(0.5)
        return False

    ku.wait_until(sample, 90, "Cluster API to drain and delete the Node", step=0)
    cordoned = [n for n in seen if n["spec"].get("unschedulable")]
    assert cordoned, "never seen cordoned"
    keys = {k for n in seen for k in api.annotations_of(n)} - set(api.annotations_of(before))
    assert keys == set(), keys
    own = {t["key"] for n in seen for t in api.taints(n)} - {"node.kubernetes.io/unschedulable"}
    assert own == set(), own
    assert not ku.exists(kube, node_path(node))
    left = {
        api.labels_of(p).get("app") or api.name_of(p) for p in ku.running(ku.pods_on(kube, node))
    }
    assert left == {"ds", "pinned"}
