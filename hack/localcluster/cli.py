"""hack/cluster: the local cluster from the command line (up, down, add-node, kubeconfig,
status); the cluster itself is hack/localcluster/cluster.py."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hack.kubeutil import WaitTimeout
from nodeagent.kube.client import KubeError

from .cluster import STATE_FILE, Cluster, ClusterError, default_workdir, stray_processes
from .components import COMPONENTS
from .procs import terminate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hack/cluster", description="Local test cluster.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the cluster (detached) and write a kubeconfig")
    up.add_argument("--kubeconfig", type=Path, required=True, help="where to write admin creds")
    up.add_argument("--nodes", type=int, default=0, help="simulated nodes to add (sim-node-N)")
    down = sub.add_parser("down", help="stop every process of the cluster")
    node = sub.add_parser("add-node", help="add a simulated node")
    node.add_argument("name")
    node.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    creds = sub.add_parser("kubeconfig", help="mint a kubeconfig for a restricted identity")
    creds.add_argument("--user", required=True)
    creds.add_argument("--group", action="append", default=[])
    creds.add_argument("--out", type=Path, required=True)
    status = sub.add_parser("status", help="print the state of the cluster")
    for p in (up, down, node, creds, status):
        p.add_argument(
            "--workdir",
            type=Path,
            help="default: $NODEAGENT_CLUSTER_DIR or ~/.cache/nodeagent/cluster",
        )
    return parser


def _cmd_up(args: argparse.Namespace, workdir: Path) -> int:
    if (workdir / STATE_FILE).exists():
        existing = Cluster.load(workdir)
        if existing.ready():
            existing.export_kubeconfig(args.kubeconfig)
            print(f"cluster already up at {existing.server}; wrote {args.kubeconfig}")
            return 0
        existing.stop()
    started = time.monotonic()
    cluster = Cluster.start(workdir, args.kubeconfig)
    for i in range(1, args.nodes + 1):
        cluster.add_node(f"sim-node-{i}")
    took = time.monotonic() - started
    print(f"cluster up at {cluster.server} in {took:.1f}s; kubeconfig: {args.kubeconfig}")
    print(f"logs: {workdir / 'logs'}; stop with: hack/cluster down --workdir {workdir}")
    return 0


def _cmd_down(workdir: Path) -> int:
    try:
        cluster = Cluster.load(workdir)
    except ClusterError:
        left = terminate(stray_processes(workdir))
        print(f"no cluster state in {workdir}" + (f"; {len(left)} left" if left else ""))
        return 1 if left else 0
    cluster.stop()
    print(f"cluster in {workdir} stopped")
    return 0


def _running_cluster(workdir: Path) -> Cluster:
    cluster = Cluster.load(workdir)
    if not cluster.ready():
        raise ClusterError(f"the cluster in {workdir} is not running (hack/cluster up)")
    return cluster


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ClusterError(f"--label wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def _cmd_status(workdir: Path) -> int:
    cluster = Cluster.load(workdir)
    for name in COMPONENTS:
        ref = cluster.procs.get(name)
        state = "running" if ref and ref.alive() else "stopped"
        print(f"{name:24} {state:8} pid {ref.pid if ref else '-'}")
    print(f"server {cluster.server} ready={cluster.ready()}")
    return 0 if cluster.running() else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    workdir = (args.workdir or default_workdir()).expanduser().absolute()
    try:
        if args.command == "up":
            return _cmd_up(args, workdir)
        if args.command == "down":
            return _cmd_down(workdir)
        if args.command == "status":
            return _cmd_status(workdir)
        cluster = _running_cluster(workdir)
        if args.command == "add-node":
            cluster.add_node(args.name, _labels(args.label))
            print(f"node {args.name} is Ready")
        else:
            path = cluster.mint_kubeconfig(args.user, args.group, args.out)
            print(f"wrote {path} for user {args.user} groups {args.group}")
        return 0
    except (ClusterError, KubeError, WaitTimeout) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
