"""Shared fixtures: one real control plane (etcd, kube-apiserver, controllers,
scheduler, simulated kubelet) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kube.client import Kube
from nodeagent.report import metrics


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
