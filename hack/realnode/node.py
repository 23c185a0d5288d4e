"""A real node: a real kubelet and containerd in `systemd-nspawn --boot`, joined to a local
control plane (hack/localcluster) with its own ``system:node:<name>`` client certificate.

    node = RealNode.start(cluster, "node-a", workdir)    # Ready when it returns
    node.run("systemctl", "status", "kubelet")
    node.stop()                                          # nothing left on the host

Each node boots a private copy of the cached root (hack/realnode-root) with the kubelet
(hack/build-kubelet.sh) and the locally built images bind-mounted read-only. State lives in
WORKDIR/state.json, so ``RealNode.load(cluster, WORKDIR).stop()`` works from another process.
What it shares with the VM node (the Node's readiness, its deletion, the agent's milestones in
its journal) is hack/nodebase.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hack.localcluster.cluster import Cluster
from hack.localcluster.procs import ProcRef, free_ports, proc_ref
from hack.nodebase import KubeNode, wall_clock
from hack.nspawn import Container

from . import build, host
from .config import (
    CA_PATH,
    NodeOptions,
    NodeSlot,
    cni_config,
    containerd_config,
    env_file,
    kubelet_config,
)

STATE_FILE = "state.json"


class NodeError(RuntimeError):
    """A real node could not be started, reached or stopped."""


@dataclass
class RealNode(Container, KubeNode):
    cluster: Cluster
    name: str
    workdir: Path
    opts: NodeOptions
    slot: NodeSlot
    binds: list[str] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)
    proc: ProcRef | None = None
    boots: int = 0
    # The host ends of its pods' veth pairs, seen when it stopped (checked gone after).
    ports: list[str] = field(default_factory=list)
    _child: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    error = NodeError

    # ---- lifecycle ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        cluster: Cluster,
        name: str,
        workdir: Path,
        opts: NodeOptions | None = None,
        binds: Sequence[str] = (),
    ) -> RealNode:
        """Copy the root and write the node's files; boot() starts it."""
        opts = opts or NodeOptions()
        inputs = build.ensure_all()
        workdir = Path(workdir).absolute()
        if (workdir / "root").exists():
            raise NodeError(f"{workdir} already holds a node: stop it first")
        workdir.mkdir(parents=True, exist_ok=True)
        slot = NodeSlot(host.take_slot(name), free_ports(1)[0])
        binds = [
            f"--bind-ro={inputs.kubelet}:/usr/local/bin/kubelet",
            f"--bind-ro={inputs.images}:/opt/realnode/images",
            *binds,
        ]
        node = cls(cluster, name, workdir, opts, slot, binds, host.cgroup_homes(name))
        node._save()
        try:
            subprocess.run(
                ["cp", "-a", "--reflink=auto", str(inputs.root), str(node.root)],
                check=True,
                timeout=300,
            )
            node._write_files()
        except BaseException:
            node.stop()
            raise
        return node

    @classmethod
    def start(
        cls,
        cluster: Cluster,
        name: str,
        workdir: Path,
        opts: NodeOptions | None = None,
        binds: Sequence[str] = (),
        timeout: float = 180.0,
    ) -> RealNode:
        """Create and boot a node; it is Ready and schedulable when this returns."""
        node = cls.create(cluster, name, workdir, opts, binds)
        try:
            node.boot(timeout)
        except BaseException:
            node.stop()
            raise
        return node

    @classmethod
    def load(cls, cluster: Cluster, workdir: Path) -> RealNode:
        try:
            state = json.loads((Path(workdir) / STATE_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise NodeError(f"no real node recorded in {workdir}") from exc
        proc = state.get("proc")
        return cls(
            cluster,
            state["name"],
            Path(workdir).absolute(),
            NodeOptions(**state["opts"]),
            NodeSlot(**state["slot"]),
            list(state["binds"]),
            [Path(p) for p in state["cgroups"]],
            ProcRef(**proc) if proc else None,
            int(state["boots"]),
        )

    def boot(self, timeout: float = 180.0) -> float:
        """Start the container; return the seconds until the Node was Ready and schedulable."""
        started = time.monotonic()
        # nspawn makes its cgroups (payload, supervisor) below its own in the named systemd
        # hierarchy: started in the node's cgroup root, they go when the node's tree goes
        # (with the systemd driver, in every hierarchy: host.nspawn_cgroups).
        enter = ""
        for home in host.nspawn_cgroups(self.cgroups, self.opts.cgroup_driver):
            host.prepare_cgroup(home)
            enter += f'echo $$ > "{home}/cgroup.procs" && '
        enter += 'exec "$@"'
        child = self.spawn(["sh", "-c", enter, "sh", *self._nspawn_args()], start_new_session=True)
        self.proc = proc_ref(child.pid)
        self._save()
        self.wait_ready(timeout, since=started)
        return time.monotonic() - started

    def _nspawn_args(self) -> list[str]:
        return self.nspawn_args(
            # CAP_SYS_ADMIN (cgroups, mounts), CAP_NET_ADMIN (the CNI bridge), CAP_SYSLOG.
            "--capability=all",
            # runc gives every container a session keyring.
            "--system-call-filter=@keyring",
            # The kubelet's OOM watcher reads the kernel log.
            "--bind=/dev/kmsg",
            *self.binds,
        )

    def wait_ready(self, timeout: float, since: float | None = None) -> None:
        """Until the Node is Ready, with a heartbeat from this boot, and without taints."""
        since_wall = wall_clock(since)
        self.wait_booted(timeout, lambda: self.ready_since(since_wall), "not Ready")

    def nspawn_pid(self) -> int | None:
        """The nspawn process: started here, or recorded by the process that started it."""
        if self._child is not None:
            return self._child.pid if self._child.poll() is None else None
        return self.proc.pid if self.proc is not None and self.proc.alive() else None

    def stop(self, *, graceful: bool = False, keep_node: bool = False) -> None:
        """Stop the node and give back everything it held; raises if anything is left.

        `graceful` powers it off first (its units stop in order) instead of killing it.
        The Node object is deleted unless `keep_node`.
        """
        self.ports = sorted({*self.ports, *host.bridge_ports(self.slot.bridge)})
        if graceful and self.running():
            with contextlib.suppress(NodeError, subprocess.TimeoutExpired):
                self.run("systemctl", "poweroff")
                self.wait_exit(120)
        self.kill()
        host.remove_cgroups(self.cgroups)
        host.delete_bridge(self.slot.bridge)
        host.wait_links_gone(self.ports)
        host.release_slot(self.slot.slot)
        if not keep_node:
            self.delete_node()
        shutil.rmtree(self.root, ignore_errors=True)
        (self.workdir / STATE_FILE).unlink(missing_ok=True)
        left = self.leftovers()
        if left:
            raise NodeError(f"node {self.name} left on the host: {left}")

    def leftovers(self) -> list[str]:
        """What the node still holds on the host (empty after stop())."""
        ports = sorted({*self.ports, *host.bridge_ports(self.slot.bridge)})
        return host.leftovers(self.name, self.slot, self.cgroups, ports)

    # ---- files and credentials ---------------------------------------------------------

    def reconfigure(self, opts: NodeOptions) -> None:
        """New options for the kubelet's next start (restart it, or reboot the node)."""
        self.opts = opts
        self.path("etc/kubernetes/kubelet.yaml").write_text(
            kubelet_config(self.name, self.slot, opts)
        )
        self.path("etc/realnode/env").write_text(env_file(self.name, opts))
        self.path("etc/containerd/config.toml").write_text(containerd_config(opts))
        self._save()

    def _write_files(self) -> None:
        files = {
            "etc/kubernetes/kubelet.yaml": kubelet_config(self.name, self.slot, self.opts),
            "etc/cni/net.d/10-realnode.conflist": cni_config(self.slot),
            "etc/containerd/config.toml": containerd_config(self.opts),
            "etc/realnode/env": env_file(self.name, self.opts),
            CA_PATH: (self.cluster.pki_dir / "ca.crt").read_text(),
        }
        for inside, text in files.items():
            self.path(inside).write_text(text)
        # The kubelet's own identity: the Node authorizer and NodeRestriction confine it.
        self.cluster.mint_node_kubeconfig(self.name, self.path("etc/kubernetes/kubelet.kubeconfig"))

    def _save(self) -> None:
        state = {
            "name": self.name,
            "opts": asdict(self.opts),
            "slot": asdict(self.slot),
            "binds": self.binds,
            "cgroups": [str(p) for p in self.cgroups],
            "proc": asdict(self.proc) if self.proc else None,
            "boots": self.boots,
        }
        tmp = self.workdir / f".{STATE_FILE}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.workdir / STATE_FILE)

    # ---- what happened inside ----------------------------------------------------------

    def diagnose(self) -> str:
        return self.tail()

    def tail(self, lines: int = 60) -> str:
        """The journal's last `lines` lines, without the kubelet's list of its ~200 flags,
        which would fill a failed test's output with nothing it needs."""
        text = self.journal_text("-n", str(lines + 400))
        kept = [ln for ln in text.splitlines() if "flags.go" not in ln]
        return "\n".join(kept[-lines:])
