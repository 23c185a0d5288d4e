"""What a real node is to the harness, whatever runs it (systemd-nspawn: hack/realnode; qemu:
hack/vmnode): a Node of a local control plane (hack/localcluster), a workdir holding its
root, and a journal, where the agent's milestones are read (hack/milestones.py).

A subclass holds ``cluster``, ``name`` and ``workdir`` and says how its journal is read.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hack import milestones
from nodeagent.kube.client import ApiError, api_time, node_path

if TYPE_CHECKING:
    from hack.localcluster.cluster import Cluster

AGENT_UNIT = "nodeagent.service"


class KubeNode:
    cluster: Cluster
    name: str
    workdir: Path

    @property
    def root(self) -> Path:
        return self.workdir / "root"

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    def ready_since(self, since_wall: float) -> bool:
        """The Node Ready with a heartbeat written since `since_wall`, and no
        node.kubernetes.io taint (the lifecycle controller's unschedulable one goes with
        the agent's cordon)."""
        obj = self.node_object()
        if obj is None:
            return False
        conds = (obj.get("status") or {}).get("conditions") or []
        ready = [c for c in conds if c.get("type") == "Ready" and c.get("status") == "True"]
        taints = (obj.get("spec") or {}).get("taints") or []
        beat = api_time(ready[0].get("lastHeartbeatTime")) if ready else None
        fresh = beat is not None and beat >= int(since_wall)
        return fresh and not any(t["key"].startswith("node.kubernetes.io/") for t in taints)

    def node_object(self) -> dict[str, Any] | None:
        """The Node as the API has it; None before the kubelet registered it."""
        try:
            return dict(self.cluster.kube.get(node_path(self.name)))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def delete_node(self) -> None:
        """The Node object gone from the API (already gone is fine)."""
        try:
            self.cluster.kube.delete(node_path(self.name))
        except ApiError as exc:
            if exc.status != 404:
                raise

    def journal(self, *args: str) -> list[dict[str, str]]:
        """`journalctl -o json` entries of every boot so far."""
        raise NotImplementedError

    def milestones(self, unit: str = AGENT_UNIT) -> list[milestones.Record]:
        """The agent's milestones in `unit`'s journal, every boot's."""
        return milestones.from_journal(self.journal("-u", unit))


def wall_clock(since: float | None) -> float:
    """The wall-clock time of the monotonic time `since` (None: now)."""
    return time.time() - (time.monotonic() - since if since is not None else 0)
