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
class VmOptions:
    labels: dict[str, str] = field(default_factory=dict)
    memory_mb: int = 2048
    cpus: int = 2
    # Room for containerd's images and the journal beside the root's files.
    disk_spare_mb: int = 2048


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


def vm_kubelet_config(name: str) -> str:
    """The nspawn node's KubeletConfiguration, for a VM: cgroup v2 with the systemd driver,
    the default cgroup root, and the kernel tunables the kubelet's to set."""
    opts = NodeOptions(cgroup_driver="systemd")
    config = yaml.safe_load(kubelet_config(name, NodeSlot(0, KUBELET_PORT), opts))
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
                "ipMasq": False,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]]},
            }
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def env_file(name: str, opts: VmOptions) -> str:
    labels = ",".join(f"{k}={v}" for k, v in sorted(opts.labels.items()))
    return f"NODE_NAME={name}\nNODE_LABELS={labels}\n"


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


def qemu_argv(m: Machine, opts: VmOptions) -> list[str]:
    """TCG (KVM hangs a stock kernel on this host's nested hypervisor), a q35 machine with
    ACPI (its power button is what a cloud presses), virtio disk and NIC, no display."""
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
    ]  # fmt: skip
