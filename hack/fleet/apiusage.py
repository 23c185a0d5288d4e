"""What a fleet of resident agents asks of the API server, from its audit log.

Every agent runs as its node, as the host form does by default (client certificate
CN=system:node:<node>, O=system:nodes), so the audit policy logs that group (Metadata
level: verb, resource, user, code, stage times, never bodies); the controllers and the
kubelet simulator run as other users and are not logged, but for the simulator's pod
DELETEs, which time a drain's last pod (hack/auditlog.py: the log and its reading, shared
with the drain benchmark). The floor's drains (bench/fleet.py) log as the DRAINERS group. A
watch is logged when its response starts and when it ends, so the log also says how many
watches each agent held and for how long.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hack import auditlog
from hack.auditlog import DRAINERS, READS, WRITES, Call, within

AGENTS = "system:nodes"
AGENT_PREFIX = "system:node:"
NODE_RESOURCES = frozenset({"nodes", "nodes/status"})


def apiserver_args(workdir: Path) -> list[str]:
    """kube-apiserver flags logging the agents' and the floor's requests."""
    return auditlog.apiserver_args(workdir, [AGENTS, DRAINERS], "fleet-audit-policy.yaml")


def agents_only(calls: list[Call]) -> list[Call]:
    return [c for c in calls if c.user.startswith(AGENT_PREFIX)]


@dataclass(frozen=True)
class Rates:
    """Requests per agent-hour in a window, and the watches held meanwhile."""

    by_kind: dict[tuple[str, str], float]  # (verb, resource) -> per agent-hour
    node_writes: float  # writes to nodes and nodes/status
    reads: float  # get and list (a watch is neither)
    watch_starts: float  # watch requests (each resumes a watch that ended)
    requests: float  # every request, watches included
    watches_held: float  # mean open watches per agent over the window
    watches_held_max: int  # most open watches of one agent at any start or end of one
    throttled: int  # 429 answers in the window, all agents


def rates(calls: list[Call], agents: int, start: float, end: float) -> Rates:
    """`calls` of the agents only (agents_only); the window is [start, end)."""
    hours = (end - start) / 3600
    seen = within(calls, start, end)
    kinds = Counter((c.verb, c.resource) for c in seen)
    per = 1 / (agents * hours)
    by_kind = {k: n * per for k, n in sorted(kinds.items())}
    node_writes = sum(n for (v, r), n in kinds.items() if v in WRITES and r in NODE_RESOURCES)
    reads = sum(n for (v, _r), n in kinds.items() if v in READS)
    watch_starts = sum(n for (v, _r), n in kinds.items() if v == "watch")
    held, most = _watches_held(calls, start, end)
    return Rates(
        by_kind=by_kind,
        node_writes=node_writes * per,
        reads=reads * per,
        watch_starts=watch_starts * per,
        requests=len(seen) * per,
        watches_held=held / agents,
        watches_held_max=most,
        throttled=sum(1 for c in seen if c.code == 429),
    )


def _watches_held(calls: list[Call], start: float, end: float) -> tuple[float, int]:
    """(open watches of all agents, averaged over the window; the most one agent held at
    once). A watch still open at the end of the log counts as open until `end`."""
    watches = [c for c in calls if c.verb == "watch" and c.code in (0, 200)]
    total = 0.0
    for w in watches:
        until = w.completed if w.completed is not None else end
        total += max(0.0, min(until, end) - max(w.received, start))
    most = 0
    for user in {w.user for w in watches}:
        mine = [w for w in watches if w.user == user]
        edges = sorted({start} | {w.received for w in mine} | {w.completed or end for w in mine})
        for t in edges:
            if start <= t < end:
                most = max(most, sum(1 for w in mine if w.received <= t < (w.completed or end)))
    return total / (end - start), most


def unanswered_429s(calls: list[Call], start: float, end: float) -> list[Call]:
    """The 429s in [start, end) after which the same user never made the same request
    (verb, resource, namespace) again and had it answered: the refusals a client gave up
    on. Any answer but another 429 counts: a write guarded by a resourceVersion may
    rightly meet a 409 once it is sent again, which the client then reads and decides on."""
    return [
        c
        for c in within(calls, start, end)
        if c.code == 429
        and not any(
            (d.user, d.verb, d.resource, d.namespace) == (c.user, c.verb, c.resource, c.namespace)
            and d.received > c.received
            and d.code != 429
            for d in calls
        )
    ]
