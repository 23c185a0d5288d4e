"""The VM node's files and qemu command line (hack/vmnode/config.py): what makes it the
production shape (cgroup v2, the systemd driver) and keeps it inside the host rules (TCG,
user-mode networking only, the API server reached by a name its certificate carries)."""

from __future__ import annotations

from pathlib import Path

import yaml

from hack.localcluster.pki import SERVER_SANS
from hack.vmnode.config import (
    API_NAME,
    HOST_LOOPBACK,
    Machine,
    VmOptions,
    guest_kubeconfig,
    hosts_file,
    qemu_argv,
    vm_containerd_config,
    vm_kubelet_config,
)

MINTED = """apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:34567
    certificate-authority-data: Q0E=
users:
- name: system:node:vm-a
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
contexts:
- name: local
  context: {cluster: local, user: "system:node:vm-a"}
current-context: local
"""


def test_the_guest_reaches_the_api_server_by_a_name_in_its_certificate() -> None:
    doc = yaml.safe_load(guest_kubeconfig(MINTED, "https://127.0.0.1:34567"))
    assert doc["clusters"][0]["cluster"]["server"] == f"https://{API_NAME}:34567"
    assert f"DNS:{API_NAME}" in SERVER_SANS
    # The node's own identity is kept as minted.
    assert doc["users"][0]["user"]["client-key-data"] == "S0VZ"
    assert f"{HOST_LOOPBACK} {API_NAME}\n" in hosts_file("vm-a")


def test_the_kubelet_and_containerd_use_the_systemd_driver_on_cgroup_v2() -> None:
    config = yaml.safe_load(vm_kubelet_config("vm-a"))
    assert config["cgroupDriver"] == "systemd"
    assert config["cgroupRoot"] == "/"
    assert "failCgroupV1" not in config  # 1.35's default: refuse cgroup v1
    assert "SystemdCgroup = true" in vm_containerd_config()


def test_qemu_emulates_and_touches_no_host_network() -> None:
    w = Path("/w")
    m = Machine(w / "k", w / "i", w / "d", w / "c", w / "q", w / "g")
    argv = qemu_argv(m, VmOptions())
    assert argv[argv.index("-accel") + 1] == "tcg"
    assert "-enable-kvm" not in argv
    netdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-netdev"]
    assert netdevs == ["user,id=n0"]
    assert f"unix:{m.qmp},server=on,wait=off" in argv
