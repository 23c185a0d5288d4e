"""Many nodes at once (a node group scaling in): N loaded nodes, each drained by its own
process at the same moment, against one API server."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.drainers import Drain, Drainer, Identities, run_drain
from bench.workload import SETTLE_TIMEOUT, remove
from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import Kube, node_path
from tests import kubeutil as ku

SPARE_PODS = 200  # replacements per spare node (capacity 250, kept clear of the limit)


@dataclass(frozen=True)
class Shape:
    nodes: int
    pods_per_node: int


@dataclass(frozen=True)
class FleetRun:
    drainer: Drainer
    drains: list[Drain]

    @property
    def slowest(self) -> float:
        return max(d.seconds for d in self.drains)


def _slot(group: str, i: int) -> str:
    """A label only node i and the spares carry: node i's pods may go nowhere else."""
    return f"bench.nodeagent.io/{group}-{i}"


@dataclass(frozen=True)
class Fleet:
    nodes: list[str]
    namespaces: list[str]  # node i's pods live in namespaces[i]
    spares: list[str]


def prepare(cluster: Cluster, kube: Kube, shape: Shape) -> Fleet:
    """N loaded nodes, and cordoned spares for their replacements."""
    group = ku.unique("fleet")
    slots = {_slot(group, i): "yes" for i in range(shape.nodes)}
    spare_count = math.ceil(shape.nodes * shape.pods_per_node / SPARE_PODS)
    spares = [f"{group}-spare{j}" for j in range(spare_count)]
    for spare in spares:
        cluster.add_node(spare, slots)
        kube.merge_patch(node_path(spare), {"spec": {"unschedulable": True}})
    nodes = [f"{group}-n{i}" for i in range(shape.nodes)]
    for i, node in enumerate(nodes):
        cluster.add_node(node, {_slot(group, i): "yes"})
    namespaces = [ku.namespace(kube, node) for node in nodes]
    for i, ns in enumerate(namespaces):
        selector = {_slot(group, i): "yes"}
        ku.deployment(kube, ns, "app", group, shape.pods_per_node, nodeSelector=selector)
    for node in nodes:
        ku.wait_running(kube, node, shape.pods_per_node, timeout=SETTLE_TIMEOUT)
    for spare in spares:
        ku.open_node(kube, spare)
    return Fleet(nodes, namespaces, spares)


def run(cluster: Cluster, kube: Kube, ids: Identities, shape: Shape, drainer: Drainer) -> FleetRun:
    """Drain every node of a fresh fleet at once, one `drainer` process per node."""
    fleet = prepare(cluster, kube, shape)
    who = {node: ids.mint(drainer, node) for node in fleet.nodes}
    kubectl = cluster.bin_dir / "kubectl"

    def drain(i: int) -> Drain:
        node = fleet.nodes[i]
        return run_drain(drainer, node, fleet.namespaces[i], who[node], kubectl)

    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        drains = list(pool.map(drain, range(len(fleet.nodes))))
    remove(kube, fleet.namespaces, fleet.nodes + fleet.spares)
    return FleetRun(drainer, drains)
