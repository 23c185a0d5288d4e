"""Departure benchmark: requests lost while a node leaves, on real nodes under real traffic.

    python bench/departure.py [--shape SHAPE] [--only KIND,...] [--configs CONFIG,...]
                              [--json FILE] [--cgroup-driver {cgroupfs,systemd}]

Each cell boots two real nodes (hack/realnode) with a configuration, spreads the service
(hack/workload) over them behind a ClusterIP Service, sends ~50 requests/s through a real
kube-proxy (hack/realnode/traffic.py) plus long requests, and makes one node leave
(hack/departure/scene.py). It prints one row per cell; --json writes them all.

kinds: poweroff (systemctl poweroff on the node), evacuate (the evacuate taint; the node is
powered off once drained, or after 15 s without the agent, as an autoscaler would), reboot
(systemctl reboot; the node comes back), rolling-reboot (both nodes rebooted one after the
other, the next once the one before is back and the service whole), sigterm-ignoring (a
poweroff while a pod that ignores SIGTERM, with a 300 s grace, runs on the node), stop
(`systemctl stop nodeagent` for maintenance, then the kubelet and every container stopped
for 10 s and started again, as an upgrade of the runtime does), daemonset-poweroff (a
poweroff with the agent in its DaemonSet form: the image of hack/build-image imported into
each node's containerd, the Helm chart rendered for the kubelet identity with the chart's
defaults otherwise, hack/realnode/daemonset.py; without an agent the same as poweroff),
poweroff-target (`systemctl start poweroff.target` on the node: the shutdown is queued
without logind, so there is no PrepareForShutdown and no delay lock to hold it; the agent
hears its SIGTERM with the poweroff.target job queued and drains on that path, while every
unit that conflicts with shutdown.target is stopped at the same time), spot-interruption
(amazon-ec2-metadata-mock, hack/aemm.py, starts on the host's loopback serving a Spot
notice whose time is two minutes ahead; the agent reads it as its IMDS, with [warnings]
cloud = "aws", and the node is powered off at the notice's time; every other kind keeps
the agent's warnings off).

Beside the other actors, each write theirs as re-enacted in hack/actors/ (citing their
source), under their own field manager: foreign-uncordon (a poweroff; 2 s into the agent's
drain, seen by its cordon, `kubectl uncordon` and the Deployment scaled up by 3; without the
agent 2 s into the poweroff), autoscaler-scale-down (the Cluster Autoscaler's taint and
cordon, its eviction drain, then the poweroff and the Node deleted), karpenter-termination
(Karpenter's finalizer from its registration, its taint, the Node deleted, its tiered
drain, then the poweroff and the finalizer removed; no do-not-disrupt pod, which Karpenter
would wait for without end), kured-reboot (kured's annotations, lock, cordon and drain,
`systemctl reboot`, and its uncordon after the boot), node-deleted (a poweroff; the Node
deleted 1 s into the agent's drain). Each cell also reports scheduled_onto_departing (pods
bound to the departing node after the departure began), the Node's final cordon, taints
and labels with who set each (the writers the API server's managedFields name), every
change of them (node_changes), and duplicate_events (one reason on one object from two
components, or repeated).
configs: none (no agent, the kubelet's graceful shutdown off), nodeagent (the agent from its
.deb, README defaults, or as the DaemonSet for daemonset-poweroff); the kubelet's graceful
shutdown as managed platforms turn it on, gns (kOps: 30 s, 10 s of it for critical pods),
gns-gke (30 s, 15 s) and gns-eks (EKS on Amazon Linux 2023: 150 s, 30 s), each alone and
beside the agent as nodeagent+gns, nodeagent+gns-gke, nodeagent+gns-eks; nodeagent-30s
(the agent with 30 s for the whole shutdown, as a late or unheard cloud notice leaves it:
logind's delay set to 30 s, so the drain is cut to fit, and the node's power cut if it is
still up 30 s after the poweroff).

--shape is the leaving node's: nspawn (the default: Debian 12, systemd 252, the host's
cgroup v1, hack/realnode), vm (a qemu VM under TCG with its own kernel, Debian 13, systemd
257, cgroup v2 and the systemd driver, hack/vmnode; its poweroff is the ACPI power button,
as a cloud's stop, and its pods are reached by the client over a tap in the client's
namespace, hack/departure/vm.py; the staying node is an nspawn node) or nspawn-trixie (not
runnable on a host whose cgroup controllers are bound to v1: it says why). The kind
soft-reboot (`systemctl soft-reboot`: userspace restarted on the same kernel, systemd 254+)
runs on the vm shape only, and the vm shape runs poweroff, reboot, stop and soft-reboot.
Each cell names its shape.

Beside the requests, each cell reports drained_before_off (the drain for the cloud's
warning ended before the poweroff) and lock_release_s (from logind's PrepareForShutdown to
the agent releasing its delay lock, read from the agent's journal).

--cgroup-driver (default cgroupfs) is the nodes' kubelet's and containerd's: with cgroupfs
the pods' cgroups are the kubelet's and runc's own, outside systemd's units, and die in the
final kill sweep of the shutdown; with systemd (kubeadm, EKS AL2023, AKS, Flatcar, kOps,
k3s) they are transient slices and scopes of the node's systemd (kubepods-*.slice), which
conflict with shutdown.target: systemd stops them itself as soon as a shutdown starts, in
parallel with the kubelet and the agent. Each cell names it (cgroup_driver).

With storage (the default; --no-storage leaves it out), each node runs the mock CSI driver's
node plugin and the cell's StatefulSet of one replica holds a ReadWriteOnce volume on the
leaving node through the real attach path (hack/realnode/stateful.py): stateful_ready_s is
the seconds from its old pod leaving the API to its replacement Ready (None: not within the
departure and 60 s), multi_attach_events the attach/detach controller's Multi-Attach errors.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the checkout is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hack import aemm, preflight
from hack.departure.kinds import CONFIGS, Kind
from hack.departure.scene import Scene
from hack.departure.shapes import SHAPES, shape_error, v2_controllers
from hack.departure.summary import summarize
from hack.departure.ways import WAYS
from hack.localcluster.cluster import Cluster, ClusterError
from hack.localcluster.procs import free_ports
from hack.realnode import csi as realcsi
from hack.realnode import stateful
from hack.realnode.config import CGROUP_DRIVERS, CgroupDriver

KINDS = ("poweroff", "evacuate", "reboot", "stop", "rolling-reboot", "sigterm-ignoring",
         "daemonset-poweroff", "poweroff-target", "spot-interruption",
         "soft-reboot", "foreign-uncordon", "autoscaler-scale-down", "karpenter-termination",
         "kured-reboot", "node-deleted")  # fmt: skip
IMPLEMENTED = {k.value: k for k in Kind}
COLUMNS = ("shape", "kind", "config", "sent", "failed", "long_cut", "longest_failure_s", "p50_ms",
           "p99_ms", "release_s", "off_s", "routed_to_departed_until_s", "stateful_ready_s",
           "multi_attach_events", "drained_before_off", "lock_release_s",
           "scheduled_onto_departing", "duplicate_events")  # fmt: skip
USAGE = 2


def _list(option: str, value: str, known: Sequence[str], what: str) -> list[str]:
    """The comma-separated names `value` of `option`, each one of `known`. An empty name
    (nothing at all, a trailing comma, two commas in a row) is an error, not skipped: a
    run that silently measures less than its command line says is worse than none."""
    items = [v.strip() for v in value.split(",")]
    if "" in items:
        raise ValueError(
            f"{option} {value!r}: an empty {what} name (a comma too many, or none given); "
            f"known: {', '.join(known)}"
        )
    unknown = [v for v in items if v not in known]
    if unknown:
        raise ValueError(
            f"{option}: unknown {what} {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return items


def _choose(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The kinds and configs of the command line; ValueError (its one line) for a bad one."""
    kinds = _list("--only", args.only, KINDS, "kind")
    configs = _list("--configs", args.configs, list(CONFIGS), "config")
    missing = [k for k in kinds if k not in IMPLEMENTED]
    if missing:
        raise ValueError(f"kind {', '.join(missing)} is not implemented yet")
    return kinds, configs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench/departure.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", choices=SHAPES, default="nspawn", help="the leaving node's (default nspawn)"
    )
    parser.add_argument("--only", default="poweroff,evacuate", help="kinds, comma-separated")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="configs, comma-separated")
    parser.add_argument("--json", type=Path, help="write the cells here")
    parser.add_argument(
        "--cgroup-driver",
        choices=CGROUP_DRIVERS,
        default="cgroupfs",
        help="the nodes' kubelet and containerd cgroup driver (default cgroupfs)",
    )
    parser.add_argument(
        "--no-storage",
        dest="storage",
        action="store_false",
        help="no StatefulSet on the CSI attach path (no stateful_ready_s, multi_attach_events)",
    )
    return parser


def _row(cell: dict[str, Any]) -> str:
    def shown(c: str) -> str:
        value = cell.get(c)
        return "-" if value is None else str(len(value) if isinstance(value, list) else value)

    return "  ".join(f"{shown(c):>8}" for c in COLUMNS)


def _details(cell: dict[str, Any]) -> list[str]:
    """The lines under a row: its notes, the Node's last state with who set what, the
    pods bound to it after the departure began, and its duplicate Events."""
    lines = [f"note: {n}" for n in cell.get("notes") or []]
    if cell.get("final_state"):
        lines.append(f"final: {json.dumps(cell['final_state'], sort_keys=True)}")
    lines += [f"scheduled onto the departing node: {p}" for p in cell.get("scheduled_pods") or []]
    lines += [f"duplicate event: {e}" for e in cell.get("duplicate_events") or []]
    return lines


def run_cell(
    cluster: Cluster,
    root: Path,
    kind: str,
    config: str,
    csi_dir: Path | None,
    volume: str,
    driver: CgroupDriver = "cgroupfs",
    shape: str = "nspawn",
) -> dict[str, Any]:
    group = f"dep-{secrets.token_hex(2)}"
    if csi_dir is not None:
        # The mock driver's volumes live in its memory: each cell starts with them free.
        cluster.stop_attacher()
        cluster.start_attacher(csi_dir, stateful.DRIVER)
    daemonset = kind == Kind.DAEMONSET_POWEROFF.value
    # The Spot notice's mock listens there from the notice on; the agents read it all along.
    metadata = None
    if kind == Kind.SPOT_INTERRUPTION.value:
        aemm.binary()  # built now (once), not at the notice's moment
        metadata = free_ports(1)[0]
    up = Scene.up(cluster, root / group, group, CONFIGS[config], csi_dir=csi_dir, volume=volume,
                  daemonset=daemonset, cgroup_driver=driver, metadata_port=metadata,
                  shape=shape, dnd=WAYS[IMPLEMENTED[kind]].dnd)  # fmt: skip
    with up as scene:
        departure = scene.depart(IMPLEMENTED[kind])
    if daemonset and not CONFIGS[config].agent:
        departure.notes.append("no agent in this config: the same as kind poweroff")
    return summarize(departure)


def main(argv: list[str] | None = None) -> int:
    # The command line first: a wrong one is told in its one line on any machine, before
    # the machine's needs (a tool installed for a run that could not start anyway).
    args = _parser().parse_args(argv)
    try:
        kinds, configs = _choose(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    preflight.require("bench/departure.py", argv)
    refused = shape_error(args.shape, kinds, v2_controllers())
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return USAGE
    cells: list[dict[str, Any]] = []
    root = Path(tempfile.mkdtemp(prefix="departure-"))
    print(f"work files in {root}", flush=True)
    print("  ".join(f"{c[:8]:>8}" for c in COLUMNS), flush=True)
    csi_dir = realcsi.build() if args.storage else None
    try:
        cluster = Cluster.start(root / "cluster")
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        for kind in kinds:
            for config in configs:
                started = time.monotonic()
                volume = str(len(cells) % 3 + 1)  # the mock driver's three, in turn
                cell = run_cell(cluster, root, kind, config, csi_dir, volume, args.cgroup_driver,
                                args.shape)  # fmt: skip
                cell["cell_s"] = round(time.monotonic() - started, 1)
                cells.append(cell)
                print(_row(cell), flush=True)
                for line in _details(cell):
                    print(f"    {line}", flush=True)
                if args.json:
                    args.json.write_text(json.dumps(cells, indent=2) + "\n")
    finally:
        cluster.stop_attacher()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
