"""Shared fixtures: one real control plane (etcd, kube-apiserver, controllers,
scheduler, simulated kubelet) for the whole test session."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nodeagent import metrics
from nodeagent.kube.client import Kube


@pytest.fixture(scope="session", autouse=True)
def metrics_on() -> None:
    """In-process agent code counts as the daemon's does (a one-shot command does not)."""
    metrics.enable()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from hack.localcluster.cluster import Cluster

    c = Cluster.start(tmp_path_factory.mktemp("cluster"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def admin_kubeconfig(cluster: Any) -> str:
    return str(Path(cluster.workdir) / "admin.kubeconfig")


@pytest.fixture(scope="session")
def kube(admin_kubeconfig: str) -> Kube:
    return Kube.from_kubeconfig(admin_kubeconfig)


# Tiers, from what a test uses (tests/*.py are not marked one by one): `hack/test --fast`
# runs what needs none of them. Registered in pyproject.toml.
CLUSTER_FIXTURES = frozenset({"cluster", "kube", "admin_kubeconfig"})
# Modules whose use means booting systemd-nspawn machines or building the node artifacts.
CLUSTER_MODULES = ("hack.localcluster.cluster",)
NSPAWN_MODULES = ("tests.nspawn", "hack.deb", "hack.nspawn", "hack.realnode")
ARTIFACT_MODULES = (
    "tests.test_image",
    "tests.test_ignition",
    "tests.test_chart",
    "hack.chart",
    "hack.aemm",  # built from the Go module proxy on first use
    "hack.actors.karpenter_real",  # likewise (hack/build-karpenter.sh)
    "hack.actors.cluster_api_real",  # likewise (hack/build-cluster-api.sh)
    "hack.promtool",
    "tests.test_dist_sums",
)


def _uses(module: Any, prefixes: tuple[str, ...]) -> bool:
    """Whether a test module imported anything from (or is one of) the given modules."""
    names = [module.__name__]
    for value in vars(module).values():
        if isinstance(value, ModuleType):
            names.append(value.__name__)
        else:
            names.append(getattr(value, "__module__", "") or "")
    return any(n == p or n.startswith(p + ".") for n in names for p in prefixes)


def _starts_a_cluster(item: pytest.Item) -> bool:
    """Whether the item uses the session's control plane, or a fixture that starts its own
    (tests/test_watch_faults.py's) or a module that drives the harness itself."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    if set(info.names_closure) & CLUSTER_FIXTURES:
        return True
    for defs in info.name2fixturedefs.values():
        for fixturedef in defs:
            try:
                source = inspect.getsource(fixturedef.func)
            except (OSError, TypeError):
                continue
            if "Cluster.start(" in source:
                return True
    module = getattr(item, "module", None)
    return module is not None and _uses(module, CLUSTER_MODULES)


# Every package on its own suite and architecture, arm64 under emulation: the slowest tier.
MULTIARCH_MODULES = ("tests.test_multiarch",)
# The real Karpenter and Cluster API managers: their cold Go builds (about 11 minutes on 2
# cores, Karpenter's with a newer Go fetched from the module proxy) do not fit CI's budget
# beside the full run; `hack/test --actors` runs them.
REAL_ACTOR_MODULES = ("tests.test_karpenter_real", "tests.test_cluster_api_real")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and _uses(module, MULTIARCH_MODULES):
            item.add_marker(pytest.mark.multiarch)
            item.add_marker(pytest.mark.artifacts)
        if module is not None and _uses(module, REAL_ACTOR_MODULES):
            item.add_marker(pytest.mark.realactors)
        if _starts_a_cluster(item):
            item.add_marker(pytest.mark.cluster)
        if module is not None and _uses(module, NSPAWN_MODULES):
            item.add_marker(pytest.mark.nspawn)
        if module is not None and _uses(module, ARTIFACT_MODULES):
            item.add_marker(pytest.mark.artifacts)
