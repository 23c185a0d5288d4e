"""The fleet the benchmark (bench/fleet.py) and tests/test_fleet.py share: a cluster whose
API server logs the agents' requests (apiusage.py), simulated nodes with loaded and spare
ones (Layout), the start storm of the resident agents (residents.py) and an evacuation wave.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hack import auditlog
from hack import kubeutil as ku
from hack.fleet import apiusage
from hack.fleet.residents import Residents
from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import JSON, Kube, node_path

REPO = Path(__file__).resolve().parents[2]
# The kubelet's cadence: Lease renewed every 10 s, full status every 5 minutes unchanged.
SIM_ARGS = ["--lease-interval=10", "--status-interval=300"]
SPARE_PODS = 200  # replacements per spare node (capacity 250, kept clear of the limit)
READY_TIMEOUT = 300.0
DRAIN_TIMEOUT = 300.0
POLL = 0.25
TAINT = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}
READY = "NodeAgentReady"
PDB_READER = REPO / "packaging" / "kubelet-pdb-reader.yaml"
FLEET_LABEL = "bench.nodeagent.io/fleet"


def start_cluster(workdir: Path, apiserver_args: list[str] | None = None) -> Cluster:
    return Cluster.start(
        workdir / "cluster",
        apiserver_extra_args=apiusage.apiserver_args(workdir) + (apiserver_args or []),
        sim_extra_args=SIM_ARGS,
    )


def _slot(group: str, i: int) -> str:
    """A label only loaded node i and the spares carry: its pods may go nowhere else."""
    return f"bench.nodeagent.io/{group}-{i}"


@dataclass
class Layout:
    group: str
    agents: list[str]  # nodes with an agent; the first `wave` of them are loaded
    wave: list[str]
    floor: list[str]  # loaded nodes without an agent, drained by the floor
    wave_spares: list[str]
    floor_spares: list[str]
    namespace: dict[str, str] = field(default_factory=dict)  # loaded node -> its pods' namespace


def _add_nodes(cluster: Cluster, nodes: dict[str, dict[str, str]]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: cluster.add_node(n, nodes[n], timeout=120), nodes))


def build(cluster: Cluster, kube: Kube, agents: int, wave: int, pods: int) -> Layout:
    """The nodes, the loaded ones' Deployments (one per node, all Running) and cordoned
    spares for their replacements."""
    group = ku.unique("fleet")
    tag = {FLEET_LABEL: group}
    spares = math.ceil(wave * pods / SPARE_PODS)
    lay = Layout(
        group,
        agents=[f"{group}-n{i}" for i in range(agents)],
        wave=[f"{group}-n{i}" for i in range(wave)],
        floor=[f"{group}-f{i}" for i in range(wave)],
        wave_spares=[f"{group}-ws{j}" for j in range(spares if wave else 0)],
        floor_spares=[f"{group}-fs{j}" for j in range(spares if wave else 0)],
    )
    loaded = lay.wave + lay.floor
    slots = {node: _slot(group, i) for i, node in enumerate(loaded)}
    wave_slots = {slots[n]: "yes" for n in lay.wave}
    floor_slots = {slots[n]: "yes" for n in lay.floor}
    spare_labels = {s: {**tag, **wave_slots} for s in lay.wave_spares}
    spare_labels |= {s: {**tag, **floor_slots} for s in lay.floor_spares}
    _add_nodes(cluster, spare_labels)
    for spare in spare_labels:
        kube.merge_patch(node_path(spare), {"spec": {"unschedulable": True}})
    nodes = {n: {**tag, **({slots[n]: "yes"} if n in slots else {})} for n in lay.agents}
    nodes |= {n: {**tag, slots[n]: "yes"} for n in lay.floor}
    _add_nodes(cluster, nodes)
    for node in loaded:
        ns = lay.namespace[node] = ku.namespace(kube, node)
        ku.deployment(kube, ns, "app", group, pods, nodeSelector={slots[node]: "yes"})
    for node in loaded:
        ku.wait_running(kube, node, pods, timeout=READY_TIMEOUT)
    return lay


def apply_pdb_reader(kube: Kube) -> None:
    """packaging/kubelet-pdb-reader.yaml: what a cluster running the host form adds."""
    paths = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
    for doc in yaml.safe_load_all(PDB_READER.read_text()):
        kube.post(f"/apis/rbac.authorization.k8s.io/v1/{paths[doc['kind']]}", doc)


# ---- the start storm --------------------------------------------------------------------


def _agent_ready(node: JSON) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == READY and c.get("status") == "True" for c in conditions)


def wait_ready(kube: Kube, lay: Layout, began: float, timeout: float) -> dict[str, float]:
    """Seconds from `began` until each agent's node showed NodeAgentReady True."""
    wanted, ready = set(lay.agents), dict[str, float]()
    selector = {"labelSelector": f"{FLEET_LABEL}={lay.group}"}
    deadline = time.monotonic() + timeout
    while set(ready) != wanted:
        if time.monotonic() > deadline:
            missing = sorted(wanted - set(ready))
            raise TimeoutError(f"{len(missing)} agents not ready after {timeout:.0f}s: {missing}")
        listed = kube.request("GET", "/api/v1/nodes", query=selector)
        now = time.time()
        for node in listed["items"]:
            name = node["metadata"]["name"]
            if name in wanted and name not in ready and _agent_ready(node):
                ready[name] = now - began
        time.sleep(POLL)
    return ready


@dataclass(frozen=True)
class Storm:
    ready_s: float  # until the last agent's node was Ready
    median_s: float
    restarts: int  # agents that exited and were started again
    exits: list[tuple[str, int]]
    throttled: int  # 429s the agents got (and waited out) meanwhile
    cpu_s: list[float]  # each agent's CPU from its start until every agent was ready
    requests: dict[tuple[str, str], float]  # per agent until then, by (verb, resource)


def storm(kube: Kube, residents: Residents, lay: Layout, audit_log: Path) -> Storm:
    began = residents.start()
    ready = wait_ready(kube, lay, began, READY_TIMEOUT)
    cpu = [a.cpu_seconds() for a in residents.agents]
    time.sleep(1.0)  # the last requests' audit entries
    calls = apiusage.agents_only(auditlog.read(audit_log))
    end = began + max(ready.values()) + 1.0
    kinds = Counter((c.verb, c.resource) for c in auditlog.within(calls, began, end))
    return Storm(
        ready_s=max(ready.values()),
        median_s=statistics.median(ready.values()),
        restarts=residents.restarts,
        exits=residents.exit_codes(),
        throttled=auditlog.throttled(calls, began, end),
        cpu_s=cpu,
        requests={k: n / len(lay.agents) for k, n in sorted(kinds.items())},
    )


# ---- a wave -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeDrain:
    node: str
    seconds: float  # taint (or floor process start) until its last pod was gone
    first_request: float  # after the taint: the agent's first request for it
    first_eviction: float
    last_eviction: float


def _gone(kube: Kube, node: str) -> bool:
    return not ku.pods_on(kube, node)


def _phases(calls: list[auditlog.Call], user: str, node: str, ns: str, since: float) -> NodeDrain:
    mine = [c for c in calls if c.user == user and c.received >= since]
    evictions = [c.received for c in mine if c.resource == "pods/eviction"]
    gone = auditlog.last_pod_gone(calls, ns, since)
    first = mine[0].received if mine else since
    return NodeDrain(
        node,
        seconds=gone - since if gone else float("nan"),
        first_request=first - since,
        first_eviction=(evictions[0] - since) if evictions else float("nan"),
        last_eviction=(evictions[-1] - since) if evictions else float("nan"),
    )


def wave(kube: Kube, lay: Layout, audit_log: Path) -> list[NodeDrain]:
    """Taint the wave's nodes at once; wait until each has no pod left."""
    for spare in lay.wave_spares:
        ku.open_node(kube, spare)
    tainted: dict[str, float] = {}

    def taint(node: str) -> None:
        tainted[node] = time.time()
        kube.merge_patch(node_path(node), {"spec": {"taints": [TAINT]}})

    with ThreadPoolExecutor(len(lay.wave)) as pool:
        list(pool.map(taint, lay.wave))
    deadline = time.monotonic() + DRAIN_TIMEOUT
    left = set(lay.wave)
    while left:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(left)} nodes not drained after {DRAIN_TIMEOUT:.0f}s")
        left = {n for n in left if not _gone(kube, n)}
        time.sleep(POLL)
    time.sleep(1.0)
    calls = auditlog.read(audit_log)
    return [
        _phases(calls, f"{apiusage.AGENT_PREFIX}{n}", n, lay.namespace[n], tainted[n])
        for n in lay.wave
    ]
