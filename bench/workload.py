"""The cluster around the drains: clean-up between scenarios, the API server's own view."""

from __future__ import annotations

import ssl
import urllib.request

from hack import kubeutil as ku
from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import ApiError, Kube, node_path

SETTLE_TIMEOUT = 300.0


def remove(kube: Kube, namespaces: list[str], nodes: list[str]) -> None:
    """Delete a finished scenario's namespaces and nodes and wait until its pods are gone,
    so that one scenario's clean-up does not load the next one's drains."""
    for ns in namespaces:
        kube.delete(f"/api/v1/namespaces/{ns}")

    def emptied() -> bool:
        return not any(kube.get(f"/api/v1/namespaces/{ns}/pods")["items"] for ns in namespaces)

    ku.wait_until(emptied, SETTLE_TIMEOUT, f"the pods of {', '.join(namespaces)} to go")
    for node in nodes:
        try:
            kube.delete(node_path(node))
        except ApiError as exc:
            if exc.status != 404:
                raise


def terminated_watchers(cluster: Cluster) -> dict[str, int]:
    """apiserver_terminated_watchers_total by resource: watches the API server closed
    because their client fell behind (the client must watch again)."""
    ctx = ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt"))
    ctx.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
    with urllib.request.urlopen(f"{cluster.server}/metrics", context=ctx, timeout=30) as resp:
        text = resp.read().decode()
    found: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_terminated_watchers_total{"):
            labels, _, value = line.rpartition(" ")
            resource = labels.split('resource="', 1)[-1].split('"', 1)[0]
            found[resource] = found.get(resource, 0) + int(float(value))
    return found
