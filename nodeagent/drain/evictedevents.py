"""A drain's plain `Evicted` Events: one per pod for the first few of each namespace, then
one for the rest.

A full node's drain evicts hundreds of pods at once, and an Event per pod is one more
write per pod while the API server is busiest with the evictions themselves: on 2 cores,
238 of them made a 240-pod drain 0.42 s slower than none at all (the median of 6 rounds
paired with bench/floor.py). So the drain borrows client-go's threshold and words for
similar Events (10, then "(combined from similar events)"), but groups the pods of a
namespace, where client-go groups the Events of one object: the first PER_NAMESPACE plain
evictions in a namespace get their own Event, and the rest of that namespace one Event
each time a tier of the drain is over, on the last of them, with their number and names
in its message (its count stays 1: on one pod, a count would read as that pod's
evictions).

Only the plain "evicted for this reason" Event is combined. An Event that says something
about one pod (its grace cut, a granted eviction finished, EvictionBlocked, a delete for
the kubelet's shutdown) is always sent for that pod.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nodeagent.kube.client import JSON
from nodeagent.report.events import MESSAGE_LIMIT

PER_NAMESPACE = 10  # client-go's EventAggregator: maxEvents similar events, then combined
COMBINED = "(combined from similar events): "
REASON = "Evicted"

# Where an Event goes: (the pod, its reason, its message), as EventRecorder.pod takes them.
Send = Callable[[JSON, str, str], None]


def combined_message(said: str, names: Sequence[str], limit: int = MESSAGE_LIMIT) -> str:
    """`said` for the pods `names` in one message of at most `limit` characters (unless
    `said` alone is longer): every name if all fit, else as many as fit and how many more
    there are."""
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
class _Namespace:
    sent: int = 0  # plain Events sent one by one in this namespace
    held: list[JSON] = field(default_factory=list)  # evicted past PER_NAMESPACE, unsent


class EvictedEvents:
    """The plain `Evicted` Events of one drain (thread-safe: the evictions' pool calls it).
    `send`: where Events go (None: nowhere); `said`: the plain Event's message."""

    def __init__(self, send: Send | None, said: str, per_namespace: int = PER_NAMESPACE) -> None:
        self.send = send
        self.said = said
        self.per_namespace = per_namespace
        self._namespaces: defaultdict[str, _Namespace] = defaultdict(_Namespace)
        self._lock = threading.Lock()

    def evicted(self, pod: JSON) -> None:
        """`pod` was evicted with its own grace: its own Event now, or a share of its
        namespace's combined one."""
        if self.send is None:
            return
        with self._lock:
            namespace = self._namespaces[pod["metadata"]["namespace"]]
            alone = namespace.sent < self.per_namespace
            if alone:
                namespace.sent += 1
            else:
                namespace.held.append(pod)
        if alone:
            self.send(pod, REASON, self.said)

    def send_combined(self) -> None:
        """One Event for each namespace's pods held since the last call (none twice)."""
        if self.send is None:
            return
        with self._lock:
            batches = [ns.held for ns in self._namespaces.values() if ns.held]
            for ns in self._namespaces.values():
                ns.held = []
        for pods in batches:
            names = [p["metadata"]["name"] for p in pods]
            self.send(pods[-1], REASON, combined_message(self.said, names))
