"""The daemon's watches under faults, and what it costs while idle.

A cluster of its own: kube-apiserver without the watch cache (so a watch resuming at
a compacted resourceVersion really gets 410 Gone) and with an audit log (so the
agent's requests can be counted by its identity). The agent runs with the shipped
least-privilege ClusterRole, through a TCP relay the tests can cut or blackhole.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from hack import kubeutil as ku
from hack.agentproc import AgentProcess
from nodeagent.config import LeftoversConfig, RejectionConfig
from nodeagent.departure.leftovers import LeftoverCleaner
from nodeagent.drain.engine import Drain, DrainOptions
from nodeagent.kube.client import JSON, ApiError, Kube, node_path, pods_path
from nodeagent.kube.watch import node_pods
from nodeagent.rejection.controller import RejectionController
from nodeagent.report.events import EventRecorder
from tests.tcpproxy import Proxy

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
"""
TAINT = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}
CORDON = {"spec": {"unschedulable": True}}
RESTARTS = "nodeagent_watch_restarts_total"
LAST = "nodeagent_loop_last_success_timestamp_seconds"


@dataclass
class Faulty:
    cluster: Any
    kube: Kube
    audit_log: Path
    proxy: Proxy
    workdir: Path

    def agent_kubeconfig(self, node: str, via_proxy: bool) -> Path:
        path = self.workdir / f"{node}.kubeconfig"
        self.cluster.mint_kubeconfig(f"system:nodeagent:{node}", ["nodeagent:agents"], path)
        if via_proxy:
            cfg = yaml.safe_load(path.read_text())
            cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.proxy.port}"
            path.write_text(yaml.safe_dump(cfg))
        return path


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulty]:
    from hack.localcluster.cluster import Cluster

    workdir = tmp_path_factory.mktemp("faulty")
    policy = workdir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit = workdir / "audit.log"
    cluster = Cluster.start(
        workdir / "cluster",
        apiserver_extra_args=[
            "--watch-cache=false",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={audit}",
        ],
    )
    kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
    paths = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
    with open("packaging/rbac.yaml") as fh:
        for doc in yaml.safe_load_all(fh):
            kube.post(f"/apis/rbac.authorization.k8s.io/v1/{paths[doc['kind']]}", doc)
    with open("packaging/own-node-policy.yaml") as fh:
        for doc in yaml.safe_load_all(fh):
            kinds = {
                "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
                "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
            }
            kube.post(f"/apis/admissionregistration.k8s.io/v1/{kinds[doc['kind']]}", doc)
    proxy = Proxy(cluster.ports["apiserver"])
    try:
        yield Faulty(cluster, kube, audit, proxy, workdir)
    finally:
        proxy.close()
        cluster.stop()


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.stop(signal.SIGKILL)


def start(
    faulty: Faulty, agents: list[AgentProcess], via_proxy: bool, **cfg: Any
) -> tuple[str, AgentProcess]:
    node = ku.unique("wf")
    faulty.cluster.add_node(node)
    kc = faulty.agent_kubeconfig(node, via_proxy)
    agent = AgentProcess.start(faulty.workdir, kc, node, {"rejection": {"enabled": False}, **cfg})
    agents.append(agent)
    seen = "nodeagent_loop_last_success_timestamp_seconds"
    ku.wait_until(lambda: agent.metric(seen, loop="node"), 20, "the node watch synced")
    return node, agent


def taint(kube: Kube, node: str) -> None:
    kube.merge_patch(node_path(node), {"spec": {"taints": [TAINT]}})


def cordoned(kube: Kube, node: str) -> bool:
    return bool(ku.node(kube, node)["spec"].get("unschedulable"))


def test_apiserver_restart_is_survived(faulty: Faulty, agents: list[AgentProcess]) -> None:
    node, agent = start(faulty, agents, via_proxy=False)
    faulty.cluster.stop_apiserver()
    time.sleep(2)
    faulty.cluster.start_apiserver()
    ku.wait_until(lambda: agent.metric(RESTARTS, resource="nodes") >= 1, 30, "a watch restart")
    ku.wait_until(lambda: ku.node(faulty.kube, node), 30, "API server back")

    began = time.monotonic()
    taint(faulty.kube, node)
    ku.wait_until(lambda: cordoned(faulty.kube, node), 15, "the taint acted on")
    print(f"\ntaint after an API server restart acted on in {time.monotonic() - began:.2f}s")
    assert agent.healthz()[0] == 200


def test_410_after_compaction_relists_and_misses_nothing(
    faulty: Faulty, agents: list[AgentProcess]
) -> None:
    node, agent = start(faulty, agents, via_proxy=True)
    before = agent.metric(RESTARTS, resource="nodes")
    faulty.proxy.cut("refuse")  # the agent cannot see what happens next
    taint(faulty.kube, node)
    for i in range(5):  # history moves on past the agent's resourceVersion ...
        faulty.kube.post(
            "/api/v1/namespaces/default/configmaps", {"metadata": {"name": ku.unique(f"cm{i}")}}
        )
    faulty.cluster.compact_etcd()  # ... and is compacted away
    assert not cordoned(faulty.kube, node)
    faulty.proxy.restore()

    ku.wait_until(lambda: cordoned(faulty.kube, node), 30, "the missed taint acted on")
    assert "410" in agent.output() or "too old" in agent.output()
    assert agent.metric(RESTARTS, resource="nodes") > before


def test_blackholed_api_server_keeps_the_agent_healthy_and_it_recovers(
    faulty: Faulty, agents: list[AgentProcess]
) -> None:
    node, agent = start(faulty, agents, via_proxy=True, reporting={"heartbeat_interval": "2s"})
    faulty.proxy.cut("blackhole")
    time.sleep(20)  # past the connect and request bounds of the agent's calls
    # Retrying against a dead server is alive; only a call stuck past its bound is not.
    assert agent.healthz() == (200, "ok\n")
    assert agent.proc.poll() is None
    faulty.proxy.restore()
    began = time.monotonic()
    taint(faulty.kube, node)
    ku.wait_until(lambda: cordoned(faulty.kube, node), 60, "the taint acted on after recovery")
    print(f"\ntaint after a healed blackhole acted on in {time.monotonic() - began:.2f}s")


def audit_entries(path: Path, offset: int) -> list[JSON]:
    with path.open() as fh:
        fh.seek(offset)
        return [json.loads(line) for line in fh if line.strip()]


def test_idle_footprint(faulty: Faulty, agents: list[AgentProcess]) -> None:
    """While idle the agent only watches and sends heartbeats; measured, then held to it."""
    interval, window = 5, 30
    node, agent = start(
        faulty, agents, via_proxy=False, reporting={"heartbeat_interval": f"{interval}s"}
    )
    # Past start-up: its one-shot passes (the after-start reconcile, the leftovers pass
    # and its list of pods) done, however long a busy machine makes them take.
    ku.wait_until(
        lambda: all(agent.metric(LAST, loop=once) for once in ("reconcile", "leftovers")),
        30,
        "the after-start reconcile and the leftovers pass",
    )
    offset = faulty.audit_log.stat().st_size
    proc = psutil.Process(agent.proc.pid)
    cpu_before = sum(proc.cpu_times()[:2])
    time.sleep(window)
    cpu = sum(proc.cpu_times()[:2]) - cpu_before
    rss_mb = proc.memory_info().rss / 2**20
    threads = proc.num_threads()

    user = f"system:nodeagent:{node}"
    mine = [e for e in audit_entries(faulty.audit_log, offset) if e["user"]["username"] == user]
    others = [e for e in mine if e["verb"] != "watch"]
    kinds = sorted(
        {
            f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('subresource', '')}"
            for e in others
        }
    )
    print(
        f"\nidle {window}s: RSS {rss_mb:.1f} MB, {threads} threads, "
        f"CPU {cpu:.2f}s ({100 * cpu / window:.1f}%), "
        f"{len(others)} non-watch requests ({', '.join(kinds)}), "
        f"{len(mine) - len(others)} watch requests ended"
    )
    assert kinds == ["patch nodes/status"], kinds
    assert window / interval - 2 <= len(others) <= window / interval + 1
    assert rss_mb <= 60


def test_an_agent_identity_may_change_only_its_own_node(faulty: Faulty) -> None:
    mine, other = ku.unique("own"), ku.unique("other")
    for name in (mine, other):
        faulty.cluster.add_node(name)
    agent = Kube.from_kubeconfig(str(faulty.agent_kubeconfig(mine, via_proxy=False)))

    def refused() -> str:
        try:
            agent.merge_patch(node_path(other), CORDON)
        except ApiError as exc:
            return exc.message if exc.status == 403 else ""
        faulty.kube.merge_patch(node_path(other), {"spec": {"unschedulable": False}})
        return ""  # not enforced yet: the policy takes a moment to load

    message = ku.wait_until(refused, 30, "the own-node policy enforced")
    assert f"nodeagent on {mine} may only change its own Node" in message
    agent.merge_patch(node_path(mine), CORDON)  # its own Node: allowed
    assert cordoned(faulty.kube, mine) and not cordoned(faulty.kube, other)
    with pytest.raises(ApiError) as status_patch:
        agent.strategic_patch(node_path(other) + "/status", {"status": {"conditions": []}})
    assert status_patch.value.status == 403

    ns = "default"
    pod = ku.bare_pod(faulty.kube, ns, ku.unique("p"), other)
    with pytest.raises(ApiError) as pod_patch:
        agent.strategic_patch(pods_path(ns, pod["metadata"]["name"]) + "/status", {"status": {}})
    assert pod_patch.value.status == 403
    with pytest.raises(ApiError) as pod_delete:
        agent.delete(pods_path(ns, pod["metadata"]["name"]))
    assert pod_delete.value.status == 403


def test_a_drain_keeps_its_deadline_when_the_api_server_blackholes(faulty: Faulty) -> None:
    """No request of a drain outlives deadline + finish_grace, however the server hangs."""
    from nodeagent.drain.engine import Drain, DrainOptions

    group = ku.unique("bh")
    node = f"{group}-a"
    faulty.cluster.add_node(node, {ku.GROUP_LABEL: group})
    ku.namespace(faulty.kube, group)
    ku.deployment(faulty.kube, group, "quorum", group, 3)
    ku.pdb(faulty.kube, group, "quorum", {"app": "quorum"}, minAvailable=3)  # never allows
    ku.wait_running(faulty.kube, node, 3)
    ku.wait_pdb_ready(faulty.kube, group, "quorum")
    agent = Kube.from_kubeconfig(str(faulty.agent_kubeconfig(node, via_proxy=True)))
    blocked = threading.Event()

    def progress(message: str) -> None:
        if "eviction blocked" in message:
            blocked.set()

    options = DrainOptions(deadline=4, force_after_deadline=True, finish_grace=3)
    drain = Drain(agent, node, options, progress=progress)
    result: list[Any] = []
    began = time.monotonic()
    worker = threading.Thread(target=lambda: result.append(drain.run()))
    worker.start()
    try:
        assert blocked.wait(10), "the PDB never refused an eviction"
        faulty.proxy.cut("blackhole")  # open connections hang, new ones never finish TLS
        worker.join(15)
        took = time.monotonic() - began
    finally:
        faulty.proxy.restore()
    assert not worker.is_alive()
    print(f"\ndrain with a 4 s deadline + 3 s grace, server blackholed: {took:.1f}s")
    assert took < 4 + 3 + 1.5
    assert result[0].outcome == "timed-out"


def pod_lists(faulty: Faulty, user: str, offset: int) -> int:
    """Lists of pods by `user` since `offset`: each start of a pod watch makes one."""
    entries = audit_entries(faulty.audit_log, offset)
    return sum(
        1
        for e in entries
        if e["user"]["username"] == user
        and e["verb"] == "list"
        and e["objectRef"].get("resource") == "pods"
    )


def test_one_pod_watch_serves_rejection_leftovers_and_drain(faulty: Faulty, tmp_path: Path) -> None:
    """The daemon's form: the node's pods watched once, handed to the rejection
    controller, the after-boot leftovers pass and a drain; a one-shot drain keeps its own."""
    node = ku.unique("one")
    faulty.cluster.add_node(node)
    agent = Kube.from_kubeconfig(str(faulty.agent_kubeconfig(node, via_proxy=False)))
    user = f"system:nodeagent:{node}"
    ns = ku.namespace(faulty.kube, ku.unique("one"))
    ku.bare_pod(faulty.kube, ns, "a", node)
    ku.wait_running(faulty.kube, node, 1)
    events = EventRecorder(agent, node)
    offset = faulty.audit_log.stat().st_size

    pods = node_pods(agent, node, watch_seconds=60)
    cfg = RejectionConfig(journal_dir=str(tmp_path / "journal"))
    rejection = RejectionController(agent, node, cfg, events, pods=pods)
    stop = threading.Event()
    thread = threading.Thread(target=rejection.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert pods.wait_synced(20), "the shared pod watch never synced"
        cleaner = LeftoverCleaner(agent, node, LeftoversConfig(), events, time.time(), pods=pods)
        assert cleaner.run() == []
        result = Drain(agent, node, DrainOptions(deadline=30), events, pods=pods).run()
        assert result.outcome == "drained" and [p.name for p in result.evicted] == ["a"]
        assert not pods.stopped  # the drain let go of it; the controller still holds it
    finally:
        stop.set()
        thread.join(10)
    assert pods.stopped  # nobody holds it any more
    ku.wait_until(lambda: pod_lists(faulty, user, offset), 10, "the audit log written")
    time.sleep(1)
    assert pod_lists(faulty, user, offset) == 1

    own = Drain(agent, node, DrainOptions(deadline=30), events).run()  # `nodeagent drain`
    assert own.outcome == "drained"
    ku.wait_until(lambda: pod_lists(faulty, user, offset) == 2, 10, "the own watch's list")
    events.flush()


def test_the_daemon_watches_its_pods_once(
    faulty: Faulty, agents: list[AgentProcess], tmp_path: Path
) -> None:
    """Rejection, the after-boot leftovers pass and an evacuation's drain: one list of
    the node's pods (the shared watch's), where each used to list for itself."""
    offset = faulty.audit_log.stat().st_size
    rejection = {"enabled": True, "journal_dir": str(tmp_path / "journal")}
    node, agent = start(faulty, agents, via_proxy=False, rejection=rejection)
    ns = ku.namespace(faulty.kube, ku.unique("once"))
    ku.bare_pod(faulty.kube, ns, "a", node)
    ku.wait_running(faulty.kube, node, 1)
    ku.wait_until(lambda: agent.metric(LAST, loop="leftovers"), 30, "the leftovers pass")

    taint(faulty.kube, node)
    ku.wait_until(lambda: not ku.pods_on(faulty.kube, node), 60, "the evacuation's drain")
    user = f"system:nodeagent:{node}"
    ku.wait_until(lambda: pod_lists(faulty, user, offset), 10, "the audit log written")
    time.sleep(1)  # a second list, if any, in the log too
    assert pod_lists(faulty, user, offset) == 1
