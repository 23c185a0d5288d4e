"""The API server's audit log, read per client identity: what one drain cost the API.

Only users in the DRAINERS group are logged (hack/auditlog.py: Metadata level, never bodies)
and, of the kubelet simulator, its pod DELETEs (they time a drain's last pod); the
controllers are not. Each drainer runs under its own client certificate
(user `bench:<drainer>:<node>`), so one drain's requests are those of one user name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hack import auditlog
from hack.auditlog import DRAINERS, READS, WRITES, Call

EVICTION = ("create", "pods/eviction")


def apiserver_args(workdir: Path) -> list[str]:
    """kube-apiserver flags logging the drainers' requests to workdir/audit.log."""
    return auditlog.apiserver_args(workdir, [DRAINERS], "audit-policy.yaml")


def by_user(requests: list[Call]) -> dict[str, list[Call]]:
    out: dict[str, list[Call]] = {}
    for req in requests:
        out.setdefault(req.user, []).append(req)
    return out


def cost(requests: list[Call]) -> Counter[tuple[str, str]]:
    """Calls by (verb, resource)."""
    return Counter((r.verb, r.resource) for r in requests)


def is_eviction(req: Call) -> bool:
    return (req.verb, req.resource) == EVICTION


@dataclass(frozen=True)
class Summary:
    """One drain's requests, reduced to the issue's goals."""

    evictions: int  # every POST .../eviction, retries included
    other_writes: int  # writes beyond the evictions
    pod_writes: int  # of those, into the evicted pods' namespace (their Events): per pod
    reads: int  # GET and LIST (a watch is neither)
    throttled: int  # 429 answers (PDB or API Priority and Fairness)


def summarize(requests: list[Call], namespace: str) -> Summary:
    """One drain's requests; `namespace` holds its evicted pods and nothing else."""
    writes = [r for r in requests if r.verb in WRITES and not is_eviction(r)]
    return Summary(
        evictions=sum(1 for r in requests if is_eviction(r)),
        other_writes=len(writes),
        pod_writes=sum(1 for r in writes if r.namespace == namespace),
        reads=sum(1 for r in requests if r.verb in READS),
        throttled=sum(1 for r in requests if r.code == 429),
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


def phases(requests: list[Call], gone: float, started: float, ended: float) -> Phases | None:
    """`requests` of one drainer; `gone` from hack.auditlog.last_pod_gone."""
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
