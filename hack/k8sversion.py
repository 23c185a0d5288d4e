"""Which Kubernetes releases the harness runs: the API server's and the kubelet's, apart.

NODEAGENT_K8S_VERSION picks the control plane (and, unless told otherwise, the kubelet);
NODEAGENT_KUBELET_VERSION picks the node's kubelet and kube-proxy alone, so that a skewed pair
(a kubelet older than the API server) can run. Unset, both are the release the default wrapper
module hack/go/k8s pins. The build scripts (hack/go/k8s-ldflags.sh) read the same variables,
and every other release has its own committed module, hack/go/k8s-vX.Y.Z.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

GO_DIR = Path(__file__).resolve().parent / "go"
API_ENV = "NODEAGENT_K8S_VERSION"
KUBELET_ENV = "NODEAGENT_KUBELET_VERSION"
_RELEASE = re.compile(r"v?1\.\d+\.\d+")


class VersionError(ValueError):
    """A requested release has no wrapper module to build it from."""


@functools.cache
def default_version() -> str:
    """The release hack/go/k8s/go.mod pins."""
    for line in (GO_DIR / "k8s" / "go.mod").read_text().splitlines():
        if line.startswith("require k8s.io/kubernetes "):
            return line.split()[2]
    raise VersionError("hack/go/k8s/go.mod requires no k8s.io/kubernetes")


def module_dir(version: str) -> Path:
    """The wrapper module that builds `version`."""
    if version == default_version():
        return GO_DIR / "k8s"
    return GO_DIR / f"k8s-{version}"


def known(version: str) -> str:
    """`version` as vX.Y.Z, if a wrapper module builds it."""
    if not _RELEASE.fullmatch(version):
        raise VersionError(f"not a Kubernetes release version: {version!r} (want 1.Y.Z)")
    normal = "v" + version.removeprefix("v")
    if not (module_dir(normal) / "go.mod").exists():
        raise VersionError(
            f"no wrapper module for Kubernetes {normal}: write it with "
            f"hack/go/new-k8s-wrapper.sh {normal}"
        )
    return normal


def available() -> list[str]:
    """Every release with a committed wrapper module, oldest first."""
    found = {default_version()}
    found.update(p.name.removeprefix("k8s-") for p in GO_DIR.glob("k8s-v*") if p.is_dir())
    return sorted(found, key=lambda v: tuple(int(x) for x in v[1:].split(".")))


def api_version() -> str:
    """The control plane's release."""
    return known(os.environ.get(API_ENV) or default_version())


def kubelet_version() -> str:
    """The node's release (kubelet, kube-proxy, the sandbox image's pause.c)."""
    return known(os.environ.get(KUBELET_ENV) or api_version())
