"""A fleet of resident agents on one API server: N `nodeagent run`, one per simulated node.

What a cluster-wide event asks of the API server when every node runs the agent, and
what the agents cost it while nothing happens:

1. start storm: all N agents started within a second (a cold start of the cluster, a
   DaemonSet rollout); the time until every node's NodeAgentReady is True, and how many
   agents exited (each is started again, as systemd would, and counted);
2. idle: requests per agent-hour by verb and resource (the audit log, by each agent's own
   user), watches held per agent, and each agent's RSS and CPU;
3. a wave: W nodes of 25 pods tainted for evacuation within a second, the time until each
   node's pods are gone; beside it W floor drains (bench/floor.py) of W other nodes at once;
   run R times (the pods sent home in between), and the slowest node's time over the
   slowest floor drain's taken as the median of the R rounds: one round on a shared
   machine is noise;
4. the fleet at 5,000 nodes, extrapolated from the per-agent figures, beside the kubelet's.

The kubelet simulator renews each node's Lease every 10 s and writes its status every
5 minutes, as the kubelet does when nothing changes. The fleet's nodes, the start storm and
a wave's nodeagent side are hack/fleet/scene.py's, which tests/test_fleet.py runs too.

    python bench/fleet.py [--agents N] [--wave N] [--waves R] [--idle-minutes M] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.drain_bench import compile_bytecode
from bench.drainers import Drain, Drainer, Identities, run_drain
from bench.report import load_line
from hack import auditlog, preflight
from hack import kubeutil as ku
from hack.fleet import apf, apiusage
from hack.fleet.residents import Residents
from hack.fleet.scene import (
    DRAIN_TIMEOUT,
    FLEET_LABEL,
    READY_TIMEOUT,
    Layout,
    NodeDrain,
    Storm,
    apply_pdb_reader,
    build,
    start_cluster,
    storm,
    wave,
)
from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import JSON, ApiError, Kube, node_path, pods_path

SETTLE = 30.0  # after the storm: the one-shot start-up steps (rights, reconcile, leftovers)
# The kubelet per node (the reference): a Lease every 10 s, its Node status every 5 min
# when nothing changes, and at least three watches (its Node, its pods, Services), each
# resumed every 5-10 minutes (client-go's reflector; 7.5 on average).
KUBELET_LEASE_S, KUBELET_STATUS_S, KUBELET_WATCHES, KUBELET_REWATCH_S = 10, 300, 3, 450
AT_SCALE = 5000
Out = Callable[[str], None]


# ---- 2. idle ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Idle:
    seconds: float
    start: float  # wall clock
    end: float
    cpu_s: list[float]  # per agent, over the window
    rss_mb: list[float]  # per agent, at the end
    pss_mb_total: float  # proportional set size of all agents together (shared pages split)
    threads: list[int]
    control_plane_cpu_s: dict[str, float]  # over the window: the API server, etcd, simulator


def _cpu(pid: int) -> float:
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def idle(cluster: Cluster, residents: Residents, minutes: float) -> Idle:
    procs = [psutil.Process(a.proc.pid) for a in residents.agents if a.proc]
    cpu0 = [a.cpu_seconds() for a in residents.agents]
    control = {name: ref.pid for name, ref in cluster.procs.items()}
    control0 = {name: _cpu(pid) for name, pid in control.items()}
    start = time.time()
    time.sleep(minutes * 60)
    end = time.time()
    cpu = [a.cpu_seconds() - c for a, c in zip(residents.agents, cpu0, strict=True)]
    pss = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            pss += p.memory_full_info().pss / 2**20
    return Idle(
        seconds=end - start,
        start=start,
        end=end,
        cpu_s=cpu,
        rss_mb=[a.rss_mb() for a in residents.agents],
        pss_mb_total=pss,
        threads=[p.num_threads() for p in procs if p.is_running()],
        control_plane_cpu_s={n: _cpu(pid) - control0[n] for n, pid in control.items()},
    )


# ---- 3. a wave --------------------------------------------------------------------------


def floor(cluster: Cluster, kube: Kube, lay: Layout, workdir: Path) -> list[Drain]:
    """The floor drains of the floor nodes, all at once, each its own process."""
    for spare in lay.floor_spares:
        ku.open_node(kube, spare)
    ids = Identities(cluster, workdir / "identities")
    who = {n: ids.mint(Drainer.FLOOR, n) for n in lay.floor}
    kubectl = cluster.bin_dir / "kubectl"

    def drain(node: str) -> Drain:
        return run_drain(Drainer.FLOOR, node, lay.namespace[node], who[node], kubectl)

    with ThreadPoolExecutor(len(lay.floor)) as pool:
        return list(pool.map(drain, lay.floor))


@dataclass(frozen=True)
class Round:
    """One wave beside its floor drains."""

    drains: list[NodeDrain]
    floors: list[Drain]

    @property
    def slowest_s(self) -> float:
        return max(d.seconds for d in self.drains)

    @property
    def floor_slowest_s(self) -> float | None:
        return max(d.seconds for d in self.floors) if self.floors else None

    @property
    def ratio(self) -> float | None:
        """Slowest nodeagent node over slowest floor drain."""
        f = self.floor_slowest_s
        return self.slowest_s / f if f else None


def _cordoned(kube: Kube, lay: Layout) -> set[str]:
    selector = {"labelSelector": f"{FLEET_LABEL}={lay.group}"}
    nodes = kube.request("GET", "/api/v1/nodes", query=selector)["items"]
    return {n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")}


def _delete_pod(kube: Kube, pod: JSON) -> None:
    meta = pod["metadata"]
    try:
        kube.delete(pods_path(meta["namespace"], meta["name"]))
    except ApiError as exc:
        if exc.status != 404:  # 404: gone already
            raise


def send_home(kube: Kube, lay: Layout, pods: int) -> None:
    """Back to where a wave starts: the spares cordoned, the taints gone (each agent undoes
    its cordon), the floor's cordons lifted, and every loaded node's pods home again (those
    on the spares deleted: their Deployments re-create them where only home is open)."""
    for spare in lay.wave_spares + lay.floor_spares:
        kube.merge_patch(node_path(spare), {"spec": {"unschedulable": True}})
    for node in lay.wave:
        kube.merge_patch(node_path(node), {"spec": {"taints": []}})
    for node in lay.floor:
        ku.open_node(kube, node)
    loaded = set(lay.wave + lay.floor)
    ku.wait_until(lambda: not _cordoned(kube, lay) & loaded, DRAIN_TIMEOUT, "cordons undone")
    away = [p for spare in lay.wave_spares + lay.floor_spares for p in ku.pods_on(kube, spare)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: _delete_pod(kube, p), away))
    for node in loaded:
        ku.wait_running(kube, node, pods, timeout=READY_TIMEOUT)


def rounds(
    cluster: Cluster,
    kube: Kube,
    lay: Layout,
    log: Path,
    workdir: Path,
    count: int,
    pods: int,
    out: Out,
) -> list[Round]:
    done: list[Round] = []
    for n in range(count):
        if n:
            send_home(kube, lay, pods)
        drains = wave(kube, lay, log)
        done.append(Round(drains, floor(cluster, kube, lay, workdir)))
        print_wave(done[-1], n + 1, count, out)
        out(load_line(f"after wave {n + 1}"))
    return done


# ---- report -----------------------------------------------------------------------------


def _hours(idle_run: Idle) -> float:
    return idle_run.seconds / 3600


def print_storm(s: Storm, agents: int, out: Out) -> None:
    out(f"\n1. start storm: {agents} agents started within 1 s")
    out(
        f"  every NodeAgentReady True after {s.ready_s:.1f}s (median {s.median_s:.1f}s); "
        f"restarts {s.restarts}; 429s waited out {s.throttled}"
    )
    cores = os.cpu_count() or 1
    out(
        f"  CPU the agents used until then: {sum(s.cpu_s):.1f}s in all, "
        f"{statistics.median(s.cpu_s):.2f}s each (median): {sum(s.cpu_s) / cores:.1f}s "
        f"of the {cores} cores' time"
    )
    each = ", ".join(f"{v} {r} {n:.1f}" for (v, r), n in s.requests.items())
    out(f"  requests per agent until then: {sum(s.requests.values()):.1f} ({each})")
    for node, code in s.exits[:10]:
        out(f"  exited: {node} code {code}")


def print_idle(i: Idle, r: apiusage.Rates, agents: int, out: Out) -> None:
    out(f"\n2. idle {i.seconds / 60:.1f} min, {agents} agents: requests per agent-hour")
    for (verb, resource), rate in r.by_kind.items():
        out(f"  {verb:6} {resource:40} {rate:8.2f}")
    out(
        f"  Node writes {r.node_writes:.2f}, non-watch reads {r.reads:.2f}, "
        f"watch (re)starts {r.watch_starts:.1f}, all requests {r.requests:.1f} per agent-hour"
    )
    out(f"  watches held per agent: {r.watches_held:.2f} on average, {r.watches_held_max} at most")
    hours = _hours(i)
    cpu = [c / hours for c in i.cpu_s]
    out(
        f"  RSS per agent: max {max(i.rss_mb):.1f} MB, median {statistics.median(i.rss_mb):.1f} MB;"
        f" all agents: RSS {sum(i.rss_mb):.0f} MB, PSS {i.pss_mb_total:.0f} MB"
    )
    out(
        f"  CPU per agent-hour: max {max(cpu):.2f}s, median {statistics.median(cpu):.2f}s; "
        f"threads per agent {statistics.median(i.threads):.0f}"
    )
    busy = ", ".join(f"{n} {100 * c / i.seconds:.1f}%" for n, c in i.control_plane_cpu_s.items())
    out(f"  meanwhile, CPU of one core: {busy}")


def print_wave(r: Round, n: int, count: int, out: Out) -> None:
    drains, floors = r.drains, r.floors
    out(f"\n3. wave {n} of {count}: {len(drains)} nodes tainted for evacuation within 1 s")
    slowest = max(drains, key=lambda d: d.seconds)
    out(
        f"  nodeagent: slowest node {slowest.seconds:.2f}s "
        f"(median {statistics.median(d.seconds for d in drains):.2f}s); slowest's phases after "
        f"the taint: first request {slowest.first_request:.2f}s, first eviction "
        f"{slowest.first_eviction:.2f}s, last eviction {slowest.last_eviction:.2f}s"
    )
    if floors:
        fslow = max(floors, key=lambda d: d.seconds)
        failed = sum(1 for d in floors if d.failed)
        out(
            f"  floor ({len(floors)} drains at once, process start to exit): slowest "
            f"{fslow.seconds:.2f}s (median {statistics.median(d.seconds for d in floors):.2f}s)"
            f"{f'; {failed} failed: {fslow.said}' if failed else ''}"
        )
        out(f"  slowest nodeagent / slowest floor: {r.ratio:.2f}x")


def ratio_median(done: list[Round]) -> float | None:
    ratios = [r.ratio for r in done if r.ratio is not None]
    return statistics.median(ratios) if ratios else None


def print_rounds(done: list[Round], out: Out) -> None:
    median = ratio_median(done)
    if median is None:
        return
    each = ", ".join(f"{r.ratio:.2f}x" for r in done if r.ratio is not None)
    out(f"\n  slowest nodeagent / slowest floor, {len(done)} waves: {each}; median {median:.2f}x")


def at_scale(i: Idle, r: apiusage.Rates) -> dict[str, dict[str, float]]:
    """The fleet at AT_SCALE nodes, from the per-agent figures, and the kubelet's."""
    n = AT_SCALE
    kubelet_requests = n * (1 / KUBELET_LEASE_S + 1 / KUBELET_STATUS_S)
    kubelet_requests += n * KUBELET_WATCHES / KUBELET_REWATCH_S
    return {
        "nodeagent": {
            "node_writes_per_s": r.node_writes * n / 3600,
            "watches_held": r.watches_held * n,
            "requests_per_s": r.requests * n / 3600,
            "memory_gb_rss": statistics.mean(i.rss_mb) * n / 1024,
            "memory_gb_pss": i.pss_mb_total / len(i.rss_mb) * n / 1024,
        },
        "kubelet": {
            "node_writes_per_s": n / KUBELET_STATUS_S,
            "lease_writes_per_s": n / KUBELET_LEASE_S,
            "watches_held": float(KUBELET_WATCHES * n),
            "requests_per_s": kubelet_requests,
        },
    }


def print_scale(scale: dict[str, dict[str, float]], out: Out) -> None:
    a, k = scale["nodeagent"], scale["kubelet"]
    out(f"\n4. the fleet at {AT_SCALE} nodes (nodeagent from the figures above; kubelet's own)")
    out(f"  {'':24}{'nodeagent':>12}{'kubelet':>12}")
    out(f"  {'Node writes/s':24}{a['node_writes_per_s']:12.1f}{k['node_writes_per_s']:12.1f}")
    out(f"  {'Lease writes/s':24}{0.0:12.1f}{k['lease_writes_per_s']:12.1f}")
    watches = f"{a['watches_held']:12.0f}{k['watches_held']:12.0f}"
    out(f"  {'watches held':24}{watches}  (kubelet: at least)")
    out(f"  {'API requests/s':24}{a['requests_per_s']:12.1f}{k['requests_per_s']:12.1f}")
    out(
        f"  {'memory, all agents':24}{a['memory_gb_rss']:10.1f}GB  (RSS; PSS "
        f"{a['memory_gb_pss']:.1f} GB; the kubelet's not measured here)"
    )


# ---- main -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--agents", type=int, default=100, help="resident agents (default 100)")
    parser.add_argument("--wave", type=int, default=20, help="nodes evacuated at once (20)")
    parser.add_argument(
        "--waves", type=int, default=3, help="waves run, one after the other (default 3)"
    )
    parser.add_argument(
        "--idle-minutes", type=float, default=10.0, help="idle window measured (default 10)"
    )
    parser.add_argument("--pods-per-node", type=int, default=25, help="wave pods per node (25)")
    parser.add_argument(
        "--throttle",
        action="store_true",
        help="put the agents in a priority level of one share that rejects what does not fit "
        "(API Priority and Fairness 429s on purpose)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures here")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep logs and audit log here")
    args = parser.parse_args(argv)
    if args.agents < 1 or args.pods_per_node < 1:
        parser.error("--agents and --pods-per-node must be at least 1")
    if not 0 <= args.wave <= args.agents:
        parser.error(f"--wave must be between 0 and --agents ({args.agents})")
    if args.waves < 1:
        parser.error("--waves must be at least 1")
    if args.idle_minutes <= 0:
        parser.error("--idle-minutes must be more than 0")
    return args


def run(args: argparse.Namespace, workdir: Path, out: Out) -> dict[str, Any]:
    cluster = start_cluster(workdir)
    residents: Residents | None = None
    try:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        apply_pdb_reader(kube)
        if args.throttle:
            apf.throttle_group(kube, apiusage.AGENTS)
        lay = build(cluster, kube, args.agents, args.wave, args.pods_per_node)
        out(f"{len(lay.agents)} agent nodes, {2 * len(lay.wave)} loaded; {load_line('ready')}")
        residents = Residents(cluster, workdir / "agents", lay.agents)
        log = auditlog.log_path(workdir)
        s = storm(kube, residents, lay, log)
        print_storm(s, args.agents, out)
        time.sleep(SETTLE)
        out(load_line("before idle"))
        i = idle(cluster, residents, args.idle_minutes)
        out(load_line("after idle"))
        r = apiusage.rates(apiusage.agents_only(auditlog.read(log)), args.agents, i.start, i.end)
        print_idle(i, r, args.agents, out)
        done: list[Round] = []
        if lay.wave:
            done = rounds(cluster, kube, lay, log, workdir, args.waves, args.pods_per_node, out)
            print_rounds(done, out)
        scale = at_scale(i, r)
        print_scale(scale, out)
        loop_failures = residents.loop_failures()
        out(f"\nagent loops that failed and restarted themselves, whole run: {loop_failures}")
        return _figures(args, s, i, r, done, scale, loop_failures)
    finally:
        if residents is not None:
            residents.stop()
        cluster.stop()
        if args.keep:
            _keep(args.keep, workdir)


def _figures(
    args: argparse.Namespace,
    s: Storm,
    i: Idle,
    r: apiusage.Rates,
    done: list[Round],
    scale: dict[str, dict[str, float]],
    loop_failures: int,
) -> dict[str, Any]:
    hours = _hours(i)
    return {
        "agents": args.agents,
        "ready_s": round(s.ready_s, 2),
        "ready_median_s": round(s.median_s, 2),
        "restarts": s.restarts,
        "start_cpu_s_per_agent": round(statistics.median(s.cpu_s), 3),
        "start_cpu_s_total": round(sum(s.cpu_s), 1),
        "start_requests_per_agent": round(sum(s.requests.values()), 1),
        "throttled_at_start": s.throttled,
        "loop_failures": loop_failures,
        "idle_minutes": round(i.seconds / 60, 2),
        "node_writes_per_agent_hour": round(r.node_writes, 2),
        "reads_per_agent_hour": round(r.reads, 2),
        "requests_per_agent_hour": round(r.requests, 2),
        "requests_per_agent_hour_by_kind": {
            f"{verb} {res}": round(x, 2) for (verb, res), x in r.by_kind.items()
        },
        "watches_per_agent": round(r.watches_held, 2),
        "watches_per_agent_max": r.watches_held_max,
        "rss_mb_max": round(max(i.rss_mb), 1),
        "rss_mb_median": round(statistics.median(i.rss_mb), 1),
        "pss_mb_total": round(i.pss_mb_total, 1),
        "cpu_s_per_agent_hour": round(max(i.cpu_s) / hours, 2),
        "cpu_s_per_agent_hour_median": round(statistics.median(i.cpu_s) / hours, 2),
        "control_plane_cpu_s_idle": {n: round(c, 1) for n, c in i.control_plane_cpu_s.items()},
        "wave": args.wave,
        "waves": [_round_figures(r) for r in done],
        "wave_ratio_median": _rounded(ratio_median(done)),
        "at_5000_nodes": scale,
        "load_average": os.getloadavg(),
    }


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _round_figures(r: Round) -> dict[str, Any]:
    return {
        "slowest_s": round(r.slowest_s, 2),
        "floor_slowest_s": _rounded(r.floor_slowest_s),
        "ratio": _rounded(r.ratio),
        "floor_failed": sum(1 for d in r.floors if d.failed),
        "drains": [asdict(d) for d in r.drains],
    }


def _keep(keep: Path, workdir: Path) -> None:
    import shutil

    keep.mkdir(parents=True, exist_ok=True)
    for name in ("audit.log",):
        if (workdir / name).exists():
            shutil.copyfile(workdir / name, keep / name)
    for sub in ("agents", "cluster/logs"):
        if (workdir / sub).exists():
            shutil.copytree(workdir / sub, keep / sub.replace("/", "-"), dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    preflight.require("bench/fleet.py", argv)
    args = parse_args(argv)
    compile_bytecode()
    print(load_line("start"), flush=True)

    def out(line: str) -> None:
        print(line, flush=True)

    with tempfile.TemporaryDirectory(prefix="nodeagent-fleet-") as tmp:
        figures = run(args, Path(tmp), out)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["restarts"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
