"""The departure benchmark's service image (hack/workload), built locally and cached.

A static Go binary (stdlib only) packed as a one-layer docker-archive like the busybox test
image (hack/realnode/images.py). No registry is reachable, so it is imported into a running
node's containerd (:func:`import_into`) rather than pulled.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .images import ImageError, ImageSpec, docker_archive
from .paths import CACHE, REPO

if TYPE_CHECKING:
    from .node import RealNode

WORKLOAD_IMAGE = "nodeagent.local/workload:1"
SOURCE = REPO / "hack" / "workload"
PORT = 8080
BUILD_TIMEOUT = 600.0
# Inside the node's root, where the archive is copied before the import.
INSIDE = "var/lib/realnode/workload.tar"


def _key() -> str:
    h = hashlib.sha256(WORKLOAD_IMAGE.encode())
    for path in sorted(SOURCE.glob("*")):
        if path.suffix in (".go", ".mod"):
            h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


def ensure_workload_image() -> Path:
    """The image archive (built on first use, then cached by its source's hash)."""
    out = CACHE / f"workload-{_key()}"
    tar = out / "workload.tar"
    if tar.exists():
        return tar
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=CACHE))
    binary = tmp / "workload"
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    cmd = ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "."]
    try:
        built = subprocess.run(
            cmd, cwd=SOURCE, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT
        )
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"building {SOURCE} took over {BUILD_TIMEOUT:.0f}s") from exc
    if built.returncode != 0:
        shutil.rmtree(tmp)
        raise ImageError(f"building {SOURCE} failed: {built.stderr.strip()}")
    # Not root: the server needs no privilege (port 8080).
    spec = ImageSpec(WORKLOAD_IMAGE, {"workload": binary}, {}, ["/workload"], "65534:65534")
    (tmp / "workload.tar").write_bytes(docker_archive(spec))
    binary.unlink()
    if out.exists():  # a concurrent first build won
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, out)
    return tar


def import_into(node: RealNode) -> None:
    """Import the image into the node's containerd (kept across the node's reboots)."""
    target = node.path(INSIDE)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ensure_workload_image(), target)
    out = node.run("ctr", "-n", "k8s.io", "images", "import", "/" + INSIDE, timeout=120)
    if out.returncode != 0:
        raise ImageError(f"importing {WORKLOAD_IMAGE} into {node.name}: {out.stderr.strip()}")
