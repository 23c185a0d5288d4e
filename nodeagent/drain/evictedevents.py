"""A drain's plain `Evicted` Events: one per pod for the first few of each namespace, then
one for the rest.

A full node's drain evicts hundreds of pods at once, and an Event per pod is one more
write per pod while the API server is busiest with the evictions themselves: on 2 cores,
238 of them made a 240-pod drain about 0.4 s slower (bench/drain_bench.py). So the drain
does as client-go's event correlator does with similar events (10 in 10 minutes, then
"(combined from similar events)"): the first PER_NAMESPACE plain evictions in a namespace
get their own Event, and the rest of that namespace one Event at the drain's end, on the
last of them, with their number as its count and their names in its message.

Only the plain "evicted for this reason" Event is combined. An Event that says something
about one pod (its grace cut, a granted eviction finished, EvictionBlocked, a delete
for the kubelet's shutdown) is always sent for that pod.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from nodeagent.kube.client import JSON
from nodeagent.report.events import MESSAGE_LIMIT, EventRecorder

PER_NAMESPACE = 10  # client-go's EventAggregator: maxEvents similar events, then combined
COMBINED = "(combined from similar events): "
REASON = "Evicted"


def combined_message(said: str, names: Sequence[str], limit: int = MESSAGE_LIMIT) -> str:
    """`said` for the pods `names` in one message of at most `limit` characters: every
    name if all fit, else as many as fit and how many more there are."""
    head = f"{COMBINED}{said}; {len(names)} more pod{'' if len(names) == 1 else 's'}"
    every = f"{head}: {', '.join(names)}"
    if len(every) <= limit:
        return every
    shown: list[str] = []
    for name in names:
        more = f", and {len(names) - len(shown) - 1} more"
        if len(f"{head}: {', '.join([*shown, name])}{more}") > limit:
            break
        shown.append(name)
    if not shown:
        return head
    return f"{head}: {', '.join(shown)}, and {len(names) - len(shown)} more"


@dataclass
class _Held:
    sent: int = 0  # plain Events sent one by one in this namespace
    pods: list[JSON] = field(default_factory=list)  # the evicted pods past PER_NAMESPACE


class EvictedEvents:
    """The plain `Evicted` Events of one drain (thread-safe: the evictions' pool calls it)."""

    def __init__(self, events: EventRecorder | None, per_namespace: int = PER_NAMESPACE) -> None:
        self.events = events
        self.per_namespace = per_namespace
        self._namespaces: defaultdict[str, _Held] = defaultdict(_Held)
        self._lock = threading.Lock()

    def evicted(self, pod: JSON, said: str) -> None:
        """`pod` was evicted, for the reason `said`: its own Event now, or a share of its
        namespace's combined one."""
        if self.events is None:
            return
        with self._lock:
            held = self._namespaces[pod["metadata"]["namespace"]]
            alone = held.sent < self.per_namespace
            if alone:
                held.sent += 1
            else:
                held.pods.append(pod)
        if alone:
            self.events.pod(pod, REASON, said)

    def send_combined(self, said: str) -> None:
        """One Event for each namespace's pods past its first PER_NAMESPACE (once: what is
        sent is forgotten)."""
        if self.events is None:
            return
        with self._lock:
            held = [h.pods for h in self._namespaces.values() if h.pods]
            for h in self._namespaces.values():
                h.pods = []
        for pods in held:
            names = [p["metadata"]["name"] for p in pods]
            message = combined_message(said, names)
            self.events.pod(pods[-1], REASON, message, count=len(pods))
