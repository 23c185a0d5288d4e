"""The container image (Containerfile, built by hack/build-image), as built and as run.

The archives' metadata is read as a registry or runtime would. Then the image's root file
system (unpacked with umoci from the OCI archive, as Flatcar's nodeagent-image.service unpacks
it from Docker) runs under the Flatcar unit of ignition/ in a booted systemd-nspawn container:
host network (the container shares it), the container's real system bus and logind through the
bind-mounted /run/dbus. The agent in the image takes its logind delay lock and drains the node
against the local control plane when the container powers off.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack import milestones as ms
from hack.deb import hack
from hack.emulation import emulated
from nodeagent.kube.client import Kube
from tests.nspawn import nspawn_root
from tests.test_system import (
    DEADLINE,
    LOGIND_DELAY,
    MARGIN,
    Node,
    assert_drained,
    config,
    new_node,
)

REPO = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
FLATCAR_UNIT = REPO / "ignition" / "flatcar" / "nodeagent.service"
ROOTFS = "var/lib/nodeagent-image/rootfs"  # RootDirectory= of the Flatcar unit
REF = "org.opencontainers.image.ref.name"
ARCHES = ["amd64", "arm64"]
# ELF's e_machine of each architecture's binaries.
ELF_MACHINE = {"amd64": 62, "arm64": 183}


@pytest.fixture(scope="module")
def archives() -> tuple[Path, Path]:
    oci, docker = hack("build-image", 1800)
    return oci, docker


def member(archive: tarfile.TarFile, name: str) -> Any:
    handle = archive.extractfile(name)
    assert handle is not None, name
    return json.load(handle)


def blob(archive: tarfile.TarFile, digest: str) -> Any:
    return member(archive, "blobs/" + digest.replace(":", "/"))


def platform_manifests(oci: tarfile.TarFile) -> dict[str, Any]:
    """The version's image index in the archive, by architecture: the manifests it lists."""
    top = member(oci, "index.json")["manifests"]
    (entry,) = [m for m in top if m.get("annotations", {}).get(REF) == VERSION]
    assert entry["mediaType"] == "application/vnd.oci.image.index.v1+json", entry
    listed = blob(oci, entry["digest"])["manifests"]
    by_arch = {m["platform"]["architecture"]: m for m in listed}
    assert len(by_arch) == len(listed)
    assert all(m["platform"]["os"] == "linux" for m in listed)
    # Each also under its own tag, for tools that follow no index (umoci).
    tagged = {m.get("annotations", {}).get(REF): m["digest"] for m in top}
    for arch, manifest in by_arch.items():
        assert tagged[f"{VERSION}-{arch}"] == manifest["digest"]
    return by_arch


def test_oci_archive_indexes_both_architectures_labelled_with_the_version(
    archives: tuple[Path, Path],
) -> None:
    with tarfile.open(archives[0]) as oci:
        by_arch = platform_manifests(oci)
        assert sorted(by_arch) == ARCHES
        for arch, entry in by_arch.items():
            manifest = blob(oci, entry["digest"])
            image = blob(oci, manifest["config"]["digest"])
            assert (image["os"], image["architecture"]) == ("linux", arch)
            cfg = image["config"]
            assert cfg["Entrypoint"] == ["nodeagent"]
            labels = cfg["Labels"]
            assert labels["org.opencontainers.image.version"] == VERSION
            assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
            assert labels["org.opencontainers.image.source"]


def test_docker_archive_carries_the_same_image(archives: tuple[Path, Path]) -> None:
    with tarfile.open(archives[1]) as docker:
        (entry,) = member(docker, "manifest.json")
        image = member(docker, entry["Config"])
    assert entry["RepoTags"] == [f"localhost/nodeagent:{VERSION}"]
    assert image["config"]["Entrypoint"] == ["nodeagent"]
    assert image["config"]["Labels"]["org.opencontainers.image.version"] == VERSION


def unpack(oci: Path, workdir: Path, rootfs: Path, arch: str = "amd64") -> None:
    """The root file system of the image for ``arch`` at ``rootfs``, layers applied as a
    runtime applies them."""
    layout = workdir / "layout"
    layout.mkdir()
    with tarfile.open(oci) as archive:
        archive.extractall(layout, filter="tar")
    bundle = workdir / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{VERSION}-{arch}", str(bundle)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    (bundle / "rootfs").rename(rootfs)


def elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", path
    return int.from_bytes(header[18:20], "little")


def test_arm64_image_entrypoint_runs_under_emulation(
    archives: tuple[Path, Path], tmp_path: Path
) -> None:
    rootfs = tmp_path / "rootfs"
    unpack(archives[0], tmp_path, rootfs, "arm64")
    with tarfile.open(archives[0]) as oci:
        manifest = blob(oci, platform_manifests(oci)["arm64"]["digest"])
        cfg = blob(oci, manifest["config"]["digest"])["config"]
    # The interpreter under the entrypoint's venv is arm64's, not the host's.
    assert elf_machine(rootfs / "usr/bin/python3.11") == ELF_MACHINE["arm64"]
    with emulated("arm64"):
        out = subprocess.run(
            [
                "chroot",
                str(rootfs),
                "/usr/bin/env",
                "-i",
                *cfg["Env"],
                *cfg["Entrypoint"],
                "version",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"nodeagent {VERSION}"


@pytest.fixture
def flatcar_node(
    cluster: Any, kube: Kube, archives: tuple[Path, Path], tmp_path: Path
) -> Iterator[Node]:
    """A node without the package, with the image's root and the Flatcar unit, enabled."""
    with new_node(cluster, kube, nspawn_root(), tmp_path) as node:
        machine = node.machine
        unpack(archives[0], tmp_path, machine.path(ROOTFS))
        machine.install_kubelet()
        units = machine.path("etc/systemd/system")
        (units / "nodeagent.service").write_text(FLATCAR_UNIT.read_text())
        (units / "multi-user.target.wants" / "nodeagent.service").symlink_to(
            "/etc/systemd/system/nodeagent.service"
        )
        machine.verbose_agent()
        dropins = machine.path("etc/systemd/logind.conf.d")
        dropins.mkdir(parents=True)
        (dropins / "zz-nodeagent.conf").write_text(
            (REPO / "systemd" / "logind-nodeagent.conf").read_text()
        )
        # The kubelet's own identity, read-only through the unit's bind mounts.
        kubelet = cluster.mint_node_kubeconfig(node.name, tmp_path / "kubelet.kubeconfig")
        machine.write_kubelet_kubeconfig(kubelet.read_text())
        machine.write_config(config())
        yield node


def test_image_takes_the_logind_lock_and_drains_on_poweroff(flatcar_node: Node) -> None:
    node, machine = flatcar_node, flatcar_node.machine
    node.workloads()
    node.boot()
    node.agent_ready()

    locks = [row for row in machine.inhibitors() if row[0] == "nodeagent" and row[7] == "delay"]
    assert locks, machine.inhibitors()
    assert machine.logind_delay() == LOGIND_DELAY
    # Type=notify through RootDirectory: systemd has the agent's READY=1 and STATUS=.
    status = machine.run("systemctl", "show", "-P", "StatusText", "nodeagent").stdout.strip()
    assert status, machine.run("systemctl", "status", "nodeagent").stdout
    inside = machine.run("chroot", f"/{ROOTFS}", "nodeagent", "version").stdout.strip()
    assert inside == f"nodeagent {VERSION}"

    # The agent is the unit's main process: it reads systemd's jobs as in the host form, so a
    # restart (an image update) is told from a stop and does not drain.
    restart = machine.run("systemctl", "restart", "nodeagent", timeout=DEADLINE + MARGIN)
    assert restart.returncode == 0, restart.stderr
    node.milestone(ms.STOPPING, reason="restart")
    ku.wait_until(
        lambda: node.locks_taken() >= 2, 30, "the restarted agent to take its logind lock"
    )
    assert not node.unschedulable()

    assert machine.run("poweroff").returncode == 0
    assert machine.wait_exit(DEADLINE + MARGIN) == 0
    assert_drained(node, "poweroff")
    node.milestone(ms.DRAIN_FINISHED, reason="poweroff", outcome="drained")
