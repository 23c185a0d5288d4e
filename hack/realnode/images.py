"""Container images for the real node, built locally (no registry is reachable).

Two images, each a docker-archive tar that ``ctr images import`` names from its RepoTags:

- the sandbox image: ``pause`` compiled from the Kubernetes release's own ``pause.c``
  (from the Go module cache, the same version as the kubelet), statically with gcc;
- a test image: Debian's static busybox with the applets the tests run.

Cached under ~/.cache/nodeagent/realnode-images-<key>, the key hashing the inputs, so a second
call builds nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hack.k8sversion import kubelet_version

from .paths import CACHE

PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"
TEST_IMAGE = "nodeagent.local/busybox:1"
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "sleep", "true", "cat", "echo", "ls", "mkdir", "touch", "date", "kill")
# Bump when the image layout below changes.
RECIPE = "1"


class ImageError(RuntimeError):
    """An image could not be built."""


@dataclass(frozen=True)
class ImageSpec:
    name: str
    files: dict[str, Path]  # path inside the image -> file on the host
    links: dict[str, str]  # symlink inside the image -> its target
    entrypoint: list[str]
    user: str


def pause_source() -> Path:
    """pause.c of the kubelet's k8s.io/kubernetes, from the module cache the builds fill."""
    version = kubelet_version()
    modcache = _go_env("GOMODCACHE")
    src = Path(modcache) / f"k8s.io/kubernetes@{version}" / "build/pause/linux/pause.c"
    if not src.exists():
        raise ImageError(f"{src} is missing: build the kubelet first (hack/build-kubelet.sh)")
    return src


def _go_env(name: str) -> str:
    out = subprocess.run(["go", "env", name], capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        raise ImageError(f"go env {name} failed: {out.stderr.strip()}")
    return out.stdout.strip()


def _digest(*paths: Path) -> str:
    h = hashlib.sha256(RECIPE.encode())
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def ensure_images() -> Path:
    """Directory holding pause.tar and busybox.tar (built on first use)."""
    source = pause_source()
    if not BUSYBOX.exists():
        raise ImageError(f"{BUSYBOX} is missing: install busybox-static (hack/setup does)")
    out = CACHE / f"realnode-images-{_digest(source, BUSYBOX)}"
    if (out / ".complete").exists():
        return out
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=CACHE))
    pause = tmp / "pause"
    cc = ["gcc", "-Os", "-Wall", "-static", "-DVERSION=v3.10.1", "-o", str(pause), str(source)]
    built = subprocess.run(cc, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise ImageError(f"compiling pause.c failed: {built.stderr.strip()}")
    specs = {
        "pause.tar": ImageSpec(PAUSE_IMAGE, {"pause": pause}, {}, ["/pause"], "65535:65535"),
        "busybox.tar": ImageSpec(
            TEST_IMAGE,
            {"bin/busybox": BUSYBOX},
            {f"bin/{a}": "busybox" for a in APPLETS},
            ["/bin/sh"],
            "0:0",
        ),
    }
    for file, spec in specs.items():
        (tmp / file).write_bytes(docker_archive(spec))
    pause.unlink()
    (tmp / ".complete").touch()
    if out.exists():  # a concurrent first build won
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, out)
    return out


def _layer(spec: ImageSpec) -> bytes:
    """One uncompressed, reproducible layer tar (fixed owner and times)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in ("bin", "tmp"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        for inside, host in sorted(spec.files.items()):
            data = host.read_bytes()
            info = tarfile.TarInfo(inside)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for inside, target in sorted(spec.links.items()):
            info = tarfile.TarInfo(inside)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buf.getvalue()


def docker_archive(spec: ImageSpec) -> bytes:
    """The `docker save` format: manifest.json naming the image, its config and one layer."""
    layer = _layer(spec)
    layer_id = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": spec.entrypoint, "User": spec.user, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [spec.name], "Layers": [f"{layer_id}.tar"]}]
    members = {
        f"{layer_id}.tar": layer,
        config_name: config_bytes,
        "manifest.json": json.dumps(manifest).encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
