"""The API server's audit log as the benchmarks read it: who asked what, answered how, when.

The policy logs the named client groups at Metadata level (verb, resource, user, code,
stage times, never bodies) and, of the kubelet simulator (hack/localcluster, the admin
identity), only its pod DELETEs: its last one for a namespace (grace 0, after the
containers stopped) is when that namespace's last pod is gone, which times a drain. The
controllers are not logged. A watch is logged when its response starts and when it ends.
Readers: the drain benchmark (bench/audit.py) and the fleet's (hack/fleet/apiusage.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.kube.client import api_time

# The group of the benchmarks' drainers (bench/drainers.py): the fleet's floor drains, the
# drain benchmark's nodeagent, kubectl and floor drains.
DRAINERS = "bench:drainers"
SIM_USER = "admin"  # the kubelet simulator's identity (hack/localcluster, admin kubeconfig)
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READS = frozenset({"get", "list"})


def policy(groups: Iterable[str]) -> str:
    """The audit policy: Metadata for `groups`, the simulator's pod DELETEs, nothing else."""
    names = ", ".join(f'"{g}"' for g in groups)
    return f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: [{names}]
  - level: Metadata
    users: ["{SIM_USER}"]
    verbs: ["delete"]
    resources: [{{group: "", resources: ["pods"]}}]
  - level: None
"""


def apiserver_args(workdir: Path, groups: Iterable[str], policy_file: str) -> list[str]:
    """kube-apiserver flags logging `groups`' requests to workdir/audit.log."""
    path = workdir / policy_file
    path.write_text(policy(groups))
    return [f"--audit-policy-file={path}", f"--audit-log-path={log_path(workdir)}"]


def log_path(workdir: Path) -> Path:
    return workdir / "audit.log"


@dataclass
class Call:
    user: str
    verb: str
    resource: str  # "nodes/status", "pods/eviction", "leases.coordination.k8s.io"
    namespace: str
    code: int
    received: float  # seconds since the epoch (the API server's clock: this machine's)
    completed: float | None  # None: still running (a watch held open)


def resource_name(event: dict[str, Any]) -> str:
    """What an audit event's request was to: 'pods/eviction', 'leases.coordination.k8s.io'."""
    ref = event.get("objectRef")
    if not ref:  # discovery and other non-resource paths
        return str(event.get("requestURI", "?")).split("?")[0]
    name = str(ref.get("resource", "?"))
    if ref.get("apiGroup"):
        name += f".{ref['apiGroup']}"
    if ref.get("subresource"):
        name += f"/{ref['subresource']}"
    return name


def read(path: Path) -> list[Call]:
    """Every logged request once, with its completion time if it completed."""
    calls: dict[str, Call] = {}
    with path.open() as fh:
        for line in fh:
            event = json.loads(line)
            call = calls.get(event["auditID"])
            if call is None:
                call = calls[event["auditID"]] = Call(
                    user=event["user"]["username"],
                    verb=event["verb"],
                    resource=resource_name(event),
                    namespace=str((event.get("objectRef") or {}).get("namespace", "")),
                    code=int((event.get("responseStatus") or {}).get("code") or 0),
                    received=_stamp(event["requestReceivedTimestamp"]),
                    completed=None,
                )
            if event["stage"] in ("ResponseComplete", "Panic"):
                call.completed = _stamp(event["stageTimestamp"])
                call.code = int((event.get("responseStatus") or {}).get("code") or call.code)
    return sorted(calls.values(), key=lambda c: c.received)


def within(calls: list[Call], start: float, end: float) -> list[Call]:
    return [c for c in calls if start <= c.received < end]


def throttled(calls: list[Call], start: float, end: float) -> int:
    """429 answers in [start, end) (a PDB's or API Priority and Fairness's)."""
    return sum(1 for c in within(calls, start, end) if c.code == 429)


def last_pod_gone(
    calls: list[Call], namespace: str, since: float, until: float = math.inf
) -> float:
    """When the simulator deleted the last pod of `namespace` between `since` and `until`
    (0.0 if it deleted none): every drain has its pods in a namespace of its own."""
    return max(
        (
            c.received
            for c in calls
            if (c.user, c.verb, c.resource, c.namespace) == (SIM_USER, "delete", "pods", namespace)
            and since <= c.received <= until
        ),
        default=0.0,
    )


def _stamp(text: str) -> float:
    when = api_time(text)
    if when is None:
        raise ValueError("an audit event without its timestamp")
    return when
