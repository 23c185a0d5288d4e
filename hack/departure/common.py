"""What every way down shares (ways.py, actorways.py): the bounds of a departure, the
poweroff, and the wait for the service whole again."""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING

from hack import kubeutil as ku

from .objects import REPLICAS
from .vm import VmLeaving

if TYPE_CHECKING:
    from .scene import Node, Scene

# Bounds a departure and its traffic (an endpoint the kubelet left Ready stays so until the
# taint manager deletes its pod: 300 s of default toleration after the node is not ready).
DEPARTURE_CAP_S = 150.0
READY_TIMEOUT = 180.0
# The scene's waits list pods or run commands in the nodes: twice a second is enough.
POLL_S = 0.5


def poweroff(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """`systemctl poweroff` on the leaving node; returns when it is off. With the config's
    budget, the power is cut when the node is still up after it, as the cloud does at the
    end of a late notice's time (GCP's hard-off)."""
    node = scene.leaving
    scene.poweroff_at = time.time()
    if isinstance(node, VmLeaving):
        node.power_button()  # as a cloud stops an instance: logind's power key
    else:
        node.run("systemctl", "poweroff", "--no-block")
    cut = scene.config.budget_s
    if cut is None:
        node.wait_exit(scene.exit_cap)
        return time.time()
    try:
        node.wait_exit(max(0.0, scene.poweroff_at + cut - time.time()))
    except subprocess.TimeoutExpired:
        notes.append(f"still up {cut}s after the poweroff: power cut")
        node.kill()
    return time.time()


def wait_whole(scene: Scene) -> None:
    """Until the service is whole again: every replica Ready."""
    pods = REPLICAS + int(scene.dnd)
    ku.wait_until(lambda: len(scene.ready_pods()) >= pods, scene.ready_timeout,
                  "the service whole", step=POLL_S)  # fmt: skip
