"""The plain Evicted Events of a drain, one per pod and then combined per namespace
(nodeagent/drain/evictedevents.py): decisions only; tests/test_drain.py drains a node."""

from __future__ import annotations

import threading

import pytest

from nodeagent.drain.evictedevents import COMBINED, REASON, EvictedEvents, combined_message
from nodeagent.kube.client import JSON

SAID = "Evicted by nodeagent (manual)"


class Sent(list[tuple[str, str, str]]):
    """The Events sent: (namespace/name of the pod, reason, message)."""

    def __call__(self, pod: JSON, reason: str, message: str) -> None:
        meta = pod["metadata"]
        self.append((f"{meta['namespace']}/{meta['name']}", reason, message))

    def combined(self) -> list[tuple[str, str, str]]:
        return [e for e in self if e[2].startswith(COMBINED)]


def pod(namespace: str, name: str) -> JSON:
    return {"metadata": {"namespace": namespace, "name": name}}


def test_each_namespace_has_its_own_first_events_and_its_own_combined_one() -> None:
    sent = Sent()
    events = EvictedEvents(sent, SAID, per_namespace=10)
    for i in range(12):
        events.evicted(pod("a", f"a{i}"))
        events.evicted(pod("b", f"b{i}"))
    assert len(sent) == 20 and not sent.combined()

    events.send_combined()

    combined = sorted(sent.combined())
    assert combined == [
        ("a/a11", REASON, f"{COMBINED}{SAID}; 2 more pods: a10, a11"),
        ("b/b11", REASON, f"{COMBINED}{SAID}; 2 more pods: b10, b11"),
    ]
    events.send_combined()
    assert len(sent) == 22, "a second call sent the same pods again"


def test_pods_evicted_after_a_combined_event_go_in_the_next() -> None:
    sent = Sent()
    events = EvictedEvents(sent, SAID, per_namespace=1)
    events.evicted(pod("a", "first"))
    events.evicted(pod("a", "second"))
    events.send_combined()
    events.evicted(pod("a", "third"))
    events.send_combined()
    assert [e[0] for e in sent] == ["a/first", "a/second", "a/third"]
    assert len(sent.combined()) == 2


def test_from_many_threads_every_pod_is_told_exactly_once() -> None:
    sent = Sent()
    events = EvictedEvents(sent, SAID, per_namespace=10)
    names = [f"p{i}" for i in range(96)]  # all named in one message
    threads = [
        threading.Thread(target=lambda ns=names[i::32]: [events.evicted(pod("a", n)) for n in ns])
        for i in range(32)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events.send_combined()
    (combined,) = sent.combined()
    alone = [e[0].split("/")[1] for e in sent if e not in sent.combined()]
    told = alone + combined[2].split(": ")[-1].split(", ")
    assert len(alone) == 10 and sorted(told) == sorted(names)


THREE = ["aaaa", "bbbb", "c" * 20]


@pytest.mark.parametrize(
    ("names", "limit", "said"),
    [
        (["a", "b"], 1024, f"{COMBINED}Evicted; 2 more pods: a, b"),
        (THREE, len(COMBINED) + 54, f"{COMBINED}Evicted; 3 more pods: aaaa, bbbb, {'c' * 20}"),
        (THREE, len(COMBINED) + 44, f"{COMBINED}Evicted; 3 more pods: aaaa, bbbb, and 1 more"),
        (THREE, len(COMBINED) + 43, f"{COMBINED}Evicted; 3 more pods: aaaa, and 2 more"),
        (THREE, len(COMBINED) + 37, f"{COMBINED}Evicted; 3 more pods"),
        (["a" * 2000], 1024, f"{COMBINED}Evicted; 1 more pod"),
    ],
)
def test_a_combined_event_names_as_many_pods_as_fit(
    names: list[str], limit: int, said: str
) -> None:
    message = combined_message("Evicted", names, limit)
    assert message == said and len(message) <= limit
