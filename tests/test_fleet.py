"""A fleet of resident agents at a size CI can carry (bench/fleet.py measures 100).

A cluster of its own (hack/fleet/scene.py, as the bench's), with the audit log of
hack/fleet/apiusage.py, a small API server and every agent (one `nodeagent run` per
simulated node, each as its node) in a priority level of one share that rejects what does
not fit: all agents started at once get 429s from API Priority and Fairness. Each must wait
them out: every agent ready, none exiting (the bench starts an agent that exits again and
counts it), then every node of an evacuation wave drained.
Deadlines here are bounds, not goals: the timing goals live in the bench.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hack import auditlog
from hack import kubeutil as ku
from hack.fleet import apf, apiusage
from hack.fleet import scene as fleet
from hack.fleet.residents import Residents
from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import Kube

AGENTS, WAVE, PODS = 16, 4, 5
# A server of 60 seats (the later flags win): the agents' level of one share then has one
# seat, and agents starting together collide on it whatever the machine's speed.
SMALL_SERVER = ["--max-requests-inflight=40", "--max-mutating-requests-inflight=20"]


@dataclass
class Fleet:
    cluster: Cluster
    kube: Kube
    workdir: Path


@pytest.fixture(scope="module")
def throttled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("fleet")
    cluster = fleet.start_cluster(workdir, SMALL_SERVER)
    try:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        fleet.apply_pdb_reader(kube)
        apf.throttle_group(kube, apiusage.AGENTS)
        yield Fleet(cluster, kube, workdir)
    finally:
        cluster.stop()


def assert_every_429_sent_again(log: Path) -> None:
    """Every request an agent got a 429 for was sent again and answered: waited out, not
    given up on (Events go from a background sender: their retry may still be due)."""

    def unanswered() -> list[auditlog.Call]:
        return apiusage.unanswered_429s(apiusage.agents_only(auditlog.read(log)), 0, math.inf)

    try:
        ku.wait_until(lambda: not unanswered(), 30, "every 429 sent again")
    except AssertionError:
        assert unanswered() == []


@pytest.mark.timeout(600)
def test_start_storm_and_wave_under_apf_rejections(throttled: Fleet) -> None:
    kube, log = throttled.kube, auditlog.log_path(throttled.workdir)
    lay = fleet.build(throttled.cluster, kube, AGENTS, WAVE, PODS)
    residents = Residents(throttled.cluster, throttled.workdir / "agents", lay.agents)
    try:
        storm = fleet.storm(kube, residents, lay, log)
        print(
            f"\n{AGENTS} agents ready after {storm.ready_s:.1f}s, {storm.throttled} APF 429s "
            f"waited out, {storm.restarts} restarts"
        )
        assert storm.restarts == 0, storm.exits
        assert storm.throttled > 0, "the priority level never rejected: the test proves nothing"
        assert_every_429_sent_again(log)

        drains = fleet.wave(kube, lay, log)  # raises unless every node's pods are gone
        assert sorted(d.node for d in drains) == sorted(lay.wave)
        assert all(not math.isnan(d.first_eviction) for d in drains), drains
        assert all(not ku.pods_on(kube, n) for n in lay.wave)
        assert all(ku.node(kube, n)["spec"].get("unschedulable") for n in lay.wave)
        assert residents.restarts == 0, residents.exit_codes()
        assert_every_429_sent_again(log)
        calls = apiusage.agents_only(auditlog.read(log))
        print(f"{auditlog.throttled(calls, 0, math.inf)} APF 429s waited out in all")
    finally:
        residents.stop()
