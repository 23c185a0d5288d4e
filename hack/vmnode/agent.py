"""The agent in a VM node's root, laid out as its Debian package lays it out.

The package (hack/build-deb) carries a venv built on Debian 12's Python 3.11; the VM is Debian
13, whose Python is 3.13, so that venv cannot run there. Until a trixie package exists the VM
gets the same files the package installs, made for 3.13: the venv of the agent's dependencies
(built with the root, hack/vm-root), the agent's wheel built from the checkout installed into
it, the unit, the logind drop-in, the containers' scope drop-ins and /usr/bin/nodeagent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hack.deb import VERBOSE_DROPIN
from hack.realnode.paths import REPO

VENV = "/usr/lib/nodeagent"
WANTS = "etc/systemd/system/multi-user.target.wants"
SCOPES = ("cri-containerd", "crio", "docker")


class AgentInstallError(RuntimeError):
    """The agent could not be installed into a VM node's root."""


def build_wheel(out: Path) -> Path:
    """The agent's wheel from the checkout (pure Python: any 3.11+ installs it)."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    wheels = sorted(out.glob("nodeagent-*.whl"))
    if built.returncode != 0 or not wheels:
        raise AgentInstallError(f"pip wheel: {built.stderr.strip()[-2000:]}")
    return wheels[-1]


def install(root: Path, config: str) -> None:
    """The agent enabled in `root`, verbose, with `config` as /etc/nodeagent/config.toml."""
    with tempfile.TemporaryDirectory(prefix="nodeagent-wheel.") as tmp:
        wheel = build_wheel(Path(tmp))
        _pip_install(root, wheel)
    unit = root / "usr/lib/systemd/system/nodeagent.service"
    unit.write_text((REPO / "systemd/nodeagent.service").read_text())
    logind = root / "usr/lib/systemd/logind.conf.d/zz-nodeagent.conf"
    logind.parent.mkdir(parents=True, exist_ok=True)
    logind.write_text((REPO / "systemd/logind-nodeagent.conf").read_text())
    # The containers' scopes stop only after the agent (packaging/debian/rules installs it
    # for each runtime): the VM's pods are such scopes, under the systemd driver.
    for scope in SCOPES:
        dropin = root / f"usr/lib/systemd/system/{scope}-.scope.d/50-nodeagent.conf"
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text((REPO / "systemd/pod-scope-nodeagent.conf").read_text())
    (root / "usr/bin/nodeagent").symlink_to(f"{VENV}/bin/nodeagent")
    (root / WANTS / "nodeagent.service").symlink_to("/usr/lib/systemd/system/nodeagent.service")
    dropin = root / "etc/systemd/system/nodeagent.service.d/verbose.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(VERBOSE_DROPIN)
    etc = root / "etc/nodeagent"
    etc.mkdir(exist_ok=True)
    (etc / "config.toml").write_text(config)


def _pip_install(root: Path, wheel: Path) -> None:
    out = subprocess.run(
        [
            "systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--pipe",
            "-D", str(root), f"--bind-ro={wheel}:/tmp/{wheel.name}",
            f"{VENV}/bin/pip", "install", "-q", "--no-deps", "--no-index",
            "--disable-pip-version-check", f"/tmp/{wheel.name}",
        ],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
    )  # fmt: skip
    if out.returncode != 0:
        raise AgentInstallError(f"pip install {wheel.name} in the VM root: {out.stderr[-2000:]}")
