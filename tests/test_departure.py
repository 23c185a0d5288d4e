"""The departure worker in process, against the real API server: signal orders that are
hard to hit from outside (a cancel overtaken by the next shutdown while a drain runs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hack import kubeutil as ku
from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure import budget
from nodeagent.departure.worker import Departure
from nodeagent.fence.marker import DRAIN_REASON
from nodeagent.kube.client import Kube
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import EventRecorder
from nodeagent.types import Reason, Step


@pytest.fixture
def blocked_node(cluster: Any, kube: Kube) -> str:
    """A node whose pods a PDB never lets go: a drain there runs until cancelled."""
    group, node, _spare = ku.node_pair(cluster, kube, "dp")
    ku.deployment(kube, group, "quorum", group, 2)
    ku.pdb(kube, group, "quorum", {"app": "quorum"}, minAvailable=2)
    ku.wait_running(kube, node, 2)
    ku.wait_pdb_ready(kube, group, "quorum")
    return node


@pytest.fixture
def worker(kube: Kube, blocked_node: str) -> Iterator[Departure]:
    cfg = Config(node=blocked_node)
    cfg.drain.deadline = 60
    yield from running_departure(cfg, kube)


def running_departure(cfg: Config, kube: Kube) -> Iterator[Departure]:
    """The departure's worker for `cfg`'s node, its loop running until the test ends."""
    departure = Departure(
        cfg,
        kube,
        EventRecorder(kube, cfg.node_name),
        ConditionWriter(kube, cfg.node_name),
        lambda _text: None,
        lambda *_fields: None,
    )
    ctx = Context.background()
    thread = threading.Thread(target=departure.run, args=(ctx, lambda: None), daemon=True)
    thread.start()
    yield departure
    ctx.cancel()
    thread.join(10)


def drain_running(departure: Departure) -> bool:
    running = departure._running
    return running is not None and running.reason is Reason.POWEROFF


def test_a_cancel_overtaken_by_the_next_shutdown_still_ends_the_first(
    kube: Kube, blocked_node: str, worker: Departure
) -> None:
    """PrepareForShutdown true, false, true in quick succession while the first drain runs:
    the cancel is stale by the time it is handled (a newer shutdown came), yet it ends the
    first shutdown, so the second one is not mistaken for it and drains for its reason."""
    worker.shutdown(Reason.POWEROFF, budget.logind(time.monotonic(), 60, None), "logind", 1)
    ku.wait_until(lambda: drain_running(worker), 15, "the first drain")
    worker.cancel(2)
    second = worker.shutdown(Reason.REBOOT, budget.logind(time.monotonic(), 60, None), "logind", 3)
    ku.wait_until(lambda: worker._running and worker._running.reason is Reason.REBOOT, 15)
    assert second.decision is not None and second.decision.step is Step.DRAIN
    ku.wait_until(
        lambda: ku.node(kube, blocked_node)["metadata"]["annotations"][DRAIN_REASON] == "reboot",
        15,
        "the second drain's cordon",
    )
    worker.cancel(4)
    assert second.wait(time.monotonic() + 15)
