"""hack/vm: the VM node's build and its smoke run.

hack/vm build     build (once, cached) the VM root, the kubelet and the images; print them
hack/vm smoke [--lock FILE]
                  a VM node with the agent, powered off by its ACPI power button: drained first
hack/vm reboot|soft-reboot [--lock FILE]
                  the same node restarted by systemctl: the type named, drained, uncordoned after
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hack.localcluster.cluster import ClusterError
from hack.realnode.build import BuildError, _script
from hack.realnode.images import ImageError, ensure_images
from nodeagent.kube.client import KubeError

from . import restart, smoke
from .agent import AgentInstallError
from .node import VmError, ensure_root


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hack/vm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the VM root, the kubelet and the images (cached)")
    smoke = sub.add_parser(
        "smoke", help="ACPI power-off of a VM node with the agent: drained first"
    )
    smoke.add_argument(
        "--lock", type=Path, help="a file to flock from boot to power-off (built before it)"
    )
    for kind in restart.KINDS:
        sub.add_parser(
            kind, help=f"systemctl {kind} of a VM node with the agent: named, drained, undone"
        ).add_argument(
            "--lock", type=Path, help="a file to flock from boot to uncordoned (built before it)"
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            print(f"root {ensure_root()}")
            print(f"kubelet {_script('build-kubelet.sh')}\nimages {ensure_images()}")
            return 0
        if args.command in restart.KINDS:
            return restart.main(args.command, args.lock)
        return smoke.main(args.lock)
    except (BuildError, ImageError, VmError, AgentInstallError, ClusterError, KubeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
