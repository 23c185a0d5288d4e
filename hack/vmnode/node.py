"""A real node as a qemu VM: its own kernel (Debian's cloud kernel), systemd as PID 1 on
cgroup v2, containerd and the kubelet with the systemd cgroup driver, joined to a local
control plane (hack/localcluster) with its own ``system:node:<name>`` client certificate.

    node = VmNode.create(cluster, "vm-a", workdir)    # the node's root, files written
    node.boot()                                       # Ready when it returns
    node.run("systemctl", "is-active", "kubelet")     # through the QEMU guest agent
    node.power_button(); node.wait_exit(300)          # ACPI, as a cloud stops an instance
    node.journal_text("-u", "nodeagent")              # read from the powered-off disk
    node.stop()                                       # nothing left on the host

The VM holds nothing on the host but its qemu process and its workdir: qemu's user-mode
network runs inside that process (no tap, bridge, route or sysctl), and the guest's cgroups
are the guest kernel's. What it shares with the nspawn node is hack/nodebase.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hack.localcluster.cluster import Cluster
from hack.milestones import JOURNAL_KEYS
from hack.nodebase import KubeNode
from hack.realnode import build as realbuild
from hack.realnode.config import CA_PATH
from hack.realnode.images import ensure_images
from nodeagent.kube.client import ApiError

from . import qmp, tap
from .config import (
    KUBECONFIG,
    Machine,
    VmOptions,
    env_file,
    guest_kubeconfig,
    hosts_file,
    link_unit,
    qemu_argv,
    vm_cni_config,
    vm_containerd_config,
    vm_kubelet_config,
)

LINK_UNIT = "vmnode-link.service"
# The fields the harness reads, and no more: the guest agent hands a command's whole output
# back in one answer, and a kubelet's entries carry some thirty fields each.
JOURNAL_FIELDS = "--output-fields=" + ",".join(
    ("MESSAGE", "_BOOT_ID", "SYSLOG_IDENTIFIER", *JOURNAL_KEYS)
)


class VmError(RuntimeError):
    """A VM node could not be built, booted, reached or stopped."""


@dataclass
class VmNode(KubeNode):
    cluster: Cluster
    name: str
    workdir: Path
    opts: VmOptions = field(default_factory=VmOptions)
    boots: int = 0
    _qemu: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # ---- paths -------------------------------------------------------------------------

    @property
    def machine(self) -> Machine:
        w = self.workdir
        return Machine(
            kernel=w / "vmlinuz",
            initrd=w / "initrd.img",
            disk=w / "disk.img",
            console=w / f"console-{self.boots}.log",
            qmp=w / "qmp.sock",
            guest_agent=w / "qga.sock",
        )

    # ---- building ----------------------------------------------------------------------

    @classmethod
    def create(
        cls, cluster: Cluster, name: str, workdir: Path, opts: VmOptions | None = None
    ) -> VmNode:
        """A private copy of the cached root with the node's files; the disk is made at boot,
        so a caller may add to the root first (hack/vmnode/agent.py installs the agent)."""
        workdir = Path(workdir).absolute()
        if workdir.exists() and any(workdir.iterdir()):
            raise VmError(f"{workdir} is not empty: stop the node there first")
        workdir.mkdir(parents=True, exist_ok=True)
        node = cls(cluster, name, workdir, opts or VmOptions())
        template = ensure_root()
        kubelet = realbuild._script("build-kubelet.sh")
        subprocess.run(["cp", "-a", str(template), str(node.root)], check=True, timeout=600)
        shutil.copy2(kubelet, node.path("usr/local/bin/kubelet"))
        for tar in ensure_images().glob("*.tar"):
            shutil.copy2(tar, node.path("opt/realnode/images") / tar.name)
        node._write_files()
        return node

    def _write_files(self) -> None:
        minted = self.cluster.mint_node_kubeconfig(self.name, self.workdir / "kubelet.kubeconfig")
        files = {
            "etc/hostname": f"{self.name}\n",
            "etc/hosts": hosts_file(self.name),
            "etc/kubernetes/kubelet.yaml": vm_kubelet_config(self.name, self.opts),
            "etc/cni/net.d/10-vmnode.conflist": vm_cni_config(),
            "etc/containerd/config.toml": vm_containerd_config(),
            "etc/realnode/env": env_file(self.name, self.opts),
            CA_PATH: (self.cluster.pki_dir / "ca.crt").read_text(),
            KUBECONFIG: guest_kubeconfig(minted.read_text(), self.cluster.server),
        }
        if self.opts.link is not None:
            files[f"etc/systemd/system/{LINK_UNIT}"] = link_unit(self.opts.link)
        for inside, text in files.items():
            self.path(inside).write_text(text)
        if self.opts.link is not None:
            wants = self.path(f"etc/systemd/system/multi-user.target.wants/{LINK_UNIT}")
            wants.symlink_to(f"/etc/systemd/system/{LINK_UNIT}")
        self.path(KUBECONFIG).chmod(0o600)
        minted.unlink()

    def make_disk(self) -> float:
        """The root as an ext4 image (mke2fs -d: no loop device, no mount); returns seconds."""
        started = time.monotonic()
        m = self.machine
        boot = self.path("boot")
        shutil.copy2(_one(boot, "vmlinuz-*"), m.kernel)
        shutil.copy2(_one(boot, "initrd.img-*"), m.initrd)
        used = _du_mb(self.root)
        size = used + used // 4 + self.opts.disk_spare_mb
        out = subprocess.run(
            ["nice", "-n", "19", "mke2fs", "-q", "-F", "-t", "ext4", "-L", "vmroot",
             "-d", str(self.root), str(m.disk), f"{size}M"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise VmError(f"mke2fs -d {self.root}: {out.stderr.strip()}")
        shutil.rmtree(self.root)
        return time.monotonic() - started

    # ---- running -----------------------------------------------------------------------

    def boot(self, timeout: float = 600.0) -> float:
        """Start qemu (nice 19: the host's CPUs are shared); return the seconds until the
        Node was Ready with a heartbeat from this boot."""
        if not self.machine.disk.exists():
            self.make_disk()
        if self.running():
            raise VmError(f"{self.name} is already running")
        self.boots += 1
        started = time.monotonic()
        since_wall = time.time()
        link = self.opts.link
        fd = tap.open_tap(link.netns, link.tap) if link is not None else None
        argv = ["nice", "-n", "19", *qemu_argv(self.machine, self.opts, fd)]
        try:
            self._qemu = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=(self.workdir / f"qemu-{self.boots}.log").open("wb"),
                start_new_session=True,
                pass_fds=() if fd is None else (fd,),
            )
        finally:
            if fd is not None:
                os.close(fd)  # qemu holds it now
        self.wait(timeout, lambda: self.ready_since(since_wall), "not Ready")
        return time.monotonic() - started

    def running(self) -> bool:
        return self._qemu is not None and self._qemu.poll() is None

    def wait(self, timeout: float, ready: Callable[[], bool], what: str) -> None:
        end = time.monotonic() + timeout
        while not ready():
            if not self.running():
                raise VmError(f"{self.name} stopped: {what}:\n{self.console()}")
            if time.monotonic() > end:
                raise VmError(f"{self.name}: {what} after {timeout:.0f}s:\n{self.console()}")
            time.sleep(1)

    def run(self, *argv: str, timeout: float = 120.0) -> qmp.Exec:
        """A command in the guest, by the QEMU guest agent (no shell, no network)."""
        if not self.running():
            raise VmError(f"{self.name} is not running")
        try:
            return qmp.guest_exec(self.machine.guest_agent, list(argv), timeout)
        except qmp.QmpError as exc:
            raise VmError(f"{self.name}: {argv}: {exc}") from exc

    def clock_offset(self) -> float:
        """The guest's clock minus the host's (seconds), by the guest agent."""
        try:
            offset, _ = qmp.guest_clock_offset(self.machine.guest_agent)
        except qmp.QmpError as exc:
            raise VmError(f"{self.name}: guest-get-time: {exc}") from exc
        return offset

    def guest_agent_up(self) -> bool:
        return self.running() and qmp.guest_ping(self.machine.guest_agent)

    def power_button(self) -> None:
        """Press the ACPI power button, as a cloud's stop does."""
        qmp.qmp(self.machine.qmp, "system_powerdown")

    def wait_exit(self, timeout: float) -> int:
        if self._qemu is None:
            return 0
        try:
            return self._qemu.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise VmError(f"{self.name} still running {timeout:.0f}s later") from exc

    def kill(self) -> None:
        if self._qemu is not None and self._qemu.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._qemu.pid, signal.SIGKILL)
            self._qemu.wait(timeout=30)

    def stop(self, keep_node: bool = False) -> None:
        """Kill qemu if it runs, delete the Node and the workdir; raises if anything is left."""
        self.kill()
        if not keep_node:
            with contextlib.suppress(ApiError):
                self.delete_node()
        shutil.rmtree(self.workdir, ignore_errors=True)
        left = self.leftovers()
        if left:
            raise VmError(f"VM node {self.name} left on the host: {left}")

    def leftovers(self) -> list[str]:
        found = [f"qemu pid {self._qemu.pid}"] if self.running() and self._qemu else []
        return found + ([str(self.workdir)] if self.workdir.exists() else [])

    # ---- what happened inside ----------------------------------------------------------

    def console(self, chars: int = 4000) -> str:
        return self.machine.console.read_text(errors="replace")[-chars:] if self.boots else ""

    def journal_dir(self) -> Path:
        """The guest's persistent journal, copied out of the disk image (debugfs rdump)
        once the VM is off: what the guest wrote up to its last moment."""
        if self.running():
            raise VmError(f"{self.name} is running: read its journal with run()")
        out_dir = self.workdir / f"journal-{self.boots}"
        if not out_dir.exists():
            out_dir.mkdir()
            subprocess.run(
                ["debugfs", "-R", f"rdump /var/log/journal {out_dir}", str(self.machine.disk)],
                capture_output=True, timeout=300, check=True,
            )  # fmt: skip
        return out_dir / "journal"

    def journal_text(self, *args: str) -> str:
        """journalctl of the guest's own systemd (257) over the copied journal: the host's
        (252) is older than the files' format may be."""
        out = subprocess.run(
            ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--pipe",
             # No colours: nspawn's --pipe makes journalctl colour even JSON's keys.
             "--volatile=yes", "--setenv=SYSTEMD_COLORS=0", "-D", str(ensure_root()),
             f"--bind-ro={self.journal_dir()}:/journal",
             "journalctl", "-D", "/journal", "-o", "short-unix", "--no-pager", *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        return out.stdout

    def journal(self, *args: str) -> list[dict[str, str]]:
        """Journal entries of every boot (JSON, on the guest's clock): through the guest
        agent while the VM runs, off its disk once it is off."""
        argv = ["-o", "json", JOURNAL_FIELDS, "--no-pager", *args]
        if self.running():
            text = self.run("env", "SYSTEMD_COLORS=0", "journalctl", *argv, timeout=180).stdout
        else:
            text = self.journal_text(*argv)
        return parse_entries(text)


def parse_entries(text: str) -> list[dict[str, str]]:
    """`journalctl -o json` lines as entries; a line that is none, or an entry whose
    MESSAGE is not text (journalctl prints binary ones as arrays), is passed over."""
    entries = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("MESSAGE"), str):
            entries.append(entry)
    return entries


def ensure_root() -> Path:
    return realbuild._script("vm-root")


def _one(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    if len(found) != 1:
        raise VmError(f"expected one {pattern} in {directory}, found {found}")
    return found[0]


def _du_mb(path: Path) -> int:
    out = subprocess.run(
        ["du", "-sm", str(path)], capture_output=True, text=True, timeout=120, check=True
    )
    return int(out.stdout.split()[0])
