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
from hack import milestones as ms
from hack.agentproc import JSON_LOG, AgentProcess
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


def watching_agent(
    cluster: Any, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path, prefix: str, beat: str
) -> tuple[str, AgentProcess]:
    """A new node and its agent through `proxy` (heartbeat every `beat`), both of its
    watches synced."""
    node = ku.unique(prefix)
    cluster.add_node(node)
    config = kubeconfig_via(proxy.port, admin_kubeconfig, tmp_path / "via-proxy.kubeconfig")
    settings = {"reporting": {"heartbeat_interval": beat}, **JSON_LOG}
    agent = AgentProcess.start(tmp_path, config, node, settings)
    ku.wait_until(lambda: agent.metric(SYNCED, loop="node"), 20, "the node watch synced")
    ku.wait_until(lambda: agent.metric(SYNCED, loop="pods"), 20, "the pod watch synced")
    return node, agent


def taint_acted_on(kube: Kube, node: str, within: float) -> None:
    """Taint `node` for evacuation (directly, not through the relay) and wait until its
    agent cordons it."""
    kube.merge_patch(node_path(node), {"spec": {"taints": [TAINT]}})
    ku.wait_until(
        lambda: ku.node(kube, node)["spec"].get("unschedulable"),
        within,
        "the taint made after the blackhole acted on",
    )


def test_a_blackholed_watch_is_noticed_and_the_agent_recovers(
    cluster: Any, kube: Kube, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path
) -> None:
    node, agent = watching_agent(cluster, admin_kubeconfig, proxy, tmp_path, "silent", "1h")
    try:
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
        taint_acted_on(kube, node, STUCK_AFTER)
        print(
            f"\nwatch silent for {SILENCE_SECONDS}s at most: blackhole noticed after "
            f"{noticed:.1f}s; taint acted on {time.monotonic() - restored:.1f}s after "
            "connections were possible again"
        )
        assert agent.proc.poll() is None
    finally:
        agent.stop(signal.SIGKILL)


ACTED_WITHIN = 15.0  # the heartbeat's next try (3 s), then a new watch from its version


def test_a_blackholed_watch_starts_again_once_the_api_server_answers(
    cluster: Any, kube: Kube, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path
) -> None:
    """A blackhole shorter than the watches' silence deadline: a request that got no answer
    in it (the heartbeat, every 3 s here) and one answered after it (its next try) end
    the watches it froze, and they start again at once, not SILENCE_SECONDS after the cut."""
    node, agent = watching_agent(cluster, admin_kubeconfig, proxy, tmp_path, "back", "3s")
    try:
        before = agent.metric(RESTARTS, resource="nodes")
        proxy.freeze()
        frozen = time.monotonic()
        ku.wait_until(lambda: "heartbeat failed" in agent.output(), 30, "a heartbeat lost")
        proxy.restore()
        restored, back = time.monotonic(), time.time()
        taint_acted_on(kube, node, ACTED_WITHIN)
        acted = time.monotonic() - restored
        print(
            f"\nblackhole of {restored - frozen:.1f}s: the taint acted on {acted:.1f}s after "
            f"the relay was back ({time.monotonic() - frozen:.1f}s after the cut; the "
            f"silence deadline is {SILENCE_SECONDS}s)"
        )
        assert time.monotonic() - frozen < SILENCE_SECONDS
        assert agent.metric(RESTARTS, resource="nodes") > before
        # The node watch cut at the first answer and open again: the agent's own moment.
        assert ms.first(agent.milestones(), ms.WATCH_RESTARTED, back, resource="nodes")
    finally:
        proxy.restore()
        agent.stop(signal.SIGKILL)
