"""No request lost when a node leaves: real nodes, a real kube-proxy, steady traffic.

Two real nodes (hack/realnode) with the agent installed from its package; the service
(hack/workload: readiness probe, preStop pause, graceful shutdown, a 20 s endpoint) spread
over them behind a ClusterIP Service and a PDB, one do-not-disrupt pod on the leaving node;
a client namespace whose real kube-proxy runs as the staying node sends ~50 requests/s
(new connections and keep-alive) and long requests (hack/departure/scene.py). The leaving
node powers off, or is tainted for evacuation and powered off once drained: no request may
fail and no long request may be cut. How long it takes is the benchmark's business
(bench/departure.py), not this test's.

The scene's teardown fails the test if the nodes or the client namespace left anything on
the host; the host's kernel tunables are checked here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.departure.kinds import CONFIGS, Kind
from hack.departure.scene import Scene
from hack.departure.summary import summarize
from hack.realnode import host as realhost
from hack.realnode.traffic import netns_leftovers

pytestmark = pytest.mark.timeout(900)

# Above the long request (20 s): the do-not-disrupt pod finishes it before the ceiling ends.
AGENT = """
[drain]
do_not_disrupt_ceiling = "25s"
"""


def depart(cluster: Any, tmp_path: Path, kind: Kind) -> dict[str, Any]:
    tunables = realhost.sysctls()
    group = ku.unique("traffic")
    with Scene.up(cluster, tmp_path, group, CONFIGS["nodeagent"], AGENT) as scene:
        netns = scene.client.netns
        cell = summarize(scene.depart(kind))
    print(cell)
    # Its own client namespace only: another run on the host (a benchmark) may hold one.
    assert netns not in netns_leftovers()
    assert realhost.sysctls() == tunables
    # The traffic went through the departing node before it left, and no longer after.
    assert cell["served_by_departed"] > 0, cell
    assert cell["routed_to_departed_until_s"] is not None, cell
    assert cell["long_sent"] >= 5 and cell["sent"] > 1000, cell
    return cell


def test_poweroff_with_the_agent_loses_no_request(cluster: Any, tmp_path: Path) -> None:
    cell = depart(cluster, tmp_path, Kind.POWEROFF)
    assert (cell["failed"], cell["long_cut"]) == (0, 0), cell


def test_evacuation_with_the_agent_loses_no_request(cluster: Any, tmp_path: Path) -> None:
    cell = depart(cluster, tmp_path, Kind.EVACUATE)
    assert (cell["failed"], cell["long_cut"]) == (0, 0), cell
