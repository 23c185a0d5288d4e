"""An API server lost in the middle of a shutdown drain is named within two seconds.

A real agent drains its node at SIGTERM (unknown = drain, a 30 s deadline) through a TCP
relay in front of the real API server (tests/tcpproxy.py). One second after its two pods
were evicted (they take 30 s to stop, so the drain waits for them), the relay either
blackholes every connection, open or new (silent, as a partition), or refuses them. The
first log line naming the API server comes within 2 s either way; from then on the drain's
progress lines claim no pod it cannot see ("N pods last seen on the node"); with the
relay back, the agent says so, the drain's result is on the Node, and the agent exits
within its budget.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.agentproc import AgentProcess
from nodeagent.fence import marker
from nodeagent.kube.client import Kube
from tests.tcpproxy import Proxy
from tests.test_watch_silence import kubeconfig_via
from tests.test_watch_silence import proxy as proxy  # the fixture

SLOW_STOP = {"sim.nodeagent.io/termination-delay": "60s"}  # the grace (30 s) ends it
FIRST_LINE_WITHIN = 2.0


def lines_after(agent: AgentProcess, offset: int) -> list[str]:
    return agent.output()[offset:].splitlines()


def first_line(agent: AgentProcess, offset: int, words: str, timeout: float) -> float:
    """The monotonic time the first line after `offset` with `words` was seen (polled
    every 20 ms)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(words in line for line in lines_after(agent, offset)):
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"no line with {words!r} in {timeout}s:\n" + agent.output()[offset:])


@pytest.mark.parametrize("how", ["blackhole", "refuse"])
def test_a_lost_api_server_is_named_within_2s_of_the_cut(
    cluster: Any, kube: Kube, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path, how: str
) -> None:
    group, node, spare = ku.node_pair(cluster, kube, "cut")
    ku.deployment(kube, group, "web", group, 2, annotations=SLOW_STOP)
    ku.wait_running(kube, node, 2)
    ku.open_node(kube, spare)  # for the replacements
    config = kubeconfig_via(proxy.port, admin_kubeconfig, tmp_path / "via-proxy.kubeconfig")
    settings = {"shutdown": {"unknown": "drain"}, "drain": {"deadline": "30s"}}
    agent = AgentProcess.start(tmp_path, config, node, settings)
    try:
        ku.wait_until(
            lambda: agent.metric("nodeagent_loop_last_success_timestamp_seconds", loop="pods"),
            20,
            "the pod watch synced",
        )
        agent.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        ku.wait_until(
            lambda: all(p["metadata"].get("deletionTimestamp") for p in ku.pods_on(kube, node)),
            20,
            "both pods evicted",
        )
        time.sleep(1.0)
        offset = len(agent.output())
        if how == "blackhole":
            proxy.freeze()
        else:
            proxy.cut("refuse")
        cut = time.monotonic()
        named = first_line(agent, offset, "unreachable", 10) - cut
        print(f"\n{how}: the first line naming the API server {named:.2f}s after the cut")
        assert named < FIRST_LINE_WITHIN, agent.output()[offset:]

        time.sleep(6)  # a progress line (every 5 s) while it is lost
        said = lines_after(agent, offset)
        progress = [ln for ln in said if "API server unreachable since" in ln]
        assert progress, "\n".join(said)
        assert "2 pods last seen on the node" in progress[0]
        print(f"{how}: {progress[0]}")
        assert not [ln for ln in said if "waiting for 2 pods" in ln], "\n".join(said)

        proxy.restore()
        first_line(agent, offset, "answers again", 10)
        code = agent.proc.wait(40)
        took = time.monotonic() - signalled
        print(f"{how}: the agent exited {took:.1f}s after SIGTERM (code {code})")
        assert took < 30 + 10, took
        # A blackholed watch stays dead after the relay is back, until its silence ends
        # it: the drain never claimed what it could not see.
        claims = [ln for ln in lines_after(agent, offset) if "waiting for 2 pods" in ln]
        assert how == "refuse" or not claims, agent.output()[offset:]
        result = ku.node(kube, node)["metadata"].get("annotations", {}).get(marker.DRAIN_RESULT)
        assert result, agent.output()[offset:]
    finally:
        proxy.restore()
        agent.stop(signal.SIGKILL)
