"""The agent's Debian package for nspawn roots: the cached build scripts of hack/ that make
it (and the roots), ``dpkg -i`` into a root as a node image's build does, and the drop-in
that makes its unit log at INFO."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hack.nspawn import Container

from hack.emulation import host_arch

REPO = Path(__file__).resolve().parent.parent

# -v: INFO lines (what the agent heard, its drain's progress and outcome) go to the journal.
# An administrator's drop-in, as on a node: the packaged unit stays as shipped.
VERBOSE_DROPIN = """[Service]
ExecStart=
ExecStart=/usr/bin/nodeagent run --config /etc/nodeagent/config.toml -v
"""


def hack(script: str, timeout: float, *args: str) -> list[Path]:
    """Run a cached build script of hack/; the paths it prints, one a line."""
    out = subprocess.run(
        [str(REPO / "hack" / script), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"hack/{script} failed: {out.stderr.strip()[-3000:]}")
    return [Path(line) for line in out.stdout.strip().splitlines()]


def build_deb(suite: str = "bookworm", arch: str | None = None) -> Path:
    """The package for ``suite`` and ``arch`` (the host's unless told) built from the checkout
    (hack/build-deb reuses an up-to-date one). Bookworm by default: the harness's roots are
    Debian 12's, whatever the host runs."""
    target = f"{suite}/{arch or host_arch()}"
    # Cold, a foreign architecture's build root and build run under emulation.
    return hack("build-deb", 3600, target)[-1]


def dpkg_offline(root: Path, deb: Path, *args: str, env: tuple[str, ...] = ()) -> None:
    """``dpkg -i`` into a root where no systemd runs, as a node image's build does; ``env``
    (NAME=VALUE) for its processes (an emulated root's, hack/emulation.qemu_env)."""
    out = subprocess.run(
        [
            "systemd-nspawn",
            "--quiet",
            "--register=no",
            "--keep-unit",
            "--pipe",
            "-D",
            str(root),
            f"--bind-ro={deb}:/tmp/{deb.name}",
            *(f"--setenv={e}" for e in env),
            "dpkg",
            "-i",
            *args,
            f"/tmp/{deb.name}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
    )
    if out.returncode != 0:
        raise RuntimeError(f"dpkg -i {deb.name} failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")


def install_agent(node: Container, kubeconfig: Path, config: str) -> None:
    """The agent's package in a node's root as on a node image (enabled, after the
    kubelet), verbose, with `kubeconfig` and `config` under /etc/nodeagent."""
    dpkg_offline(node.root, build_deb())
    dropin = node.path("etc/systemd/system/nodeagent.service.d/verbose.conf")
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(VERBOSE_DROPIN)
    etc = node.path("etc/nodeagent")
    (etc / "kubeconfig").write_text(kubeconfig.read_text())
    (etc / "kubeconfig").chmod(0o600)
    (etc / "config.toml").write_text(config)
