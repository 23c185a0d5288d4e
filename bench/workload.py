"""Clean-up between scenarios."""

from __future__ import annotations

from nodeagent.kube.client import ApiError, Kube, node_path
from tests import kubeutil as ku

SETTLE_TIMEOUT = 300.0


def remove(kube: Kube, group: str, nodes: list[str]) -> None:
    """Delete a finished scenario's namespace and nodes and wait until its pods are gone,
    so that one scenario's clean-up does not load the next one's drains."""
    kube.delete(f"/api/v1/namespaces/{group}")
    ku.wait_until(
        lambda: not kube.get(f"/api/v1/namespaces/{group}/pods")["items"],
        SETTLE_TIMEOUT,
        f"the pods of {group} to go",
    )
    for node in nodes:
        try:
            kube.delete(node_path(node))
        except ApiError as exc:
            if exc.status != 404:
                raise
