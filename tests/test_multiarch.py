"""Each Debian package as built (``hack/build-deb --all``), on the suite and architecture it is
for: bookworm and trixie, amd64 and arm64.

A package goes into a fresh root of its own suite and architecture (``hack/nspawn-root SUITE
ARCH``) by ``dpkg -i``, as a node image's build installs it, and the root boots under
systemd-nspawn: systemd 252 on bookworm, 257 on trixie. An arm64 root's every process, its
systemd and the agent included, runs under qemu-user (hack/emulation.py holds the binfmt
handler for the test only), as a Neoverse N1, with drop-ins for what qemu-user cannot do
(EMULATION_DROPINS: the agent's IPC namespace, and on 257 units' credentials and mount
namespaces; the amd64 roots test the sandbox as shipped). The agent in it starts as a unit,
answers ``nodeagent --version``, takes its logind lock and drains a simulated node on the
harness's control plane, which it reaches on the host's loopback, when the container powers
off.

Marked ``multiarch`` (tests/conftest.py), run by ``hack/test --multiarch`` and not by CI: cold
it is the slowest tier, with two emulated build roots, two emulated test roots and two emulated
builds (the README has the times).
"""

from __future__ import annotations

import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack import milestones as ms
from hack.deb import build_deb, dpkg_offline
from hack.emulation import MACHINE, emulated, host_arch, qemu_env
from nodeagent.kube.client import Kube
from tests.nspawn import Machine, nspawn_root
from tests.test_system import DEADLINE, MARGIN, Node, assert_drained, config, new_node

REPO = Path(__file__).resolve().parent.parent
# Cold, the fixture builds the package and the root, under emulation for arm64.
pytestmark = pytest.mark.timeout(2400)
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
# Emulated, the agent's start (the Kubernetes client's imports) and systemd's boot take tens of
# seconds where they take one natively.
BOOT = 300.0
AGENT_START = 180.0
# What qemu-user cannot do for systemd, by systemd's version, and the drop-ins that leave it out
# under emulation only (the amd64 roots run every unit as shipped, the sandbox included). Both:
# the set-up of the agent's IPC namespace fails ("Failed to set up IPC namespacing:
# Input/output error", 226/NAMESPACE, every start; without the drop-in both arm64 tests fail).
# 257 (under qemu 10.0; 7.2 starts no unit at all, see hack/qemu-user): a unit's credentials
# and its mount namespace are set up in a process cloned with CLONE_NEWNS, which qemu refuses
# (EINVAL: 243/CREDENTIALS, 226/NAMESPACE), so journald, tmpfiles and sysusers run without the
# credentials they import, and logind and the agent without the sandbox that needs a mount
# namespace.
NO_CREDENTIALS = """[Service]
ImportCredential=
LoadCredential=
"""
NO_MOUNT_NAMESPACE = """[Service]
ProtectSystem=no
ProtectHome=no
PrivateTmp=no
PrivateDevices=no
PrivateMounts=no
ReadWritePaths=
ProtectKernelTunables=no
ProtectKernelModules=no
ProtectKernelLogs=no
ProtectControlGroups=no
ProtectProc=default
ImportCredential=
"""
EMULATION_DROPINS = {
    252: {"nodeagent.service": "[Service]\nPrivateIPC=no\n"},
    257: {
        **{
            f"{unit}.service": NO_CREDENTIALS
            for unit in (
                "systemd-journald",
                "systemd-sysusers",
                "systemd-tmpfiles-setup",
                "systemd-tmpfiles-setup-dev",
                "systemd-tmpfiles-setup-dev-early",
            )
        },
        "systemd-logind.service": NO_MOUNT_NAMESPACE,
        "nodeagent.service": NO_MOUNT_NAMESPACE + "PrivateIPC=no\n",
    },
}


def emulate(machine: Machine, target: Target) -> None:
    """Every process of an emulated node on the CPU hack/binfmt emulates: its PID 1 and the
    commands run in it by their environment, its services by systemd's DefaultEnvironment=
    (systemd starts them with a clean one); and the units without what qemu-user cannot do."""
    env = qemu_env(target.arch)
    machine.env = env
    manager = machine.path("etc/systemd/system.conf.d/emulation.conf")
    manager.parent.mkdir(parents=True, exist_ok=True)
    manager.write_text(f"[Manager]\nDefaultEnvironment={' '.join(env)}\n")
    for unit, dropin in EMULATION_DROPINS[target.systemd].items():
        path = machine.path(f"etc/systemd/system/{unit}.d/emulation.conf")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dropin)


@dataclass(frozen=True)
class Target:
    suite: str
    arch: str
    release: int  # Debian's release number, the version's suffix
    python: str  # the suite's default interpreter, which the venv links to
    systemd: int

    def __str__(self) -> str:
        return f"{self.suite}-{self.arch}"


TARGETS = [
    Target(suite, arch, release, python, systemd)
    for suite, release, python, systemd in (
        ("bookworm", 12, "python3.11", 252),
        ("trixie", 13, "python3.13", 257),
    )
    for arch in ("amd64", "arm64")
]


@pytest.fixture(params=TARGETS, ids=str)
def target(request: pytest.FixtureRequest) -> Target:
    return request.param  # type: ignore[no-any-return]


def control(deb: Path) -> dict[str, str]:
    out = subprocess.run(
        ["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True, timeout=60
    )
    fields = {}
    for line in out.stdout.splitlines():
        name, _, value = line.partition(": ")
        if not line.startswith(" "):
            fields[name] = value
    return fields


@pytest.fixture
def installed(cluster: Any, kube: Kube, target: Target, tmp_path: Path) -> Iterator[Node]:
    """A node of the target's suite and architecture with its package installed offline."""
    deb = build_deb(target.suite, target.arch)
    with emulated(target.arch):
        root = nspawn_root(target.suite, target.arch)
        with new_node(cluster, kube, root, tmp_path) as node:
            node.machine.run_timeout = 120.0
            dpkg_offline(node.machine.root, deb, env=qemu_env(target.arch))
            kubelet = cluster.mint_node_kubeconfig(node.name, tmp_path / "kubelet.kubeconfig")
            node.machine.install_agent(kubelet, config(), kubelet=True)
            if target.arch != host_arch():
                emulate(node.machine, target)
            yield node


def test_package_names_its_suite_architecture_and_interpreter(target: Target) -> None:
    deb = build_deb(target.suite, target.arch)
    fields = control(deb)
    assert deb.name == f"nodeagent_{VERSION}~deb{target.release}_{target.arch}.deb"
    assert fields["Architecture"] == target.arch
    assert fields["Version"] == f"{VERSION}~deb{target.release}"
    depends = [d.strip().split(" ")[0] for d in fields["Depends"].split(",")]
    assert target.python in depends, fields["Depends"]
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert f"./usr/lib/nodeagent/bin/{target.python} -> ../../../bin/{target.python}" in listing


def test_installed_agent_runs_its_unit_and_drains_on_poweroff(
    installed: Node, target: Target
) -> None:
    node, machine = installed, installed.machine
    node.workloads()
    machine.boot(timeout=BOOT)

    assert machine.run("uname", "-m").stdout.strip() == MACHINE[target.arch]
    systemd = machine.run("systemctl", "--version").stdout.split()
    assert systemd[:2] == ["systemd", str(target.systemd)], systemd[:3]
    version = machine.run("nodeagent", "--version")
    assert version.returncode == 0, version.stderr
    assert VERSION in version.stdout, version.stdout
    ku.wait_until(
        lambda: node.locks_taken() >= 1,
        AGENT_START,
        "the agent to take its logind lock",
    )
    active = machine.run("systemctl", "is-active", "nodeagent").stdout.strip()
    assert active == "active", machine.run("systemctl", "status", "nodeagent").stdout

    assert machine.run("poweroff").returncode == 0
    assert machine.wait_exit(DEADLINE + MARGIN + BOOT) == 0
    # systemd 257 says which shutdown it is (PrepareForShutdownWithMetadata); 252 does not,
    # and the agent takes that for a poweroff.
    assert_drained(node, "poweroff")
    node.milestone(ms.DRAIN_FINISHED, reason="poweroff", outcome="drained")
