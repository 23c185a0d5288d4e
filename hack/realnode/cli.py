"""hack/real-node: start and stop a real node by hand, beside a cluster from hack/cluster.

hack/cluster up --kubeconfig /tmp/admin.kubeconfig
hack/real-node up node-a [--label k=v] [--shutdown-grace 20] [--cgroup-driver systemd]
hack/real-node run node-a -- crictl ... | systemctl status kubelet
hack/real-node down node-a
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hack.localcluster.cluster import Cluster, ClusterError, default_workdir
from nodeagent.kube.client import KubeError

from .build import BuildError, ensure_all
from .config import CGROUP_DRIVERS, NodeOptions
from .host import HostError
from .images import ImageError
from .node import NodeError, RealNode
from .paths import CACHE

NODES = CACHE / "realnode"
USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hack/real-node", description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", type=Path, help="hack/cluster's --workdir")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the kubelet, the root and the images (cached)")
    up = sub.add_parser("up", help="start a named node; returns once it is Ready")
    up.add_argument("name")
    up.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    up.add_argument("--shutdown-grace", type=int, default=0, help="kubelet shutdownGracePeriod (s)")
    up.add_argument(
        "--cgroup-driver",
        choices=CGROUP_DRIVERS,
        default="cgroupfs",
        help="who makes the pods' cgroups: runc and the kubelet, or the node's systemd",
    )
    down = sub.add_parser("down", help="stop a node and give back what it held on the host")
    down.add_argument("name")
    run = sub.add_parser("run", help="run a command inside a node")
    run.add_argument("name")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    return parser


def _labels(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--label wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def _build() -> int:
    try:
        inputs = ensure_all()
    except (BuildError, ImageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"kubelet {inputs.kubelet}\nroot {inputs.root}\nimages {inputs.images}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "build":
        return _build()
    if not args.name:
        print("error: the node name is empty", file=sys.stderr)
        return USAGE
    try:
        labels = _labels(args.label) if args.command == "up" else {}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    try:
        cluster = Cluster.load((args.cluster or default_workdir()).expanduser().absolute())
        workdir = NODES / args.name
        if args.command == "up":
            opts = NodeOptions(
                labels=labels,
                shutdown_grace=args.shutdown_grace,
                cgroup_driver=args.cgroup_driver,
            )
            node = RealNode.start(cluster, args.name, workdir, opts)
            print(f"node {args.name} is Ready (kubelet on 127.0.0.1:{node.slot.port})")
            print(f"stop with: hack/real-node down {args.name}")
            return 0
        node = RealNode.load(cluster, workdir)
        if args.command == "down":
            node.stop(graceful=True)
            print(f"node {args.name} stopped; nothing left on the host")
            return 0
        out = node.run(*[a for a in args.cmd if a != "--"])
        sys.stdout.write(out.stdout)
        sys.stderr.write(out.stderr)
        return out.returncode
    except (ClusterError, NodeError, HostError, BuildError, ImageError, KubeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
