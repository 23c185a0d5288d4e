"""Foreign architectures' binaries on this host for as long as a block needs them: hack/binfmt's
hold and release around it. Debian 13's qemu-user is registered once for all holders
(builds and tests alike) and taken away after the last, so nothing stays registered."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BINFMT = Path(__file__).resolve().parent / "binfmt"
_holders = itertools.count()

# Debian's architecture names and what `uname -m` says on them.
MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}


def host_arch() -> str:
    out = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True, timeout=30
    )
    return out.stdout.strip()


def qemu_env(arch: str) -> tuple[str, ...]:
    """What the processes of an ``arch`` root need in their environment to be emulated as
    hack/binfmt emulates them (QEMU_CPU: which CPU, and why), as NAME=VALUE; nothing for the
    host's own. A root's processes get none of the host's environment (nspawn, nsenter under
    ``env -i``, a booted systemd's services), so each of those is given it."""
    if arch == host_arch():
        return ()
    out = subprocess.run(
        [str(BINFMT), "cpu", arch], capture_output=True, text=True, check=True, timeout=30
    )
    return (f"QEMU_CPU={out.stdout.strip()}",)


def _binfmt(command: str, arch: str, holder: str) -> None:
    out = subprocess.run(
        [str(BINFMT), command, arch, holder],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"hack/binfmt {command} {arch}: {out.stderr.strip()}")


@contextmanager
def emulated(arch: str) -> Iterator[None]:
    """Within the block, ``arch``'s binaries run here (nothing to do for the host's own)."""
    holder = f"{os.getpid()}-{next(_holders)}"
    _binfmt("hold", arch, holder)
    try:
        yield
    finally:
        _binfmt("release", arch, holder)
