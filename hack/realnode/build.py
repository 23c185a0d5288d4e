"""The real node's inputs, each built once and cached: kubelet, root, images."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from .images import ensure_images
from .paths import REPO

BUILD_TIMEOUT = 3600.0


class BuildError(RuntimeError):
    """An input of the real node could not be built."""


@dataclass(frozen=True)
class Inputs:
    kubelet: Path
    root: Path
    images: Path


def _script(name: str) -> Path:
    script = REPO / "hack" / name
    try:
        out = subprocess.run(
            [str(script)], stdout=subprocess.PIPE, text=True, timeout=BUILD_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{script} took over {BUILD_TIMEOUT:.0f}s") from exc
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise BuildError(f"{script} failed with exit code {out.returncode}")
    return Path(lines[-1])


def ensure_all() -> Inputs:
    """Build what is missing (the kubelet first: the images need its module's pause.c)."""
    kubelet = _script("build-kubelet.sh")
    return Inputs(kubelet, _script("realnode-root"), ensure_images())
