"""Drain edges: finished pods (compared with the kubectl the project builds) and pods
that stay on the node after their eviction (finalizers)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hack import kubeutil as ku
from hack.agentproc import AgentProcess
from nodeagent import metrics
from nodeagent.departure.executor import cordon_then_drain, outcome_condition
from nodeagent.drain import podfilter
from nodeagent.drain.engine import (
    Drain,
    DrainOptions,
    DrainOutcome,
    DrainResult,
    PodOutcome,
    PodState,
    pod_state,
)
from nodeagent.drain.eviction import BLOCKED_EVENT_AFTER
from nodeagent.drain.podfilter import controller_of
from nodeagent.drain.summary import render
from nodeagent.fence.marker import CORDONED_BY, NodeChanged
from nodeagent.kube.client import JSON, Kube, api_stamp, node_path, pods_path
from nodeagent.kube.watch import node_pods
from nodeagent.report import conditions
from nodeagent.report.events import EventRecorder
from nodeagent.types import FinishedPods
from tests.tcpproxy import Proxy

HOLD = "test.nodeagent.io/hold"


@dataclass
class Zoo:
    kube: Kube
    group: str
    node: str
    spare: str

    @property
    def ns(self) -> str:
        return self.group


def set_phase(kube: Kube, ns: str, name: str, phase: str) -> None:
    kube.merge_patch(pods_path(ns, name) + "/status", {"status": {"phase": phase}})


def pods_named(kube: Kube, node: str, prefix: str) -> list[JSON]:
    return [p for p in ku.pods_on(kube, node) if p["metadata"]["name"].startswith(prefix)]


def kind(pod: JSON) -> str:
    """A pod as its kind and phase, the same on every zoo (names carry hashes)."""
    ref = controller_of(pod)
    owner = str(ref["kind"]) if ref else pod["metadata"]["name"]
    return f"{owner}/{(pod.get('status') or {}).get('phase')}"


def make_zoo(cluster: Any, kube: Kube) -> Zoo:
    """One of each kind of pod kubectl's filters tell apart, finished ones included."""
    group, node, spare = ku.node_pair(cluster, kube, "zoo")
    zoo = Zoo(kube, group, node, spare)
    ku.deployment(kube, zoo.ns, "web", group, 1)
    ku.deployment(kube, zoo.ns, "flaky", group, 1)
    ku.daemonset(kube, zoo.ns, "logs", group)
    ku.job(kube, zoo.ns, "batch", group, backoffLimit=0)
    ku.bare_pod(kube, zoo.ns, "bare", node)
    ku.bare_pod(kube, zoo.ns, "scratch", node, volumes=[{"name": "t", "emptyDir": {}}])
    ku.bare_pod(kube, zoo.ns, "done", node)
    ku.bare_pod(kube, zoo.ns, "failed", node, volumes=[{"name": "t", "emptyDir": {}}])
    mirror = {"kubernetes.io/config.mirror": "hash", "kubernetes.io/config.source": "file"}
    ku.bare_pod(kube, zoo.ns, "static", node, annotations=mirror)
    ku.wait_running(kube, node, 9)
    set_phase(kube, zoo.ns, "done", "Succeeded")
    set_phase(kube, zoo.ns, "failed", "Failed")
    set_phase(kube, zoo.ns, pods_named(kube, node, "batch-")[0]["metadata"]["name"], "Succeeded")
    # A ReplicaSet's failed pod stays beside its replacement.
    set_phase(kube, zoo.ns, pods_named(kube, node, "flaky-")[0]["metadata"]["name"], "Failed")
    ku.wait_until(lambda: len(ku.running(pods_named(kube, node, "flaky-"))) == 1, 30, "flaky")
    ku.wait_until(lambda: all(not p["metadata"].get("finalizers") for p in pods_named(
        kube, node, "batch-")), 30, "the Job controller's finalizer removed")  # fmt: skip
    return zoo


def left_on(zoo: Zoo) -> Counter[str]:
    return Counter(kind(p) for p in ku.pods_on(zoo.kube, zoo.node))


FINISHED = Counter(
    {"done/Succeeded": 1, "failed/Failed": 1, "Job/Succeeded": 1, "ReplicaSet/Failed": 1}
)


def kubectl(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_finished_pods_kept_by_default_deleted_as_kubectl_does_on_request(
    cluster: Any, kube: Kube, admin_kubeconfig: str
) -> None:
    ours, theirs = make_zoo(cluster, kube), make_zoo(cluster, kube)
    assert left_on(ours) == left_on(theirs)
    # What kubectl would evict is what `--finished-pods delete` would.
    flags = ["--ignore-daemonsets", "--delete-emptydir-data", "--force"]
    plan = kubectl(cluster, "drain", ours.node, *flags, "--dry-run=client")
    assert plan.returncode == 0, plan.stderr
    would = {m for m in re.findall(rf"evicting pod {ours.ns}/(\S+)", plan.stdout)}
    kinds = {p["metadata"]["name"]: kind(p) for p in ku.pods_on(kube, ours.node)}
    res = ku.run_agent(
        "drain", "--node", ours.node, "--kubeconfig", admin_kubeconfig, "--dry-run",
        "--finished-pods", "delete",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert set(re.findall(rf"would evict: {ours.ns}/(\S+)", res.stdout)) == would
    assert Counter(kinds[n] for n in would) >= FINISHED

    # For real: kubectl on one zoo, the agent on the other, first with the default.
    ku.open_node(kube, ours.spare)
    ku.open_node(kube, theirs.spare)
    done = kubectl(cluster, "drain", theirs.node, *flags, "--timeout=90s")
    assert done.returncode == 0, done.stderr
    res = ku.run_agent("drain", "--node", ours.node, "--kubeconfig", admin_kubeconfig)
    assert res.returncode == 0, res.stderr
    assert "finished (Succeeded): 2, finished (Failed): 2" in res.stdout, res.stdout
    assert left_on(ours) == left_on(theirs) + FINISHED
    res = ku.run_agent(
        "drain", "--node", ours.node, "--kubeconfig", admin_kubeconfig, "--finished-pods", "delete"
    )
    assert res.returncode == 0, res.stderr
    assert (
        left_on(ours) == left_on(theirs) == Counter({"DaemonSet/Running": 1, "static/Running": 1})
    )


def test_finished_pods_flag_refuses_other_values() -> None:
    res = ku.run_agent("drain", "--node", "n1", "--finished-pods", "drop")
    assert res.returncode == 2
    assert res.stderr == (
        "nodeagent: error: --finished-pods: bad value 'drop' (one of: keep, delete)\n"
    )


# -- pods held on the node by finalizers ------------------------------------------------


def held_pod(kube: Kube, ns: str, name: str, node: str) -> JSON:
    pod = ku.bare_pod(kube, ns, name, node)
    kube.merge_patch(pods_path(ns, name), {"metadata": {"finalizers": [HOLD]}})
    return pod


def release(kube: Kube, ns: str, name: str) -> None:
    kube.merge_patch(pods_path(ns, name), {"metadata": {"finalizers": None}})


T0 = 1_800_000_000.0


def pod(
    phase: str = "Running",
    deleted_at: float | None = None,
    grace: int | None = None,
    finalizers: tuple[str, ...] = (),
) -> JSON:
    meta: JSON = {"name": "p", "namespace": "ns", "uid": "u"}
    if deleted_at is not None:
        meta["deletionTimestamp"] = api_stamp(deleted_at)
        meta["deletionGracePeriodSeconds"] = grace
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("obj", "now", "state"),
    [
        (None, T0, PodState.GONE),
        (pod(), T0, PodState.PRESENT),
        (pod("Succeeded"), T0, PodState.GONE),
        (pod("Failed", T0, 0), T0, PodState.GONE),  # the kubelet's last delete: going
        (pod("Running", T0, 30), T0 + 10, PodState.PRESENT),  # within its grace
        (pod("Running", T0, 30), T0 + 31, PodState.STUCK),  # no kubelet: past grace
        (pod("Running", T0, 30, (HOLD,)), T0 + 31, PodState.STUCK),  # still running
        (pod("Running", T0, 0, (HOLD,)), T0 + 1, PodState.PRESENT),  # a finalizer's owner
        (pod("Running", T0, 0, (HOLD,)), T0 + 31, PodState.HELD),  # may be just slow
        (pod("Failed", T0, 0, (HOLD,)), T0 + 10, PodState.PRESENT),
        (pod("Failed", T0, 0, (HOLD,)), T0 + 31, PodState.HELD),
        (pod("Succeeded", None, None, (HOLD,)), T0, PodState.GONE),  # finished on its own
    ],
)
def test_pod_state(obj: JSON | None, now: float, state: PodState) -> None:
    assert pod_state(obj, now, stuck_after=30) is state


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        (pod("Succeeded"), PodState.PRESENT),  # to be evicted, then waited for
        (pod("Failed", T0, 0), PodState.GONE),
        (pod("Failed", T0, 0, (HOLD,)), PodState.PRESENT),
        (pod(), PodState.PRESENT),
    ],
)
def test_pod_state_when_finished_pods_go(obj: JSON, state: PodState) -> None:
    assert pod_state(obj, T0 + 1, stuck_after=30, finished=FinishedPods.DELETE) is state


def test_pod_held_by_finalizer_is_left_not_evicted(cluster: Any, kube: Kube) -> None:
    """Past its grace the drain stops waiting for it, and says it is still there."""
    group, node, _ = ku.node_pair(cluster, kube, "held")
    ku.bare_pod(kube, group, "free", node)
    held_pod(kube, group, "held", node)
    ku.wait_running(kube, node, 2)
    try:
        events = EventRecorder(kube, node)
        result = cordon_then_drain(
            Drain(kube, node, DrainOptions(deadline=30, stuck_after=2), events)
        )
        events.flush()
        assert ku.exists(kube, pods_path(group, "held"))
    finally:
        release(kube, group, "held")
    assert result.outcome == "incomplete"
    assert int(result.exit_code) == 3
    assert [p.name for p in result.evicted] == ["free"]
    assert [(p.name, p.detail) for p in result.blocked] == [
        ("held", f"held by finalizers {HOLD} after its containers stopped")
    ]
    first = render(result).splitlines()[0]
    assert re.fullmatch(
        rf"node {node}: incomplete in [\d.]+s \(evicted 1, skipped 0, blocked 1, forced 0\)",
        first,
    ), first
    cond = outcome_condition("manual", result)
    assert (cond.status, cond.reason) == ("False", "Blocked")
    assert f"left: {group}/held (held by finalizers {HOLD} after" in cond.message
    reasons = {e["reason"]: e["message"] for e in ku.node_events(kube, node)}
    assert HOLD in reasons["DrainIncomplete"]


def test_cli_names_the_finalizers_left_at_the_deadline(
    cluster: Any, kube: Kube, admin_kubeconfig: str
) -> None:
    group, node, _ = ku.node_pair(cluster, kube, "held")
    held_pod(kube, group, "held", node)
    ku.wait_running(kube, node, 1)
    try:
        res = ku.run_agent(
            "drain", "--node", node, "--kubeconfig", admin_kubeconfig, "--deadline", "3s",
            "--force-after-deadline",
        )  # fmt: skip
    finally:
        release(kube, group, "held")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "timed-out" in res.stdout and "blocked 1, forced 0" in res.stdout, res.stdout
    assert f"blocked: {group}/held (" in res.stdout and f"finalizers {HOLD}" in res.stdout


def test_node_condition_names_the_finalizers_left(
    cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """The agent's own drains (here an evacuation) report what is left on the Node."""
    group, node, _ = ku.node_pair(cluster, kube, "held")
    held_pod(kube, group, "held", node)
    ku.wait_running(kube, node, 1)
    agent = AgentProcess.start(tmp_path, admin_kubeconfig, node, {"drain": {"deadline": "3s"}})
    try:
        taint = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}
        kube.merge_patch(node_path(node), {"spec": {"taints": [taint]}})
        cond = ku.wait_until(
            lambda: (lambda c: c if c and c["reason"] == "Blocked" else None)(
                conditions.find(ku.node(kube, node), conditions.DRAINED)
            ),
            30,
            "NodeAgentDrained Blocked",
        )
    finally:
        agent.stop(signal.SIGKILL)
        release(kube, group, "held")
    assert cond["status"] == "False"
    assert f"left: {group}/held (" in cond["message"] and f"finalizers {HOLD}" in cond["message"]


def pod_event_reasons(kube: Kube, ns: str) -> Counter[str]:
    items = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return Counter(e["reason"] for e in items if e["involvedObject"]["kind"] == "Pod")


def test_only_a_lasting_refusal_gets_an_eviction_blocked_event(cluster: Any, kube: Kube) -> None:
    """A PDB letting pods go one at a time refuses each pod until its turn, the last of
    8 for longer than BLOCKED_EVENT_AFTER: while the budget moves, those pods get their
    Evicted Event only; a pod whose budget lets nothing go gets EvictionBlocked too."""
    group, node, spare = ku.node_pair(cluster, kube, "eb")
    ku.deployment(
        kube, group, "brief", group, 8, annotations={"sim.nodeagent.io/ready-delay": "1s"}
    )
    ku.pdb(kube, group, "brief", {"app": "brief"}, maxUnavailable=1)
    ku.wait_running(kube, node, 8)
    ku.wait_pdb_ready(kube, group, "brief")
    ku.open_node(kube, spare)
    events = EventRecorder(kube, node)
    blocked = metrics.enable().get_sample_value("nodeagent_evictions_total", {"result": "blocked"})
    result = cordon_then_drain(Drain(kube, node, DrainOptions(deadline=60), events))
    events.flush(10)
    assert result.outcome == "drained"
    assert result.seconds > BLOCKED_EVENT_AFTER + 1, "too short a queue to prove anything"
    now = metrics.enable().get_sample_value("nodeagent_evictions_total", {"result": "blocked"})
    assert (now or 0) > (blocked or 0), "no refusal: the test proves nothing"
    reasons = pod_event_reasons(kube, group)
    assert reasons["Evicted"] == 8 and reasons["EvictionBlocked"] == 0, reasons

    other, node2, _spare2 = ku.node_pair(cluster, kube, "eb")
    ku.deployment(kube, other, "quorum", other, 1)
    ku.pdb(kube, other, "quorum", {"app": "quorum"}, minAvailable=1)  # never allows
    ku.wait_running(kube, node2, 1)
    ku.wait_pdb_ready(kube, other, "quorum")
    events = EventRecorder(kube, node2)
    result = cordon_then_drain(Drain(kube, node2, DrainOptions(deadline=12), events))
    events.flush(10)
    assert result.outcome == "timed-out"
    assert pod_event_reasons(kube, other)["EvictionBlocked"] == 1


# The status the kubelet posts when its graceful node shutdown has killed a pod: the
# phase and the condition in one write (it holds the condition back until then).
KILLED_AT_SHUTDOWN = {
    "phase": "Failed",
    "reason": "Terminated",
    "message": "Pod was terminated in response to imminent node shutdown.",
    "conditions": [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": "Pod was terminated in response to imminent node shutdown.",
        }
    ],
}


@dataclass
class Retrying:
    """A drain retrying the refused eviction of the bare pod `solo`, its pod watch
    through a relay the test can blackhole."""

    group: str
    node: str
    uid: str
    proxy: Proxy
    drain: Drain
    results: list[DrainResult]
    runner: threading.Thread


def retrying_drain(
    cluster: Any, kube: Kube, tmp_path: Path, prefix: str, as_kubelet: bool = False
) -> Retrying:
    """`as_kubelet`: the drain runs as the node's kubelet, which cannot read PDBs (so
    nothing but its own bookkeeping can finish an eviction the budget granted)."""
    group, node, _spare = ku.node_pair(cluster, kube, prefix)
    ku.bare_pod(kube, group, "solo", node)
    kube.merge_patch(pods_path(group, "solo"), {"metadata": {"labels": {"app": "solo"}}})
    uid = ku.wait_running(kube, node, 1)[0]["metadata"]["uid"]
    ku.pdb(kube, group, "solo", {"app": "solo"}, minAvailable=1)  # allows nothing
    ku.wait_pdb_ready(kube, group, "solo")
    kubeconfig = Path(cluster.workdir) / "admin.kubeconfig"
    if as_kubelet:
        kubeconfig = cluster.mint_node_kubeconfig(node, tmp_path / "kubelet.kubeconfig")
    port = urlsplit(kube.host).port
    assert port is not None
    proxy = Proxy(port)
    refused = threading.Event()

    def progress(message: str) -> None:
        if "solo: eviction blocked" in message:
            refused.set()

    pods = node_pods(ku.via_proxy(proxy.port, str(kubeconfig), tmp_path), node)
    client = Kube.from_kubeconfig(str(kubeconfig))
    drain = Drain(client, node, DrainOptions(deadline=60), progress=progress, pods=pods)
    results: list[DrainResult] = []
    # As the CLI and the daemon do: the kubelet's identity may not change its Node's taints
    # (NodeRestriction), so its fence is the cordon alone.
    taint = not as_kubelet
    runner = threading.Thread(
        target=lambda: results.append(cordon_then_drain(drain, taint=taint)), daemon=True
    )
    runner.start()
    assert refused.wait(20), "the eviction was never refused: the test proves nothing"
    return Retrying(group, node, uid, proxy, drain, results, runner)


def test_a_pod_that_finishes_while_its_eviction_is_retried_is_kept(
    cluster: Any, kube: Kube, tmp_path: Path
) -> None:
    """The kubelet kills a pod (node shutdown) while the drain retries its refused
    eviction, and the drain's watch has not shown it yet. The server lets an eviction of
    a finished pod delete it, PDB or not; the drain keeps finished pods, so its evictions
    carry the resourceVersion they were judged on, and a 409 keeps the pod."""
    r = retrying_drain(cluster, kube, tmp_path, "fin")
    path = pods_path(r.group, "solo")
    try:
        r.proxy.cut("blackhole")  # the drain's watch sees nothing from here on
        kube.merge_patch(path + "/status", {"status": KILLED_AT_SHUTDOWN})
        # The PDB's status changes with the pod, which wakes the refused eviction's retry
        # at once (its backoff is 1-2 s anyway): one granted now deletes the pod.
        end = time.monotonic() + 8
        while time.monotonic() < end:
            assert ku.exists(kube, path), "the finished pod was deleted"
            time.sleep(0.2)
    finally:
        r.proxy.cut("relay")  # the hung watch fails, the next one is answered
    r.runner.join(60)
    r.proxy.close()
    assert r.results and r.results[0].outcome is DrainOutcome.DRAINED, r.results
    assert kube.get(path)["status"]["phase"] == "Failed"


def test_an_eviction_granted_as_the_pod_changed_is_carried_out(
    cluster: Any, kube: Kube, tmp_path: Path
) -> None:
    """The budget frees up while the drain's copy of a Ready pod is stale. The server
    spends the budget before it checks the resourceVersion and answers 409 with nothing
    else written; retried, the eviction would be refused for the 2 minutes the budget
    counts the pod as gone. The drain sees from the next version that the pod was Ready
    throughout, and carries the eviction out itself: a delete with UID and version."""
    r = retrying_drain(cluster, kube, tmp_path, "gra", as_kubelet=True)
    path = pods_path(r.group, "solo")
    pdb_path = f"/apis/policy/v1/namespaces/{r.group}/poddisruptionbudgets/solo"
    try:
        r.proxy.cut("blackhole")
        kube.merge_patch(path, {"metadata": {"labels": {"changed": "yes"}}})
        kube.merge_patch(pdb_path, {"spec": {"minAvailable": 0}})

        def spent() -> bool:
            status = kube.get(pdb_path).get("status") or {}
            return "solo" in (status.get("disruptedPods") or {})

        # The retries are paced by a 1-10 s backoff: PDBs are not readable to the kubelet.
        ku.wait_until(spent, 30, "the stale eviction to spend the budget")
        assert ku.exists(kube, path), "the stale eviction deleted the pod: no 409"
    finally:
        r.proxy.cut("relay")
    r.runner.join(60)
    r.proxy.close()
    assert r.results and r.results[0].outcome is DrainOutcome.DRAINED, r.results
    assert not ku.exists(kube, path)


def test_a_pod_bound_as_the_node_is_cordoned_is_evicted(cluster: Any, kube: Kube) -> None:
    """kubectl lists a node's pods after its cordon, and so does the drain: a pod bound
    while the cordon is landing is in the plan, evicted, and not left behind a drain that
    says `drained`. (The pod here is bound by name just after the cordon, which the cordon
    does not stop, before the drain plans.)"""
    group, node, spare = ku.node_pair(cluster, kube, "late")
    ku.open_node(kube, spare)
    ku.bare_pod(kube, group, "early", node)
    ku.wait_running(kube, node, 1)
    pods = node_pods(kube, node)

    def progress(message: str) -> None:
        if message.startswith("cordoned node"):
            ku.bare_pod(kube, group, "late", node)
            names = lambda: {p["metadata"]["name"] for p in pods.snapshot()}  # noqa: E731
            ku.wait_until(lambda: "late" in names(), 10, "the drain's watch to show it")

    result = cordon_then_drain(
        Drain(kube, node, DrainOptions(deadline=30), progress=progress, pods=pods)
    )
    assert result.outcome is DrainOutcome.DRAINED, result
    assert sorted(p.name for p in result.evicted) == ["early", "late"]
    ku.wait_until(lambda: not ku.pods_on(kube, node), 10, "the node empty")


def test_the_engine_never_writes_the_fence(cluster: Any, kube: Kube) -> None:
    """The drain evicts from a node it is handed; the cordon and its marker are the
    executor's (nodeagent/departure/executor.py), as kubectl cordons before it drains."""
    group, node, spare = ku.node_pair(cluster, kube, "nofence")
    ku.open_node(kube, spare)
    ku.bare_pod(kube, group, "solo", node)
    ku.wait_running(kube, node, 1)
    result = Drain(kube, node, DrainOptions(deadline=30)).run()
    assert result.outcome is DrainOutcome.DRAINED and not result.cordoned, result
    after = ku.node(kube, node)
    assert not after["spec"].get("unschedulable")
    assert not any(k.startswith("nodeagent.io/") for k in after["metadata"].get("annotations", {}))


def test_a_cordon_on_a_node_changed_since_it_was_read_writes_nothing(
    cluster: Any, kube: Kube
) -> None:
    """The Node a decision was made on is the cordon's precondition: changed since, the
    cordon says so (the worker reads it and decides again) and nothing is written; the
    one-shot form, which decided nothing on it, reads it itself and drains."""
    _group, node, _spare = ku.node_pair(cluster, kube, "stale")
    seen = ku.node(kube, node)
    kube.merge_patch(node_path(node), {"metadata": {"labels": {"moved": "on"}}})
    with pytest.raises(NodeChanged):
        cordon_then_drain(Drain(kube, node, DrainOptions(deadline=10)), seen)
    assert not ku.node(kube, node)["spec"].get("unschedulable")
    result = cordon_then_drain(Drain(kube, node, DrainOptions(deadline=10)))
    assert result.outcome is DrainOutcome.DRAINED and result.cordoned, result
    assert ku.node(kube, node)["metadata"]["annotations"][CORDONED_BY] == "nodeagent"


def _priority_pod(**spec: Any) -> JSON:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    "spec,killed",
    [
        ({}, True),  # no priority: the first group
        ({"priority": 1_000_000}, True),  # a high user priority is still below critical
        ({"priority": 2_000_000_000, "priorityClassName": "system-cluster-critical"}, False),
        ({"priority": 2_000_001_000, "priorityClassName": "system-node-critical"}, False),
        ({"priorityClassName": "system-node-critical"}, False),  # the class alone says so
    ],
)
def test_which_pods_the_kubelets_shutdown_kills_at_once(spec: JSON, killed: bool) -> None:
    assert podfilter.killed_at_once_by_kubelet(_priority_pod(**spec)) is killed


def test_the_condition_names_each_pod_deleted_past_its_pdb() -> None:
    result = DrainResult("n", seconds=4.0)
    result.deleted_for_kubelet = [PodOutcome("ns", "a", "u1"), PodOutcome("ns", "b", "u2")]
    cond = outcome_condition("poweroff", result)
    assert (cond.status, cond.reason) == ("True", "Drained")
    assert cond.message == (
        "Drained for poweroff in 4.0s; 2 pod(s) deleted past their PDBs, the kubelet's "
        "graceful shutdown stopping them: ns/a, ns/b"
    )
