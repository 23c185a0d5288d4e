"""A condition write the API server did not take is tried again on the shared backoff
(nodeagent/kube/backoff.py): doubling with jitter while the API server does not answer, at
once when it answers again; the schedule as a table, the writer against the real server
behind a relay that refuses connections."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from hack import kubeutil as ku
from nodeagent.kube.backoff import Backoff, Retries
from nodeagent.kube.client import Kube, Reachability
from nodeagent.report import conditions
from nodeagent.report.conditions import ConditionWriter
from tests.tcpproxy import Proxy


@pytest.mark.parametrize(
    ("failures", "answered", "spread", "delay"),
    [
        (1, False, 0.0, 1.0),  # the first try again after a second
        (2, False, 0.0, 2.0),
        (3, False, 0.0, 4.0),
        (5, False, 0.0, 16.0),
        (6, False, 0.0, 30.0),  # the ceiling
        (10_000, False, 0.0, 30.0),  # a week of failures: still the ceiling, no overflow
        (6, False, 0.5, 33.0),  # jitter: up to a fifth more, never less
        (1, False, 0.999, 1.1998),
        (0, False, 0.0, 1.0),  # no failure counted yet: the shortest
        (1, True, 0.0, 1.0),  # answered since: at once, but at most one try a second
        (9, True, 0.0, 1.0),  # however long the backoff had grown
        (9, True, 0.5, 1.1),
    ],
)
def test_the_backoff_doubles_to_its_ceiling_and_answers_cut_it_short(
    failures: int, answered: bool, spread: float, delay: float
) -> None:
    assert Backoff().delay(failures, answered, spread) == pytest.approx(delay)


def test_an_answer_heard_by_the_client_brings_the_retry_forward() -> None:
    reach = Reachability()
    retries = Retries(reach, Backoff(first=1.0, cap=30.0, jitter=0.0))
    assert retries.due() == 0.0  # nothing failed: at once
    for _ in range(5):
        wait = retries.failed()
    assert wait == pytest.approx(16.0, abs=0.01)
    reach.failed("connection refused")  # the outage the failures were in...
    reach.answered()  # ...ended by an answer to any request
    assert retries.due() - time.monotonic() <= 1.0
    retries.succeeded()
    assert retries.due() == 0.0


def test_a_refused_write_lands_at_the_first_answer_not_at_the_end_of_its_backoff(
    kube: Kube, cluster: object, admin_kubeconfig: str, tmp_path: Path
) -> None:
    _group, node, _spare = ku.node_pair(cluster, kube, "retries")
    port = urlsplit(kube.host).port
    assert port is not None
    proxy = Proxy(port)
    try:
        via = ku.via_proxy(proxy.port, admin_kubeconfig, tmp_path)
        # Short steps so the backoff outgrows the outage within the test: 0.25 s doubling.
        writer = ConditionWriter(via, node, Backoff(first=0.25, cap=60.0))
        writer.write_now(conditions.agent_ready())  # the Node observed, a write landed
        landed = writer.last_write
        proxy.cut("refuse")
        began = time.monotonic()
        writer.set(conditions.draining("test"))
        # Tries at 0, 0.25, 0.75, 1.75 and 3.75 s (plus jitter): then 4 s to the next.
        ku.wait_until(lambda: writer.retries.failures >= 5, 15)
        outage = time.monotonic() - began
        assert writer.retries.failures <= 6, "tried more often than the backoff allows"
        assert not writer.flush(0)
        assert writer.last_write == landed  # the last success stays the last success

        proxy.restore()
        heard = time.monotonic()
        via.probe(5.0)  # another request of the agent's client gets an answer
        assert writer.flush(5)
        took = time.monotonic() - heard
        # The backoff had grown to 4 s or more; the answer brought the try to 0.25 s
        # (plus a look every 0.5 s for it).
        assert took < 2.0, f"written {took:.1f}s after the answer ({outage:.1f}s outage)"
        assert writer.retries.failures == 0
        assert writer.last_write > landed
        drained = conditions.find(ku.node(kube, node), conditions.DRAINED)
        assert drained is not None and drained["reason"] == "Draining"
    finally:
        proxy.close()
