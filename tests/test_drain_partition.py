"""An API server lost in the middle of a shutdown drain is named within two seconds.

A real agent drains its node at SIGTERM (unknown = drain, a 30 s deadline) through a TCP
relay in front of the real API server (tests/tcpproxy.py). One second after its two pods
were evicted (they take 30 s to stop, so the drain waits for them), the relay either
blackholes every connection, open or new (silent, as a partition), or refuses them. The
first log line naming the API server comes within 2 s either way; from then on the drain's
progress lines claim no pod it cannot see ("N pods last seen on the node"); with the
relay back, the agent says so, the blackholed pod watch starts again at once, the drain's
result is on the Node, and the agent exits within its budget.

A drain that ends while the relay blackholes has its result written once the relay is
back, without a second drain; a drain whose pod watch alone went dead renews it.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack import milestones as ms
from hack.agentproc import JSON_LOG, AgentProcess
from nodeagent.context import Context
from nodeagent.drain.partition import WATCH_QUIET, PartitionWatch
from nodeagent.fence import marker
from nodeagent.kube.client import Kube, node_path
from nodeagent.kube.watch import node_pods
from tests.tcpproxy import Proxy
from tests.test_watch_silence import kubeconfig_via
from tests.test_watch_silence import proxy as proxy  # the fixture

SLOW_STOP = {"sim.nodeagent.io/termination-delay": "60s"}  # the grace (30 s) ends it
FIRST_LINE_WITHIN = 2.0
# The drain's probe answered is the first answer after the outage: the watch it slept
# through is cut then (kube/client.py Reachability), and open again at once.
WATCH_BACK_WITHIN = 2.0
TAINT = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}
PROGRESS = "API server unreachable since"  # the drain's progress line while it is lost
CLAIM = "waiting for 2 pods"  # a progress line that claims to see the pods


def lines_after(agent: AgentProcess, offset: int) -> list[str]:
    return agent.output()[offset:].splitlines()


def moment(agent: AgentProcess, name: str, after: float, timeout: float, **fields: str) -> float:
    """When (unix seconds, the agent's own stamp) the agent wrote milestone `name` at
    `after` or later."""

    def found() -> ms.Record | None:
        return next((r for r in agent.milestones() if r.matches(name, after, fields)), None)

    return float(ku.wait_until(found, timeout, name).time)


def line_of(lines: list[str], name: str, **fields: str) -> int:
    """The index of the first of `lines` that is milestone `name` (len(lines): none)."""
    records = [ms.from_lines([ln]) for ln in lines]
    return next(
        (i for i, rs in enumerate(records) if rs and rs[0].matches(name, None, fields)),
        len(lines),
    )


@pytest.mark.parametrize("how", ["blackhole", "refuse"])
def test_a_lost_api_server_is_named_within_2s_of_the_cut(
    cluster: Any, kube: Kube, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path, how: str
) -> None:
    group, node, spare = ku.node_pair(cluster, kube, "cut")
    ku.deployment(kube, group, "web", group, 2, annotations=SLOW_STOP)
    ku.wait_running(kube, node, 2)
    ku.open_node(kube, spare)  # for the replacements
    config = kubeconfig_via(proxy.port, admin_kubeconfig, tmp_path / "via-proxy.kubeconfig")
    settings = {"shutdown": {"unknown": "drain"}, "drain": {"deadline": "30s"}, **JSON_LOG}
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
        cut = time.time()
        lost = ku.wait_until(
            lambda: ms.first(agent.milestones(), ms.API_UNREACHABLE, cut), 10, "unreachable"
        )
        named = lost.time - cut
        print(f"\n{how}: the drain named the API server lost {named:.2f}s after the cut")
        assert named < FIRST_LINE_WITHIN, agent.output()[offset:]
        assert lost.fields.get("pods") == "2", lost

        # A progress line (every 5 s) while it is lost.
        ku.wait_until(
            lambda: any(PROGRESS in ln for ln in lines_after(agent, offset)), 10, PROGRESS
        )
        said = lines_after(agent, offset)
        progress = [ln for ln in said if PROGRESS in ln]
        assert "2 pods last seen on the node" in progress[0]
        print(f"{how}: {progress[0]}")
        # Until the drain knows it is lost (up to 1.75 s after the cut), a progress line
        # may still say what it saw a moment ago; from then on, no claim.
        known = line_of(said, ms.API_UNREACHABLE)
        assert not [ln for ln in said[known:] if CLAIM in ln], "\n".join(said)

        proxy.restore()
        restored = time.time()
        moment(agent, ms.API_ANSWERS_AGAIN, restored, 10)
        if how == "blackhole":
            # The blackholed pod watch is cut as soon as the API server answers again
            # (not after its 90 s of silence), and the drain sees its pods from then on.
            back = moment(agent, ms.WATCH_RESTARTED, restored, 10, resource="pods") - restored
            print(f"{how}: the pod watch open again {back:.2f}s after the relay was back")
            assert back < WATCH_BACK_WITHIN, agent.output()[offset:]
        code = agent.proc.wait(40)
        took = time.monotonic() - signalled
        print(f"{how}: the agent exited {took:.1f}s after SIGTERM (code {code})")
        assert took < 30 + 10, took
        # The drain never claimed what it could not see: a claim only once the watch is
        # open again.
        said = lines_after(agent, offset)
        known = line_of(said, ms.API_UNREACHABLE)
        live = line_of(said, ms.WATCH_RESTARTED, resource="pods")
        claims = [ln for ln in said[known:live] if CLAIM in ln]
        assert how == "refuse" or not claims, agent.output()[offset:]
        result = ku.node(kube, node)["metadata"].get("annotations", {}).get(marker.DRAIN_RESULT)
        assert result, agent.output()[offset:]
    finally:
        proxy.restore()
        agent.stop(signal.SIGKILL)


def test_a_result_the_api_server_did_not_take_is_written_when_it_answers_again(
    cluster: Any, kube: Kube, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path
) -> None:
    """An evacuation (6 s deadline) whose pod outlives it, the API server blackholed from
    the eviction until after the drain's end: its result could not be written then. Once
    the relay is back it is, without a second drain (a blocked evacuation is retried only
    30 s after its end)."""
    group, node, spare = ku.node_pair(cluster, kube, "late")
    ku.deployment(kube, group, "web", group, 1, annotations=SLOW_STOP)
    ku.wait_running(kube, node, 1)
    ku.open_node(kube, spare)
    config = kubeconfig_via(proxy.port, admin_kubeconfig, tmp_path / "via-proxy.kubeconfig")
    agent = AgentProcess.start(tmp_path, config, node, {"drain": {"deadline": "6s"}, **JSON_LOG})
    try:
        ku.wait_until(
            lambda: agent.metric("nodeagent_loop_last_success_timestamp_seconds", loop="pods"),
            20,
            "the pod watch synced",
        )
        kube.merge_patch(node_path(node), {"spec": {"taints": [TAINT]}})
        ku.wait_until(
            lambda: all(p["metadata"].get("deletionTimestamp") for p in ku.pods_on(kube, node)),
            20,
            "the pod evicted",
        )
        offset = len(agent.output())
        proxy.freeze()
        frozen = time.time()
        moment(agent, ms.RESULT_KEPT, frozen, 25, reason="evacuate", outcome="timed-out")
        time.sleep(3)  # the API server stays lost a while after the drain
        assert not node_annotations(kube, node).get(marker.DRAIN_RESULT)

        proxy.restore()
        restored = time.time()
        written = moment(agent, ms.RESULT_WRITTEN, restored, 15, reason="evacuate")
        record = ms.first(agent.milestones(), ms.RESULT_WRITTEN, restored)
        assert record is not None
        print(
            f"\ndrain result written {written - restored:.1f}s after the relay was back "
            f"(try {record.fields.get('tries')})"
        )
        assert node_annotations(kube, node).get(marker.DRAIN_RESULT) == "timed-out"
        assert record.fields.get("outcome") == "timed-out", record
        ku.wait_until(lambda: drained_reason(kube, node) == "Blocked", 15, "the condition")
        drains = [r for r in agent.milestones() if r.name == ms.DRAIN_STARTED]
        assert len(drains) == 1, agent.output()[offset:]
        print("\n".join(lines_after(agent, offset)[-6:]))
    finally:
        proxy.restore()
        agent.stop(signal.SIGKILL)


def test_a_drains_pod_watch_lost_alone_is_renewed_while_the_api_server_answers(
    kube: Kube, admin_kubeconfig: str, proxy: Proxy, tmp_path: Path
) -> None:
    """Only the pod watch's connection dies (frozen, the relay open again for new ones):
    no request fails, so nothing but its silence tells. While a drain waits on it, it is
    renewed after WATCH_QUIET, not SILENCE_SECONDS. The drain's reachability watch and
    pod watch run alone here, against the real API server."""
    ns = ku.namespace(kube, ku.unique("quiet"))
    node = ku.unique("quiet-node")  # no such Node: a pod names it, nothing runs it
    config = kubeconfig_via(proxy.port, admin_kubeconfig, tmp_path / "via-proxy.kubeconfig")
    via = Kube.from_kubeconfig(str(config))
    pods = node_pods(via, node).start()
    work = Context.background()
    try:
        assert pods.wait_synced(10)
        ku.wait_until(lambda: pods.streaming, 10, "the watch's stream open")
        proxy.freeze()  # the watch's connection: dead from now on
        proxy.restore()  # new connections relay again
        said: list[str] = []
        PartitionWatch(via, work, said.append, lambda: 0, pods).start()
        frozen = time.monotonic()
        ku.bare_pod(kube, ns, "late", node)
        ku.wait_until(lambda: pods.snapshot(), WATCH_QUIET + 10, "the new pod seen")
        seen = time.monotonic() - frozen
        print(f"\nthe pod watch lost alone: a new pod seen {seen:.1f}s after the freeze")
        assert not said, said  # the API server answered all along
    finally:
        work.cancel()
        pods.stop()


def drained_reason(kube: Kube, node: str) -> str:
    """NodeAgentDrained's reason on the Node ("" when absent)."""
    found = [
        c
        for c in ku.node(kube, node)["status"].get("conditions") or []
        if c["type"] == "NodeAgentDrained"
    ]
    return str(found[0]["reason"]) if found else ""


def node_annotations(kube: Kube, node: str) -> dict[str, str]:
    return dict(ku.node(kube, node)["metadata"].get("annotations") or {})
