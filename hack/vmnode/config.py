"""The per-node files of a VM node and its qemu command line (pure functions).

A VM has a kernel of its own: unlike the nspawn node it needs no cgroup root of its own, no
tunables shown to the kubelet in a private mount, and its pods' bridge lives in the guest.
What it shares with the host is qemu's user-mode network, where the host's loopback is
10.0.2.2: the API server (listening on 127.0.0.1) is reached as ``https://kubernetes:PORT``,
a name the server certificate carries, mapped to 10.0.2.2 in the guest's /etc/hosts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from hack.realnode.config import NodeOptions, NodeSlot, containerd_config, kubelet_config

HOST_LOOPBACK = "10.0.2.2"  # qemu user-mode networking's alias of the host's 127.0.0.1
API_NAME = "kubernetes"  # a DNS name in the local API server's certificate (pki.SERVER_SANS)
POD_SUBNET = "10.244.0.0/24"
KUBELET_PORT = 10250
KUBECONFIG = "/etc/kubernetes/kubelet.kubeconfig"


@dataclass(frozen=True)
class VmLink:
    """A second NIC on the tap `tap` in the network namespace `netns` (hack/vmnode/tap.py):
    the guest's eth1 is `guest`/30, the tap `peer`/30, and the pods' subnet is routed to the
    guest from there."""

    netns: str
    tap: str
    guest: str = "10.251.0.1"
    peer: str = "10.251.0.2"
    mac: str = "52:54:00:fa:00:01"


@dataclass(frozen=True)
class VmOptions:
    labels: dict[str, str] = field(default_factory=dict)
    memory_mb: int = 2048
    cpus: int = 2
    # Room for containerd's images and the journal beside the root's files.
    disk_spare_mb: int = 2048
    # The kubelet's graceful node shutdown (shutdownGracePeriod, its critical pods' share).
    shutdown_grace: int = 0
    shutdown_grace_critical: int = 0
    link: VmLink | None = None
    # qemu exits when the guest reboots (-no-reboot), as nspawn does: the harness starts it
    # again on the same disk, and the moment the machine went down is qemu's exit.
    exit_on_reboot: bool = False


def guest_server(host_server: str) -> str:
    """The API server's URL as the guest reaches it."""
    port = urlsplit(host_server).port
    return f"https://{API_NAME}:{port}"


def guest_kubeconfig(text: str, host_server: str) -> str:
    """A kubeconfig minted for the host, pointed at the guest's way to the same server."""
    doc = yaml.safe_load(text)
    for entry in doc["clusters"]:
        entry["cluster"]["server"] = guest_server(host_server)
    return yaml.safe_dump(doc, sort_keys=False)


def vm_kubelet_config(name: str, opts: VmOptions | None = None) -> str:
    """The nspawn node's KubeletConfiguration, for a VM: cgroup v2 with the systemd driver,
    the default cgroup root, and the kernel tunables the kubelet's to set."""
    vm = opts or VmOptions()
    node = NodeOptions(
        cgroup_driver="systemd",
        shutdown_grace=vm.shutdown_grace,
        shutdown_grace_critical=vm.shutdown_grace_critical,
    )
    config = yaml.safe_load(kubelet_config(name, NodeSlot(0, KUBELET_PORT), node))
    del config["failCgroupV1"]  # cgroup v2: the default (refuse v1) holds
    config["address"] = "0.0.0.0"
    config["cgroupRoot"] = "/"
    return yaml.safe_dump(config, sort_keys=False)


def vm_containerd_config() -> str:
    return containerd_config(NodeOptions(cgroup_driver="systemd"))


def vm_cni_config() -> str:
    """The pods' bridge inside the guest: its kernel and routes are the VM's own."""
    conf = {
        "cniVersion": "0.4.0",
        "name": "vmnode",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                # The pods' default route through the guest: replies to a client beyond the
                # node (the benchmark's, over the VM's link) leave by it.
                "isDefaultGateway": True,
                "ipMasq": False,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]]},
            }
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def env_file(name: str, opts: VmOptions) -> str:
    labels = ",".join(f"{k}={v}" for k, v in sorted(opts.labels.items()))
    return f"NODE_NAME={name}\nNODE_LABELS={labels}\n"


def link_unit(link: VmLink) -> str:
    """The guest's address on its second NIC (eth1: net.ifnames=0, the NICs in PCI order).
    Replies from the pods reach the client through it: the pods' gateway is the guest
    (the CNI bridge's isGateway), which forwards them (ip_forward in the guest's own
    kernel, not the host's)."""
    return f"""[Unit]
Description=The VM's address on its link to the benchmark's client
DefaultDependencies=no
Before=network-online.target kubelet.service
After=sys-subsystem-net-devices-eth1.device
BindsTo=sys-subsystem-net-devices-eth1.device

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/ip link set eth1 up
ExecStart=/usr/sbin/ip addr add {link.guest}/30 dev eth1
ExecStart=/usr/sbin/sysctl -q -w net.ipv4.ip_forward=1

[Install]
WantedBy=multi-user.target
"""


def hosts_file(name: str) -> str:
    return f"127.0.0.1 localhost\n127.0.1.1 {name}\n{HOST_LOOPBACK} {API_NAME}\n"


@dataclass(frozen=True)
class Machine:
    """What qemu boots: files in the node's workdir."""

    kernel: Path
    initrd: Path
    disk: Path
    console: Path
    qmp: Path
    guest_agent: Path


def qemu_argv(m: Machine, opts: VmOptions, tap_fd: int | None = None) -> list[str]:
    """TCG (KVM hangs a stock kernel on this host's nested hypervisor), a q35 machine with
    ACPI (its power button is what a cloud presses), virtio disk and NIC, no display. With
    `tap_fd` (opts.link's tap, opened by hack/vmnode/tap.py), a second NIC on it."""
    extra: list[str] = []
    if opts.link is not None:
        if tap_fd is None:
            raise ValueError("a VM with a link needs its tap's file descriptor")
        mac = opts.link.mac
        extra += [
            "-netdev",
            f"tap,id=n1,fd={tap_fd}",
            "-device",
            f"virtio-net-pci,netdev=n1,mac={mac}",
        ]
    if opts.exit_on_reboot:
        extra.append("-no-reboot")
    return [
        "qemu-system-x86_64",
        "-accel", "tcg",
        "-machine", "q35",
        "-cpu", "max",
        "-smp", str(opts.cpus),
        "-m", str(opts.memory_mb),
        "-kernel", str(m.kernel),
        "-initrd", str(m.initrd),
        "-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet",
        # cache=unsafe: the guest's flushes are not waited for; the host's page cache still
        # holds every write when qemu exits, so the disk is whole after a power-off.
        "-drive", f"file={m.disk},format=raw,if=virtio,cache=unsafe",
        # The guest reaches the host's loopback as 10.0.2.2 (the API server); nothing is
        # configured on the host: slirp runs inside qemu's process.
        "-netdev", "user,id=n0",
        "-device", "virtio-net-pci,netdev=n0",
        "-chardev", f"socket,path={m.guest_agent},server=on,wait=off,id=qga0",
        "-device", "virtio-serial",
        "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
        "-qmp", f"unix:{m.qmp},server=on,wait=off",
        "-serial", f"file:{m.console}",
        "-display", "none",
        "-monitor", "none",
        "-rtc", "base=utc",
        *extra,
    ]  # fmt: skip
