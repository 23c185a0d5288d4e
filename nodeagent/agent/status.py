"""`nodeagent status`: what the API says about one node, for people and scripts.

Read-only: the Node (cordon, marker, taints, the agent's conditions and heartbeat),
the pods a drain would still evict, and for each the PDB that would refuse it now.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from nodeagent.drain import podfilter
from nodeagent.fence import marker as fence
from nodeagent.fence.others import Others, other_handler, standing_aside
from nodeagent.kube.client import JSON, ApiError, Kube
from nodeagent.kube.identity import PDB_READER
from nodeagent.report import conditions
from nodeagent.types import Handler

PDB_READER_HINT = f"{PDB_READER} lets nodes read them"


@dataclass
class PodLeft:
    namespace: str
    name: str
    blocked_by: list[str] = field(default_factory=list)  # "ns/pdb" with 0 disruptions allowed


@dataclass
class NodeStatus:
    node: str
    cordoned: bool
    cordoned_by: str  # "nodeagent", "someone else" or ""
    marker: dict[str, str]
    taints: list[str]
    conditions: list[JSON]
    heartbeat_age_seconds: float | None
    pods_left: list[PodLeft]
    warnings: list[str] = field(default_factory=list)
    pdbs_readable: bool = True
    # Another handler of the cloud's notices, with its evidence ("" when none).
    other_handler: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def gather(kube: Kube, node_name: str, handler: Handler = Handler.AUTO) -> NodeStatus:
    """The node's state as the API has it; `handler`: [warnings] other_handler."""
    node = fence.get_node(kube, node_name)
    state = fence.NodeFence.of(node)
    ann = node["metadata"].get("annotations") or {}
    query = {"fieldSelector": f"spec.nodeName={node_name}"}
    pods = kube.request("GET", "/api/v1/pods", query=query)["items"]
    left = [p for p in pods if podfilter.skip_reason(p) is None]
    pdbs, pdbs_readable = _pdbs(kube) if left else ([], True)
    return NodeStatus(
        node=node_name,
        cordoned=state.unschedulable,
        cordoned_by="nodeagent"
        if state.cordoned_by_agent
        else "someone else"
        if state.cordoned_by_other
        else "",
        marker={k: v for k, v in ann.items() if k in fence.MARKER_KEYS},
        taints=[_taint(t) for t in node["spec"].get("taints") or []],
        conditions=[c for c in _conditions(node) if c],
        heartbeat_age_seconds=_heartbeat_age(node),
        pods_left=[_pod_left(p, pdbs) for p in left],
        warnings=warnings(node),
        pdbs_readable=pdbs_readable,
        other_handler=other_handler(handler, Others.of(node).handler),
    )


def _pdbs(kube: Kube) -> tuple[list[JSON], bool]:
    """Every PDB, and whether the identity may read them (the kubelet's may not, unless
    the cluster binds a reader role to system:nodes)."""
    try:
        return kube.get("/apis/policy/v1/poddisruptionbudgets")["items"], True
    except ApiError as exc:
        if exc.status != 403:
            raise
        return [], False


KUBELET_RACE = (
    "the kubelet's graceful node shutdown is on: at shutdown it kills pods without regard "
    "for PodDisruptionBudgets, so PDBs are not guaranteed (set shutdownGracePeriod: 0s)"
)


# The agent refreshes NodeAgentReady at least every 5 minutes (reporting.heartbeat_interval):
# two missed refreshes say it is not running, or cannot reach the API server.
STALE_AFTER = 600.0


def warnings(node: JSON) -> list[str]:
    """What the agent's own report says an operator must know, one line each."""
    ready = conditions.find(node, conditions.READY) or {}
    found = []
    if ready.get("reason") == conditions.ReadyReason.KUBELET_GRACEFUL_SHUTDOWN:
        found.append(KUBELET_RACE)
    age = _heartbeat_age(node)
    if age is not None and age > STALE_AFTER:
        found.append(
            f"the agent's heartbeat is stale ({age:.0f}s old): it is not running, or cannot "
            "reach the API server; a shutdown now would not be drained"
        )
    return found


def _conditions(node: JSON) -> list[JSON | None]:
    return [conditions.find(node, conditions.READY), conditions.find(node, conditions.DRAINED)]


def _taint(taint: JSON) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint.get('effect', '')}"


def _heartbeat_age(node: JSON) -> float | None:
    ready = conditions.find(node, conditions.READY)
    if not ready or not ready.get("lastHeartbeatTime"):
        return None
    beat = datetime.strptime(ready["lastHeartbeatTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return round((datetime.now(UTC) - beat).total_seconds(), 1)


def _pod_left(pod: JSON, pdbs: list[JSON]) -> PodLeft:
    meta = pod["metadata"]
    blocking = [
        f"{b['metadata']['namespace']}/{b['metadata']['name']}"
        for b in pdbs
        if b["metadata"]["namespace"] == meta["namespace"]
        and int((b.get("status") or {}).get("disruptionsAllowed") or 0) == 0
        and selects(b["spec"].get("selector"), meta.get("labels") or {})
    ]
    return PodLeft(meta["namespace"], meta["name"], blocking)


def selects(selector: JSON | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector match (a PDB's null selector selects nothing)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression(e, labels) for e in selector.get("matchExpressions") or [])


def _expression(expr: JSON, labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    return key not in labels  # DoesNotExist


def render(status: NodeStatus) -> str:
    """A short human report, one fact per line."""
    by = f" (by {status.cordoned_by})" if status.cordoned else ""
    lines = [
        f"Node:       {status.node}",
        f"Cordoned:   {'yes' if status.cordoned else 'no'}{by}",
    ]
    marker = ", ".join(f"{k.removeprefix(fence.PREFIX)}={v}" for k, v in status.marker.items())
    lines.append(f"Marker:     {marker or '-'}")
    lines.append(f"Taints:     {', '.join(status.taints) or '-'}")
    for cond in status.conditions:
        lines.append(
            f"{cond['type'] + ':':<18}{cond['status']} {cond.get('reason', '')}"
            f" ({cond.get('message', '')}) since {cond.get('lastTransitionTime', '?')}"
        )
    lines += [f"Warning:    {w}" for w in status.warnings]
    lines.append(f"Handler:    {standing_aside(status.other_handler)}")
    age = status.heartbeat_age_seconds
    lines.append(f"Heartbeat:  {f'{age:.0f}s ago' if age is not None else 'never'}")
    lines.append(f"Pods left to drain: {len(status.pods_left)}")
    if not status.pdbs_readable:
        lines.append(f"  PDBs not readable: which would block is unknown ({PDB_READER_HINT})")
    for pod in status.pods_left:
        blocked = f"  blocked by PDB {', '.join(pod.blocked_by)}" if pod.blocked_by else ""
        lines.append(f"  {pod.namespace}/{pod.name}{blocked}")
    return "\n".join(lines)
