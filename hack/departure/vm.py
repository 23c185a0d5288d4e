"""The VM node (hack/vmnode) as the departure scene's leaving node (the `vm` shape).

The scene drives an nspawn node through hack/nspawn.Container: run a command, wait for the
machine to exit, kill it, boot it again, read its journal. :class:`VmLeaving` gives a VM node
the same face: commands go through the QEMU guest agent; the machine's exit is qemu's (after
the ACPI power button, or a reboot: the VM runs with -no-reboot and is started again on the
same disk, as nspawn is); the journal is read through the guest agent while the VM runs and
off its disk once it is off, each entry's time put on the host's clock (the guest's clock
starts from the emulated RTC's whole seconds at each boot).

The scene's client reaches the VM's pods over a tap in the client's own network namespace
(ClientNet.add_tap, hack/vmnode/tap.py); the staying node is an nspawn node.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from hack.departure.kinds import Config
from hack.kubeutil import GROUP_LABEL
from hack.localcluster.cluster import Cluster
from hack.nodebase import KubeNode, wall_clock
from hack.realnode import NodeError, stateful
from hack.realnode import csi as realcsi
from hack.realnode.traffic import ClientNet
from hack.realnode.workload import ensure_workload_image
from hack.vmnode import VmError, VmNode, VmOptions, agent
from hack.vmnode.config import POD_SUBNET, VmLink, guest_kubeconfig

# Read by the tests of the journal's clock (tests/test_departure_shapes.py) from here.
from hack.vmnode.node import parse_entries as parse_entries

# TCG at nice 19 on a shared machine: a boot to Ready took 33 to 170 s, pods start several
# times slower than on the nspawn node. The scene's 180 s waits become this on the VM.
VM_READY_S = 600.0
# The VM's way down (logind's 128 s for the agent, then the shutdown), where the nspawn node
# gets 150 s.
VM_EXIT_CAP_S = 300.0
AGENT_KUBECONFIG = "etc/nodeagent/kubeconfig"


@dataclass
class VmLeaving(KubeNode):
    vm: VmNode
    # The guest's clock minus the host's, by boot ID (a soft-reboot keeps its boot ID).
    offsets: dict[str, float] = field(default_factory=dict)

    error = NodeError

    def __post_init__(self) -> None:
        # Its root is the VM's, a directory only until the disk is made (the first boot).
        self.cluster, self.name, self.workdir = self.vm.cluster, self.vm.name, self.vm.workdir

    @classmethod
    def create(
        cls,
        cluster: Cluster,
        name: str,
        workdir: Path,
        config: Config,
        group: str,
        client: ClientNet,
        csi_dir: Path | None,
        agent_config: str | None,
    ) -> VmLeaving:
        """The VM's root with the node's files, the workload's image (imported by containerd
        at every start), the CSI node plugin and the agent (`agent_config`, None: none), and
        its tap in the client's namespace; boot() makes the disk and starts it."""
        link = VmLink(client.netns, f"vmt{client.tag}")
        client.add_tap(link.tap, link.peer, POD_SUBNET, link.guest)
        gns = config.gns
        opts = VmOptions(
            labels={GROUP_LABEL: group},
            shutdown_grace=gns.seconds if gns else 0,
            shutdown_grace_critical=gns.critical_seconds if gns else 0,
            link=link,
            exit_on_reboot=True,
        )
        vm = VmNode.create(cluster, name, workdir, opts)
        shutil.copyfile(ensure_workload_image(), vm.path("opt/realnode/images/workload.tar"))
        if csi_dir is not None:
            shutil.copy2(csi_dir / "csi-mock", vm.path(realcsi.BINARY))
            realcsi.install_plugin(vm.root, stateful.DRIVER)
        if agent_config is not None:
            agent.install(vm.root, agent_config)
            # The same credentials as the nspawn node's agent (hack/deb.py install_agent),
            # pointed at the guest's way to the API server.
            kubeconfig = vm.path(AGENT_KUBECONFIG)
            kubeconfig.write_text(guest_kubeconfig(cluster.kubeconfig.read_text(), cluster.server))
            kubeconfig.chmod(0o600)
        return cls(vm)

    # ---- running -----------------------------------------------------------------------

    def boot(self, timeout: float = VM_READY_S) -> float:
        """Start the VM; the seconds until the Node was Ready and uncordoned."""
        seconds = self.vm.boot(max(timeout, VM_READY_S))
        self.sync_clock()
        return seconds

    def sync_clock(self) -> None:
        """The guest's clock offset now, for the journal entries of this boot."""
        boot_id = self.run("cat", "/proc/sys/kernel/random/boot_id").stdout.strip().replace("-", "")
        self.offsets[boot_id] = self.vm.clock_offset()

    def wait_ready(self, timeout: float, since: float | None = None) -> None:
        since_wall = wall_clock(since)
        try:
            self.vm.wait(
                max(timeout, VM_READY_S), lambda: self.vm.ready_since(since_wall), "not Ready"
            )
        except VmError as exc:
            raise NodeError(str(exc)) from exc

    def run(self, *cmd: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        try:
            out = self.vm.run(*cmd, timeout=120.0 if timeout is None else timeout)
        except VmError as exc:
            raise NodeError(str(exc)) from exc
        return subprocess.CompletedProcess(list(cmd), out.returncode, out.stdout, out.stderr)

    def power_button(self) -> None:
        """The ACPI power button, as a cloud stops an instance."""
        self.vm.power_button()

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.vm.wait_exit(timeout)
        except VmError as exc:
            raise subprocess.TimeoutExpired("qemu", timeout) from exc

    def running(self) -> bool:
        return self.vm.running()

    def kill(self) -> None:
        self.vm.kill()

    def stop(self) -> None:
        try:
            self.vm.stop()
        except VmError as exc:
            raise NodeError(str(exc)) from exc

    # ---- its journal ---------------------------------------------------------------------

    def journal(self, *args: str) -> list[dict[str, str]]:
        """Journal entries of every boot (JSON fields), their times on the host's clock."""
        return on_host_clock(self.vm.journal(*args), self.offsets)

    def messages(self, unit: str) -> list[str]:
        if self.running():
            return self.run("journalctl", "-u", unit, "-o", "cat", "--no-pager").stdout.splitlines()
        return [e["MESSAGE"] for e in self.journal("-u", unit)]

    def save_journal(self, path: Path) -> None:
        """The guest's journal beside the results (the VM's disk goes with its workdir); a
        VM still running is stopped first (its journal then read off the disk)."""
        self.kill()
        try:
            path.write_text(self.vm.journal_text("-o", "short-iso-precise"))
        except (OSError, subprocess.SubprocessError, VmError) as exc:
            path.write_text(f"the journal could not be read off the disk: {exc}\n")


def on_host_clock(entries: list[dict[str, str]], offsets: dict[str, float]) -> list[dict[str, str]]:
    """Each entry's __REALTIME_TIMESTAMP moved from the guest's clock to the host's, by the
    offset measured in its boot (the last one measured for a boot never measured)."""
    fallback = list(offsets.values())[-1] if offsets else 0.0
    moved = []
    for entry in entries:
        offset = offsets.get(entry.get("_BOOT_ID", "").replace("-", ""), fallback)
        stamp = int(entry["__REALTIME_TIMESTAMP"]) - round(offset * 1e6)
        moved.append({**entry, "__REALTIME_TIMESTAMP": str(stamp)})
    return moved
