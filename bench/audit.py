"""The API server's audit log, read per client identity: what one drain cost the API.

Only users in the DRAINERS group are logged (at Metadata level: verb, resource, user, code,
timestamps, never bodies); the controllers and the kubelet simulator are not, so the log
holds exactly the drainers' requests. Each drainer runs under its own client certificate
(user `bench:<drainer>:<node>`), so one drain's requests are those of one user name.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hack.fleet.apiusage import DRAINERS, SIM_USER, resource_name, stamp

# The drainers' requests, and the simulator's pod DELETEs: its last one (grace 0, after the
# containers stopped) is when a pod is gone, which times the wait for the last pod.
POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["{DRAINERS}"]
  - level: Metadata
    users: ["{SIM_USER}"]
    verbs: ["delete"]
    resources: [{{group: "", resources: ["pods"]}}]
  - level: None
"""
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READS = frozenset({"get", "list"})
EVICTION = ("create", "pods/eviction")


def apiserver_args(workdir: Path) -> list[str]:
    """kube-apiserver flags logging the drainers' requests to workdir/audit.log."""
    policy = workdir / "audit-policy.yaml"
    policy.write_text(POLICY)
    return [f"--audit-policy-file={policy}", f"--audit-log-path={log_path(workdir)}"]


def log_path(workdir: Path) -> Path:
    return workdir / "audit.log"


@dataclass(frozen=True)
class Request:
    user: str
    verb: str
    resource: str  # "nodes", "pods/eviction", "events.events.k8s.io"
    namespace: str
    code: int
    received: float  # seconds since the epoch


def read(path: Path) -> list[Request]:
    """Every logged request once (a watch logs ResponseStarted and ResponseComplete)."""
    seen: dict[str, Request] = {}
    with path.open() as fh:
        for line in fh:
            event = json.loads(line)
            if event["auditID"] in seen:
                continue
            seen[event["auditID"]] = Request(
                user=event["user"]["username"],
                verb=event["verb"],
                resource=resource_name(event),
                namespace=str((event.get("objectRef") or {}).get("namespace", "")),
                code=int((event.get("responseStatus") or {}).get("code") or 0),
                received=stamp(event["requestReceivedTimestamp"]),
            )
    return sorted(seen.values(), key=lambda r: r.received)


def by_user(requests: list[Request]) -> dict[str, list[Request]]:
    out: dict[str, list[Request]] = {}
    for req in requests:
        out.setdefault(req.user, []).append(req)
    return out


def cost(requests: list[Request]) -> Counter[tuple[str, str]]:
    """Requests by (verb, resource)."""
    return Counter((r.verb, r.resource) for r in requests)


def is_eviction(req: Request) -> bool:
    return (req.verb, req.resource) == EVICTION


@dataclass(frozen=True)
class Summary:
    """One drain's requests, reduced to the issue's goals."""

    evictions: int  # every POST .../eviction, retries included
    other_writes: int  # writes beyond the evictions
    pod_writes: int  # of those, into the evicted pods' namespace (their Events): per pod
    reads: int  # GET and LIST (a watch is neither)
    throttled: int  # 429 answers (PDB or API Priority and Fairness)


def summarize(requests: list[Request], namespace: str) -> Summary:
    """One drain's requests; `namespace` holds its evicted pods and nothing else."""
    writes = [r for r in requests if r.verb in WRITES and not is_eviction(r)]
    return Summary(
        evictions=sum(1 for r in requests if is_eviction(r)),
        other_writes=len(writes),
        pod_writes=sum(1 for r in writes if r.namespace == namespace),
        reads=sum(1 for r in requests if r.verb in READS),
        throttled=sum(1 for r in requests if r.code == 429),
    )


def last_pod_gone(requests: list[Request], namespace: str, since: float, until: float) -> float:
    """When the simulator deleted the last pod of `namespace` between `since` and `until`
    (0.0 if it deleted none): every drain has its pods in a namespace of its own."""
    return max(
        (
            r.received
            for r in requests
            if r.user == SIM_USER
            and (r.verb, r.resource, r.namespace) == ("delete", "pods", namespace)
            and since <= r.received <= until
        ),
        default=0.0,
    )


@dataclass(frozen=True)
class Phases:
    """Where one drain's wall time went, from the process start to its exit."""

    to_first_request: float  # interpreter, imports, config, credentials
    to_first_eviction: float  # cordon, list, Events, set-up before evicting
    evicting: float  # first to last eviction request (429 retries included)
    to_gone: float  # the last eviction to the last evicted pod's deletion
    gone_to_last_request: float  # requests after the last pod went (final report)
    to_exit: float  # the later of the two to the process's exit


def phases(requests: list[Request], gone: float, started: float, ended: float) -> Phases | None:
    """`requests` of one drainer; `gone` from last_pod_gone."""
    evictions = [r.received for r in requests if is_eviction(r)]
    if not requests or not evictions or not gone:
        return None
    first, last = requests[0].received, requests[-1].received
    return Phases(
        to_first_request=first - started,
        to_first_eviction=evictions[0] - first,
        evicting=evictions[-1] - evictions[0],
        to_gone=gone - evictions[-1],
        gone_to_last_request=max(0.0, last - gone),
        to_exit=ended - max(last, gone),
    )
