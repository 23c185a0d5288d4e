"""Drain benchmark: `nodeagent drain` against `kubectl drain` on the same cluster.

Each scenario builds two identical simulated nodes (plus a spare each for the
replacements), drains one with `kubectl drain --ignore-daemonsets
--delete-emptydir-data` and the other with `nodeagent drain`, and prints both wall
times (whole processes, start-up included) and their ratio.

    python bench/drain_bench.py            # starts its own local control plane
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import Kube
from tests import kubeutil as ku


@dataclass(frozen=True)
class Scenario:
    name: str
    replicas: int
    daemonsets: int
    annotations: dict[str, str]
    pdb_max_unavailable: int | None = None


SCENARIOS = (
    Scenario("a: 100 pods + 2 DaemonSet pods, exit at once", 100, 2, {}),
    Scenario(
        "b: same, 2 s termination delay", 100, 2, {"sim.nodeagent.io/termination-delay": "2s"}
    ),
    Scenario(
        "c: 10 replicas, PDB maxUnavailable 1, Ready after 1 s",
        10,
        0,
        {"sim.nodeagent.io/ready-delay": "1s"},
        pdb_max_unavailable=1,
    ),
)


def prepare(cluster: Cluster, kube: Kube, scenario: Scenario) -> tuple[str, str]:
    """A loaded node and its (cordoned) spare; returns (node, spare)."""
    ns, node, spare = ku.node_pair(cluster, kube, "bench")
    group = ns
    ku.deployment(kube, ns, "app", group, scenario.replicas, annotations=scenario.annotations)
    for i in range(scenario.daemonsets):
        ku.daemonset(kube, ns, f"ds{i}", group)
    if scenario.pdb_max_unavailable is not None:
        ku.pdb(kube, ns, "app", {"app": "app"}, maxUnavailable=scenario.pdb_max_unavailable)
    ku.wait_running(kube, node, scenario.replicas + scenario.daemonsets, timeout=180)
    if scenario.pdb_max_unavailable is not None:
        ku.wait_pdb_ready(kube, ns, "app")
    ku.open_node(kube, spare)
    return node, spare


def timed(cmd: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return took


def run(cluster: Cluster, scenario: Scenario) -> tuple[float, float]:
    kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
    kc = str(cluster.kubeconfig)
    kubectl_node, _ = prepare(cluster, kube, scenario)
    agent_node, _ = prepare(cluster, kube, scenario)
    kubectl = timed(
        [
            str(cluster.bin_dir / "kubectl"),
            "--kubeconfig",
            kc,
            "drain",
            kubectl_node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=300s",
        ]
    )
    agent = timed(
        [
            sys.executable,
            "-m",
            "nodeagent",
            "drain",
            "--node",
            agent_node,
            "--kubeconfig",
            kc,
            "--deadline",
            "300s",
        ]
    )
    return kubectl, agent


def report(results: list[tuple[Scenario, float, float]], out: Callable[[str], None]) -> None:
    out(f"{'scenario':58} {'kubectl':>8} {'nodeagent':>9} {'ratio':>6}")
    for scenario, kubectl, agent in results:
        out(f"{scenario.name:58} {kubectl:7.2f}s {agent:8.2f}s {agent / kubectl:6.2f}")
    delayed = next(a for s, _, a in results if s.name.startswith("b"))
    out(f"scenario b: nodeagent overhead beyond the 2 s delay: {delayed - 2:.2f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["a", "b", "c"], action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        cluster = Cluster.start(Path(tmp))
        try:
            results = [
                (s, *run(cluster, s)) for s in SCENARIOS if not args.only or s.name[0] in args.only
            ]
        finally:
            cluster.stop()
    report(results, print)


if __name__ == "__main__":
    main()
