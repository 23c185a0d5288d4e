"""The watch's mirror keeps objects without managedFields (nodeagent/kube/watch.py): listed
and watched alike, while the API server's objects have them."""

from __future__ import annotations

import time
from typing import Any

from hack import kubeutil as ku
from nodeagent.kube.client import Kube
from nodeagent.kube.watch import node_pods


def test_the_mirror_drops_managed_fields(cluster: Any, kube: Kube) -> None:
    group, node, _spare = ku.node_pair(cluster, kube, "trim")
    ku.deployment(kube, group, "web", group, 1)
    ku.wait_running(kube, node, 1)
    assert all(p["metadata"].get("managedFields") for p in ku.pods_on(kube, node))

    pods = node_pods(kube, node)
    seen: list[tuple[str, bool]] = []
    pods.add_handler(lambda kind, pod: seen.append((kind, "managedFields" in pod["metadata"])))
    with pods.hold():
        assert pods.wait_synced(30)
        ku.deployment(kube, group, "more", group, 1)  # a watched ADDED, then MODIFIED
        assert pods.wait_for(lambda: len(pods.objects) == 2, time.monotonic() + 60)
        mirrored = pods.snapshot()
    assert len(mirrored) == 2 and not any("managedFields" in p["metadata"] for p in mirrored)
    kinds = {kind for kind, _ in seen}
    assert {"SYNC", "ADDED"} <= kinds and not any(has for _, has in seen), seen
