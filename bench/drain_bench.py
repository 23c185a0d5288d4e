"""Drain benchmark: `nodeagent drain` against the floor and `kubectl drain`, one cluster.

Each scenario loads one simulated node per drainer (with a cordoned spare, opened just before
the drain, for the replacements) and drains it with a whole process, start-up included:
the floor (bench/floor.py: cordon, list, evict 32 at a time, watch until gone; nothing
else), `nodeagent drain`, and `kubectl drain --ignore-daemonsets --delete-emptydir-data`.
Every drain runs under its own client certificate and the API server audits those users
only, so the bench also prints what each drain asked of the API, per evicted pod.

    python bench/drain_bench.py                      # every scenario, starts its own cluster
    python bench/drain_bench.py --only a --only startup --skip-kubectl
    python bench/drain_bench.py --only full --pods 240 --rounds 3   # a 240-pod node

Many nodes at once is bench/fleet.py's: resident agents, as a fleet runs them.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import audit, report, workload
from bench.drainers import Drain, Drainer, Identities, run_drain, turn
from bench.workload import SETTLE_TIMEOUT
from hack import auditlog, preflight
from hack import kubeutil as ku
from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import Kube

SIM_NODE_PODS = 250  # the simulated node's pod capacity (hack/localcluster/podstatus.py)


@dataclass(frozen=True)
class Scenario:
    key: str
    name: str
    replicas: int
    daemonsets: int
    annotations: dict[str, str]
    pdb_max_unavailable: int | None = None


def full_node(pods: int) -> Scenario:
    """The `full` scenario with `pods` on the node, its 2 DaemonSet pods included."""
    name = f"full: {pods - 2} pods + 2 DaemonSet pods (node capacity {SIM_NODE_PODS})"
    return Scenario("full", name, pods - 2, 2, {})


SCENARIOS = (
    Scenario("a", "a: 100 pods + 2 DaemonSet pods, exit at once", 100, 2, {}),
    Scenario(
        "b",
        "b: same, 2 s termination delay",
        100,
        2,
        {"sim.nodeagent.io/termination-delay": "2s"},
    ),
    Scenario(
        "c",
        "c: 10 replicas, PDB maxUnavailable 1, Ready after 1 s",
        10,
        0,
        {"sim.nodeagent.io/ready-delay": "1s"},
        pdb_max_unavailable=1,
    ),
    full_node(SIM_NODE_PODS),
)


@dataclass(frozen=True)
class Loaded:
    group: str
    node: str
    spare: str


def prepare(cluster: Cluster, kube: Kube, scenario: Scenario) -> Loaded:
    """A node loaded as the scenario says and its cordoned spare."""
    group, node, spare = ku.node_pair(cluster, kube, "bench")
    ku.deployment(kube, group, "app", group, scenario.replicas, annotations=scenario.annotations)
    for i in range(scenario.daemonsets):
        ku.daemonset(kube, group, f"ds{i}", group)
    if scenario.pdb_max_unavailable is not None:
        ku.pdb(kube, group, "app", {"app": "app"}, maxUnavailable=scenario.pdb_max_unavailable)
    ku.wait_running(kube, node, scenario.replicas + scenario.daemonsets, timeout=SETTLE_TIMEOUT)
    ku.wait_deployment_ready(kube, group, "app", timeout=SETTLE_TIMEOUT)
    if scenario.pdb_max_unavailable is not None:
        ku.wait_pdb_ready(kube, group, "app")
    return Loaded(group, node, spare)


def run_scenario(
    cluster: Cluster,
    kube: Kube,
    ids: Identities,
    scenario: Scenario,
    drainers: list[Drainer],
    rounds: int,
) -> list[Drain]:
    drains = []
    for drainer in [d for r in range(rounds) for d in turn(drainers, r)]:
        loaded = prepare(cluster, kube, scenario)
        ku.open_node(kube, loaded.spare)
        who = ids.mint(drainer, loaded.node)
        kubectl = cluster.bin_dir / "kubectl"
        drain = run_drain(drainer, loaded.node, loaded.group, who, kubectl)
        drains.append(drain)
        if not drain.failed:  # the replacements start before the next drain
            replaced = scenario.replicas + scenario.daemonsets
            ku.wait_running(kube, loaded.spare, replaced, timeout=SETTLE_TIMEOUT)
        workload.remove(kube, [loaded.group], [loaded.node, loaded.spare])
    return drains


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    keys = [s.key for s in SCENARIOS] + ["startup"]
    parser.add_argument(
        "--only",
        choices=keys,
        action="append",
        help="run only these scenarios (repeatable); default: all. "
        "startup: interpreter and import time of each drainer",
    )
    parser.add_argument(
        "--skip-kubectl", action="store_true", help="leave kubectl out (it is the slow one)"
    )
    parser.add_argument(
        "--floor-events",
        action="store_true",
        help="add the floor with one Event per evicted pod (prices nodeagent's Events)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="drains per drainer and scenario, medians reported (kubectl runs once)",
    )
    parser.add_argument(
        "--pods",
        type=int,
        default=SIM_NODE_PODS,
        metavar="N",
        help=f"pods on the node in the full scenario, its 2 DaemonSet pods included "
        f"(default and most: the node's capacity, {SIM_NODE_PODS})",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep the audit log, the cluster's logs and every drain's output in DIR",
    )
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not 3 <= args.pods <= SIM_NODE_PODS:
        parser.error(f"--pods must be between 3 and {SIM_NODE_PODS}")
    return args


def compile_bytecode() -> None:
    """Byte-compile nodeagent and the floor as an install does (the .deb ships bytecode).
    Without it every drain process compiles its modules from source again where the
    environment forbids writing bytecode (PYTHONDONTWRITEBYTECODE), which is start-up
    time no installed agent pays."""
    root = Path(__file__).resolve().parent.parent
    for package in ("nodeagent", "bench"):
        compileall.compile_dir(root / package, quiet=1)


def main() -> int:
    preflight.require("bench/drain_bench.py", None)
    args = parse_args()
    compile_bytecode()
    wanted = set(args.only or [s.key for s in SCENARIOS] + ["startup"])
    drainers = [Drainer.FLOOR, Drainer.NODEAGENT]
    drainers += [Drainer.FLOOR_EVENTS] if args.floor_events else []
    drainers += [] if args.skip_kubectl else [Drainer.KUBECTL]
    print(report.load_line("start"), flush=True)
    if "startup" in wanted:
        report.startup(print)
    chosen = [full_node(args.pods) if s.key == "full" else s for s in SCENARIOS]
    scenarios = [s for s in chosen if s.key in wanted]
    if not scenarios:
        return 0
    done: list[Drain] = []
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        workdir = Path(tmp)
        cluster = Cluster.start(workdir, apiserver_extra_args=audit.apiserver_args(workdir))
        try:
            kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
            ids = Identities(cluster, workdir / "identities", args.keep)
            for scenario in scenarios:
                drains = run_scenario(cluster, kube, ids, scenario, drainers, args.rounds)
                done += drains
                report.scenario(
                    scenario.name, drains, scenario.replicas, auditlog.log_path(workdir), print
                )
                print(report.load_line("after " + scenario.key), flush=True)
            closed = workload.terminated_watchers(cluster)
            print(f"\nwatches the API server closed on slow clients, whole run: {closed or 0}")
        finally:
            cluster.stop()
            if args.keep:
                shutil.copyfile(auditlog.log_path(workdir), args.keep / "audit.log")
                shutil.copytree(workdir / "logs", args.keep / "cluster-logs", dirs_exist_ok=True)
    return report.failures(done, print)


if __name__ == "__main__":
    sys.exit(main())
