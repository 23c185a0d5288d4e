"""A watch that goes silent is noticed, however long it was asked to last.

The agent's watches last 5 to 10 minutes; a connection blackholed meanwhile is known only
by its silence, since the API server's watch cache sends bookmarks about every minute.
On the shared control plane (its watch cache on, etcd run as kubeadm runs it), through a
TCP relay that freezes the open connections without closing them.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import kubeutil as ku
from hack.agentproc import AgentProcess
from nodeagent.kube.client import Kube, node_path
from nodeagent.kube.watch import SILENCE_SECONDS, STUCK_AFTER
from tests.tcpproxy import Proxy

TAINT = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}
RESTARTS = "nodeagent_watch_restarts_total"
SYNCED = "nodeagent_loop_last_success_timestamp_seconds"


@pytest.fixture
def proxy(cluster: Any) -> Iterator[Proxy]:
    relay = Proxy(cluster.ports["apiserver"])
    try:
        yield relay
    finally:
        relay.close()


def kubeconfig_via(port: int, admin_kubeconfig: str, path: Path) -> Path:
    cfg = yaml.safe_load(Path(admin_kubeconfig).read_text())
    for entry in cfg["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_blackholed_watch_is_noticed_and_the_agent_recovers(
    cluster: Any, kube: Kube, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path
) -> None:
    node = ku.unique("silent")
    cluster.add_node(node)
    config = kubeconfig_via(proxy.port, admin_kubeconfig, tmp_path / "via-proxy.kubeconfig")
    agent = AgentProcess.start(tmp_path, config, node, {"reporting": {"heartbeat_interval": "1h"}})
    try:
        ku.wait_until(lambda: agent.metric(SYNCED, loop="node"), 20, "the node watch synced")
        ku.wait_until(lambda: agent.metric(SYNCED, loop="pods"), 20, "the pod watch synced")
        before = agent.metric(RESTARTS, resource="nodes")

        proxy.freeze()  # the watches' connections stay open and carry nothing more
        frozen = time.monotonic()
        ku.wait_until(
            lambda: agent.metric(RESTARTS, resource="nodes") > before,
            SILENCE_SECONDS + 30,
            "the silent node watch noticed",
        )
        noticed = time.monotonic() - frozen
        assert "not even a bookmark: connection presumed dead" in agent.output()
        # Retrying against the blackhole is alive: no loop counts as stuck.
        assert agent.healthz() == (200, "ok\n")

        proxy.restore()  # new connections relay again; the frozen ones stay dead
        restored = time.monotonic()
        kube.merge_patch(node_path(node), {"spec": {"taints": [TAINT]}})
        ku.wait_until(
            lambda: ku.node(kube, node)["spec"].get("unschedulable"),
            STUCK_AFTER,
            "the taint made after the blackhole acted on",
        )
        print(
            f"\nwatch silent for {SILENCE_SECONDS}s at most: blackhole noticed after "
            f"{noticed:.1f}s; taint acted on {time.monotonic() - restored:.1f}s after "
            "connections were possible again"
        )
        assert agent.proc.poll() is None
    finally:
        agent.stop(signal.SIGKILL)
