"""A waiter for a watch's first sync is woken by it, not by the next change.

The race: the relist publishes the objects (and wakes waiters) before the change
handlers have had them and the watch counts as synced. A drain waiting for the sync in
that gap used to sleep until the next pod change on the node or its deadline: on a
quiet node, the whole drain deadline before it cordoned.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from hack import kubeutil as ku
from nodeagent.kube.client import JSON, Kube
from nodeagent.kube.watch import node_pods


def test_a_waiter_in_the_gap_before_the_sync_is_woken(cluster: Any, kube: Kube) -> None:
    group, node, _spare = ku.node_pair(cluster, kube, "ws")
    ku.deployment(kube, group, "web", group, 1)
    ku.wait_running(kube, node, 1)

    pods = node_pods(kube, node)
    listed, waiting = threading.Event(), threading.Event()

    def slow_handler(kind: str, _pod: JSON) -> None:
        if kind == "SYNC":  # the objects are published; the sync is not yet set
            listed.set()
            waiting.wait(10)  # hold the relist here until the waiter has looked
            time.sleep(0.2)  # and gone to sleep on the watch's condition

    pods.add_handler(slow_handler)
    result: list[tuple[bool, float]] = []

    def wait() -> None:
        listed.wait(30)
        started = time.monotonic()
        waiting.set()
        synced = pods.wait_for(pods.synced.is_set, time.monotonic() + 30)
        result.append((synced, time.monotonic() - started))

    waiter = threading.Thread(target=wait)
    waiter.start()
    with pods.hold():
        waiter.join(40)
    [(synced, seconds)] = result
    # Woken by the sync itself: well within the wait's 30 s, not at its end.
    assert synced and seconds < 15, seconds
