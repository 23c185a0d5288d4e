"""The Helm chart as the harness uses it: rendered by the pinned helm (hack/build-helm.sh),
its objects, and kubectl against the local control plane."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from nodeagent.kube.client import Kube

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "packaging" / "helm" / "nodeagent"


def helm_binary() -> str:
    out = subprocess.run(
        [str(ROOT / "hack" / "build-helm.sh")], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, check=check, timeout=120
    )


# hack/build-image's image: the chart names no image by default, the harness's renderings
# name this one unless their values name another.
LOCAL_IMAGE = "localhost/nodeagent"


def render(release: str, namespace: str, values: list[str]) -> str:
    sets = [arg for v in [f"image.repository={LOCAL_IMAGE}", *values] for arg in ("--set", v)]
    return helm("template", release, str(CHART), "--namespace", namespace, *sets).stdout


def objects(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def kubectl(cluster: Any, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    cmd = [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)


def privileged_namespace(kube: Kube, name: str, level: str = "privileged") -> str:
    labels = {"pod-security.kubernetes.io/enforce": level}
    kube.post("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
    return name


# Objects a rendering holds that outlive the test's namespace.
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding")


def note_cluster_scoped(docs: list[dict[str, Any]], applied: list[dict[str, Any]]) -> None:
    applied.extend(d for d in docs if d["kind"] in CLUSTER_SCOPED and d not in applied)
