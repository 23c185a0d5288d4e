"""`nodeagent drain` / `uncordon` against a real API server, controllers and scheduler."""

from __future__ import annotations

import itertools
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.drainphases import own_phases
from hack.localcluster.kubelet_sim import TERMINATION_DELAY
from nodeagent import metrics
from nodeagent.context import Context
from nodeagent.departure.executor import cordon_then_drain
from nodeagent.drain.engine import Drain, DrainOptions, DrainResult, PodOutcome
from nodeagent.drain.evictedevents import COMBINED, PER_NAMESPACE
from nodeagent.drain.eviction import capped_grace
from nodeagent.drain.phases import Phase
from nodeagent.drain.summary import render
from nodeagent.fence.marker import (
    AGENT,
    BOOT_ID,
    CORDONED_BY,
    DRAIN_REASON,
    DRAIN_RESULT,
    DRAIN_STARTED_AT,
    EXCLUDE_LB_LABEL,
    EXCLUDED_LB,
    excludes_lb,
)
from nodeagent.kube.client import JSON, Kube, node_path, pods_path
from nodeagent.report.events import EventRecorder
from nodeagent.types import DrainOutcome

# How long the drain's Events may take to reach the API server after it returns.
EVENTS_SENT = 30.0


@dataclass
class Pair:
    """Node `a` holds the workloads; node `b` takes replacements once opened."""

    kube: Kube
    group: str
    a: str
    b: str
    ns: str

    def open_b(self) -> None:
        ku.open_node(self.kube, self.b)

    def drain(self, **opts: Any) -> DrainResult:
        options = DrainOptions(**opts)
        events = EventRecorder(self.kube, self.a)
        result = cordon_then_drain(Drain(self.kube, self.a, options, events))
        # Every Event sent before a test reads them: the recorder's senders post in the
        # background, behind the drain by more than flush's default 2 s on a loaded
        # machine (a pod's DeletedForKubeletShutdown was missing from the list).
        events.flush(EVENTS_SENT)
        assert events.pending == 0, "Events still queued after the drain"
        return result


@pytest.fixture
def pair(cluster: Any, kube: Kube) -> Pair:
    group, a, b = ku.node_pair(cluster, kube, "g")
    return Pair(kube, group, a, b, group)


def agent(pair: Pair, *args: str, kubeconfig: str) -> Any:
    return ku.run_agent(*args, "--node", pair.a, "--kubeconfig", kubeconfig)


def test_drain_evicts_workloads_and_leaves_daemonsets(pair: Pair, admin_kubeconfig: str) -> None:
    kube = pair.kube
    ku.deployment(kube, pair.ns, "web", pair.group, 3)
    ku.daemonset(kube, pair.ns, "logs", pair.group)
    ku.bare_pod(kube, pair.ns, "scratch", pair.a, volumes=[{"name": "tmp", "emptyDir": {}}])
    ku.wait_running(kube, pair.a, 5)
    pair.open_b()

    res = agent(pair, "drain", "--deadline", "60s", kubeconfig=admin_kubeconfig)

    assert res.returncode == 0, res.stderr + res.stdout
    assert "drained" in res.stdout
    assert "emptyDir data will be lost" in res.stdout
    assert "DaemonSet-managed: 1" in res.stdout
    # Where the time went, every phase named once, in the order the drain went through them.
    assert [name for name, _ in own_phases(res.stdout)] == [p.value for p in Phase]
    left = ku.running(ku.pods_on(kube, pair.a))
    assert [p["metadata"]["name"] for p in left] == [
        p["metadata"]["name"] for p in left if p["metadata"]["name"].startswith("logs-")
    ]
    assert len(left) == 1
    ku.wait_running(kube, pair.b, 4)  # 3 replacements + the DaemonSet pod on b
    node = ku.node(kube, pair.a)
    ann = node["metadata"]["annotations"]
    assert node["spec"]["unschedulable"] is True
    assert ann[CORDONED_BY] == "nodeagent"
    assert ann[DRAIN_REASON] == "manual"
    assert ann[DRAIN_STARTED_AT].endswith("Z")
    assert ann[BOOT_ID] == node["status"]["nodeInfo"]["bootID"] != ""
    reasons = {e["reason"] for e in ku.node_events(kube, pair.a)}
    assert {"Cordoned", "DrainStarted", "Drained"} <= reasons


def test_finished_and_mirror_pods_are_skipped(pair: Pair) -> None:
    kube = pair.kube
    done = ku.bare_pod(kube, pair.ns, "done", pair.a)
    ku.wait_running(kube, pair.a, 1)
    kube.merge_patch(pods_path(pair.ns, "done") + "/status", {"status": {"phase": "Succeeded"}})
    mirror = {"kubernetes.io/config.mirror": "hash", "kubernetes.io/config.source": "file"}
    ku.bare_pod(kube, pair.ns, "static", pair.a, annotations=mirror)

    result = pair.drain(deadline=20)

    assert result.outcome == "drained"
    assert {(p.name, p.detail) for p in result.skipped} == {
        ("done", "finished (Succeeded)"),
        ("static", "static (mirror) pod"),
    }
    assert result.evicted == []
    assert ku.exists(kube, pods_path(pair.ns, "done"))
    assert done["metadata"]["uid"]


def test_dry_run_mutates_nothing(pair: Pair, admin_kubeconfig: str) -> None:
    kube = pair.kube
    ku.deployment(kube, pair.ns, "web", pair.group, 2)
    ku.wait_running(kube, pair.a, 2)
    before = {
        p["metadata"]["uid"]: p["metadata"]["resourceVersion"] for p in ku.pods_on(kube, pair.a)
    }
    node_rv = ku.node(kube, pair.a)["metadata"]["resourceVersion"]

    res = agent(pair, "drain", "--dry-run", kubeconfig=admin_kubeconfig)

    assert res.returncode == 0, res.stderr
    assert res.stdout.count("would evict") == 2
    after = {
        p["metadata"]["uid"]: p["metadata"]["resourceVersion"] for p in ku.pods_on(kube, pair.a)
    }
    assert after == before
    node = ku.node(kube, pair.a)
    # The simulated kubelet heartbeats status; the spec and the annotations must not move.
    assert not node["spec"].get("unschedulable")
    assert CORDONED_BY not in node["metadata"].get("annotations", {})
    assert ku.node_events(kube, pair.a) == []
    assert node_rv


def test_pdb_paces_the_drain_until_replacements_are_ready(pair: Pair) -> None:
    kube = pair.kube
    ku.deployment(
        kube, pair.ns, "db", pair.group, 4, annotations={"sim.nodeagent.io/ready-delay": "1s"}
    )
    ku.pdb(kube, pair.ns, "db", {"app": "db"}, maxUnavailable=1)
    ku.wait_running(kube, pair.a, 4)
    ku.wait_pdb_ready(kube, pair.ns, "db")
    pair.open_b()

    result = pair.drain(deadline=60)

    assert result.outcome == "drained", result
    times = sorted(p.evicted_at or 0 for p in result.evicted)
    assert len(times) == 4
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # One at a time: each eviction waits for a replacement to become Ready (~1 s).
    assert min(gaps) > 0.7, gaps
    assert max(gaps) < 5, gaps  # retried on the PDB's change, not on a long fixed sleep


def test_pdb_that_never_allows_hits_the_deadline(pair: Pair, admin_kubeconfig: str) -> None:
    kube = pair.kube
    ku.deployment(kube, pair.ns, "quorum", pair.group, 2)
    ku.pdb(kube, pair.ns, "quorum-pdb", {"app": "quorum"}, minAvailable=2)
    ku.wait_running(kube, pair.a, 2)
    ku.wait_pdb_ready(kube, pair.ns, "quorum-pdb")

    start = time.monotonic()
    res = agent(pair, "drain", "--deadline", "4s", kubeconfig=admin_kubeconfig)
    took = time.monotonic() - start

    assert res.returncode == 3, res.stderr + res.stdout
    assert took < 15
    assert "timed-out" in res.stdout
    assert f"blocking PodDisruptionBudgets: {pair.ns}/quorum-pdb" in res.stdout
    assert len(ku.running(ku.pods_on(kube, pair.a))) == 2
    timed_out = [e for e in ku.node_events(kube, pair.a) if e["reason"] == "DrainTimedOut"]
    assert timed_out and "quorum-pdb" in timed_out[0]["message"]


def test_a_blocked_pod_carries_its_pdb_as_data(pair: Pair) -> None:
    """The PDB refusing a pod is a field of its outcome; the words stay the same."""
    kube = pair.kube
    ku.deployment(kube, pair.ns, "quorum", pair.group, 2)
    ku.pdb(kube, pair.ns, "quorum-pdb", {"app": "quorum"}, minAvailable=2)
    ku.wait_running(kube, pair.a, 2)
    ku.wait_pdb_ready(kube, pair.ns, "quorum-pdb")

    result = pair.drain(deadline=3)

    pdb = f"{pair.ns}/quorum-pdb"
    assert result.outcome is DrainOutcome.TIMED_OUT and result.outcome == "timed-out"
    assert [p.pdbs for p in result.blocked] == [(pdb,)] * 2
    assert all(p.detail.startswith(f"PDB {pdb}: ") for p in result.blocked), result.blocked
    assert result.blocking_pdbs == [pdb]
    assert f"  blocking PodDisruptionBudgets: {pdb}\n" in render(result) + "\n"


def evictions(result: str) -> float:
    return metrics.enable().get_sample_value("nodeagent_evictions_total", {"result": result}) or 0


def test_evictions_are_counted(pair: Pair) -> None:
    """nodeagent_evictions_total{result}: each accepted eviction, and each pod's first
    refusal in a drain."""
    kube = pair.kube
    ku.deployment(kube, pair.ns, "web", pair.group, 3)
    ku.deployment(kube, pair.ns, "quorum", pair.group, 1)
    ku.pdb(kube, pair.ns, "quorum-pdb", {"app": "quorum"}, minAvailable=1)
    ku.wait_running(kube, pair.a, 4)
    ku.wait_pdb_ready(kube, pair.ns, "quorum-pdb")
    pair.open_b()
    accepted, blocked = evictions("accepted"), evictions("blocked")

    result = pair.drain(deadline=4)

    assert (len(result.evicted), len(result.blocked)) == (3, 1), result
    assert evictions("accepted") - accepted == 3
    assert evictions("blocked") - blocked == 1


def test_a_drain_ends_with_its_context(pair: Pair) -> None:
    """The context's deadline bounds the drain when it comes before the options'; a
    cancelled context stops the drain where it waits (here for a PDB to change)."""
    kube = pair.kube
    ku.deployment(kube, pair.ns, "quorum", pair.group, 1)
    ku.pdb(kube, pair.ns, "quorum-pdb", {"app": "quorum"}, minAvailable=1)
    ku.wait_running(kube, pair.a, 1)
    ku.wait_pdb_ready(kube, pair.ns, "quorum-pdb")
    options = DrainOptions(deadline=120)

    timed = cordon_then_drain(
        Drain(kube, pair.a, options), ctx=Context.background().with_timeout(3)
    )
    assert timed.outcome is DrainOutcome.TIMED_OUT and timed.seconds < 30, timed

    ctx = Context.background()
    blocked = threading.Event()
    drain = Drain(kube, pair.a, options, progress=lambda m: "blocked" in m and blocked.set())
    results: list[DrainResult] = []
    worker = threading.Thread(
        target=lambda: results.append(cordon_then_drain(drain, ctx=ctx.with_timeout(120)))
    )
    worker.start()
    assert blocked.wait(30), "the PDB never refused the eviction"
    ctx.cancel()
    worker.join(30)
    assert results and results[0].outcome is DrainOutcome.CANCELLED, results
    assert len(ku.running(ku.pods_on(kube, pair.a))) == 1


def test_blocking_pdbs_come_from_the_outcomes_not_their_words() -> None:
    said = PodOutcome("ns", "a", "u1", detail="PDB ns/said-only: words", pdbs=())
    held = PodOutcome("ns", "b", "u2", detail="anything at all", pdbs=("ns/z", "ns/y"))
    again = PodOutcome("ns", "c", "u3", pdbs=("ns/y",))
    assert DrainResult("n", blocked=[said, held, again]).blocking_pdbs == ["ns/y", "ns/z"]
    held.note("eviction failed: 500")  # new words without a PDB: it no longer names one
    assert held.pdbs == () and DrainResult("n", blocked=[held]).blocking_pdbs == []


def test_force_after_deadline_deletes_what_is_left(pair: Pair) -> None:
    kube = pair.kube
    ku.deployment(kube, pair.ns, "quorum", pair.group, 1)
    ku.pdb(kube, pair.ns, "quorum-pdb", {"app": "quorum"}, minAvailable=1)
    ku.wait_running(kube, pair.a, 1)
    ku.wait_pdb_ready(kube, pair.ns, "quorum-pdb")

    result = pair.drain(deadline=2, force_after_deadline=True)

    assert result.outcome == "forced"
    assert len(result.forced) == 1 and "PDB" in result.forced[0].detail
    ku.wait_until(lambda: not ku.running(ku.pods_on(kube, pair.a)), 10, "forced pod gone")


def test_multiple_pdbs_are_reported(pair: Pair) -> None:
    kube = pair.kube
    ku.deployment(kube, pair.ns, "web", pair.group, 1)
    ku.pdb(kube, pair.ns, "one", {"app": "web"}, maxUnavailable=1)
    ku.pdb(kube, pair.ns, "two", {"app": "web"}, maxUnavailable=1)
    ku.wait_running(kube, pair.a, 1)

    result = pair.drain(deadline=3)

    assert result.outcome == "timed-out"
    assert "MultiplePDBs" in result.blocked[0].detail


def test_do_not_disrupt_pods_wait_for_the_ceiling(pair: Pair) -> None:
    kube = pair.kube
    busy = {"karpenter.sh/do-not-disrupt": "true"}
    ku.bare_pod(kube, pair.ns, "query", pair.a, annotations=busy)
    ku.bare_pod(kube, pair.ns, "finishes", pair.a, annotations=busy)
    ku.bare_pod(kube, pair.ns, "plain", pair.a)
    ku.wait_running(kube, pair.a, 3)

    def finish_soon() -> None:
        time.sleep(0.5)
        kube.merge_patch(
            pods_path(pair.ns, "finishes") + "/status", {"status": {"phase": "Succeeded"}}
        )

    import threading

    threading.Thread(target=finish_soon, daemon=True).start()
    start = time.monotonic()
    result = pair.drain(deadline=30, do_not_disrupt_ceiling=2.5)

    assert result.outcome == "drained"
    evicted = {p.name: (p.evicted_at or 0) - start for p in result.evicted}
    assert set(evicted) == {"query", "plain"}  # "finishes" ended on its own: never evicted
    assert evicted["plain"] < 1.0
    assert 2.4 <= evicted["query"] < 4.0


def test_priority_order_lowest_first_critical_last(pair: Pair, kube: Kube) -> None:
    for name, value in (("low", 100), ("high", 10000)):
        ku.priority_class(kube, f"{pair.group}-{name}", value)
    ku.bare_pod(kube, pair.ns, "high", pair.a, priorityClassName=f"{pair.group}-high")
    ku.bare_pod(kube, pair.ns, "low", pair.a, priorityClassName=f"{pair.group}-low")
    ku.bare_pod(
        kube,
        "kube-system",
        f"{pair.group}-dns",
        pair.a,
        priorityClassName="system-cluster-critical",
    )
    ku.bare_pod(kube, pair.ns, "default", pair.a)
    ku.wait_running(kube, pair.a, 4)

    # A tier waits for the one before it only until its share of the deadline: a generous
    # deadline keeps a loaded machine from starting two tiers together.
    result = pair.drain(deadline=120)

    order = [p.name for p in sorted(result.evicted, key=lambda p: p.evicted_at or 0)]
    assert order == ["default", "low", "high", f"{pair.group}-dns"]


def test_pods_the_kubelets_shutdown_stops_are_deleted_past_their_pdb(pair: Pair) -> None:
    """With the kubelet's graceful shutdown killing the node's ordinary pods (logind
    announced it while the kubelet held its lock), a budget that counts them healthy
    refuses their eviction until the kubelet reports them gone, and they stay ready
    endpoints meanwhile: the drain deletes them at once and says so pod by pod. A pod its
    budget lets go is evicted, as ever; the critical pod the kubelet stops last goes only
    after the others."""
    kube = pair.kube
    ku.deployment(kube, pair.ns, "quorum", pair.group, 2)
    ku.pdb(kube, pair.ns, "quorum-pdb", {"app": "quorum"}, minAvailable=2)
    ku.deployment(kube, pair.ns, "web", pair.group, 1)
    dns = f"{pair.group}-dns"
    ku.bare_pod(kube, "kube-system", dns, pair.a, priorityClassName="system-cluster-critical")
    ku.wait_running(kube, pair.a, 4)
    ku.wait_pdb_ready(kube, pair.ns, "quorum-pdb")
    names = {
        p["metadata"]["name"]: p["metadata"].get("labels", {}) for p in ku.pods_on(kube, pair.a)
    }
    quorum = sorted(n for n, labels in names.items() if labels.get("app") == "quorum")
    (web,) = [n for n, labels in names.items() if labels.get("app") == "web"]
    counted = evictions("kubelet-shutdown")

    result = pair.drain(deadline=30, kubelet_kills=True)

    assert result.outcome is DrainOutcome.DRAINED, render(result)
    assert sorted(p.name for p in result.deleted_for_kubelet) == quorum
    assert sorted(p.name for p in result.evicted) == sorted([web, dns])
    went = {p.name: p.evicted_at or 0 for p in result.deleted_for_kubelet + result.evicted}
    assert went[dns] > max(went[name] for name in [*quorum, web])
    assert evictions("kubelet-shutdown") - counted == 2
    text = render(result)
    assert "deleted for the kubelet's shutdown 2," in text
    pdb = f"{pair.ns}/quorum-pdb"
    for name in quorum:
        assert (
            "deleted past its PDB (the kubelet's graceful shutdown was stopping it): "
            f"{pair.ns}/{name} (eviction refused: PDB {pdb})"
        ) in text
    query = {"fieldSelector": "reason=DeletedForKubeletShutdown,source=nodeagent"}
    events = kube.request("GET", f"/api/v1/namespaces/{pair.ns}/events", query=query)["items"]
    assert sorted(e["involvedObject"]["name"] for e in events) == quorum
    assert all(f"its eviction refused (PDB {pdb})" in e["message"] for e in events)


def test_uncordon_undoes_only_the_agents_cordon(pair: Pair, admin_kubeconfig: str) -> None:
    kube = pair.kube
    assert pair.drain(deadline=10).outcome == "drained"

    res = agent(pair, "uncordon", kubeconfig=admin_kubeconfig)

    assert res.returncode == 0, res.stderr
    node = ku.node(kube, pair.a)
    assert not node["spec"].get("unschedulable")
    assert not any(k.startswith("nodeagent.io/") for k in node["metadata"].get("annotations", {}))
    assert "Uncordoned" in {e["reason"] for e in ku.node_events(kube, pair.a)}


def test_uncordon_refuses_a_node_a_person_cordoned(pair: Pair, admin_kubeconfig: str) -> None:
    kube = pair.kube
    kube.merge_patch(node_path(pair.a), {"spec": {"unschedulable": True}})

    res = agent(pair, "uncordon", kubeconfig=admin_kubeconfig)

    assert res.returncode == 4
    assert "cordoned by someone else" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert ku.node(kube, pair.a)["spec"]["unschedulable"] is True
    forced = agent(pair, "uncordon", "--force", kubeconfig=admin_kubeconfig)
    assert forced.returncode == 0
    assert not ku.node(kube, pair.a)["spec"].get("unschedulable")


def test_drain_keeps_a_persons_cordon_unclaimed(pair: Pair) -> None:
    kube = pair.kube
    kube.merge_patch(node_path(pair.a), {"spec": {"unschedulable": True}})
    result = pair.drain(deadline=10)
    assert result.outcome == "drained" and result.cordoned is False
    ann = ku.node(kube, pair.a)["metadata"].get("annotations", {})
    assert CORDONED_BY not in ann
    # The drain is recorded beside the person's cordon, without claiming it.
    assert ann[DRAIN_REASON] == "manual" and ann[DRAIN_RESULT] == "drained"


def test_restricted_identity_gets_a_one_line_403(pair: Pair, cluster: Any, tmp_path: Any) -> None:
    kc = cluster.mint_kubeconfig("viewer", [], tmp_path / "viewer.kubeconfig")
    rv = ku.node(pair.kube, pair.a)["metadata"]["resourceVersion"]
    start = time.monotonic()
    res = agent(pair, "drain", kubeconfig=str(kc))
    assert res.returncode == 1
    assert time.monotonic() - start < 10
    assert re.fullmatch(r"nodeagent: error: .*forbidden.*\n", res.stderr), res.stderr
    node = ku.node(pair.kube, pair.a)
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["resourceVersion"] == rv or CORDONED_BY not in node["metadata"].get(
        "annotations", {}
    )


def test_missing_node_is_a_one_line_error(admin_kubeconfig: str) -> None:
    res = ku.run_agent("drain", "--node", "no-such-node", "--kubeconfig", admin_kubeconfig)
    assert res.returncode == 1
    assert res.stderr == 'nodeagent: error: node "no-such-node" not found\n'


def test_missing_kubeconfig_is_a_one_line_error(tmp_path: Any) -> None:
    res = ku.run_agent("drain", "--node", "x", "--kubeconfig", str(tmp_path / "nope"))
    assert res.returncode == 2
    assert res.stderr == f"nodeagent: error: kubeconfig {tmp_path / 'nope'}: no such file\n"


def test_api_server_down_fails_fast(pair: Pair, cluster: Any, admin_kubeconfig: str) -> None:
    cluster.stop_apiserver()
    try:
        start = time.monotonic()
        res = agent(pair, "drain", kubeconfig=admin_kubeconfig)
        took = time.monotonic() - start
    finally:
        cluster.start_apiserver()
    assert res.returncode == 1
    assert took < 10
    assert re.fullmatch(r"nodeagent: error: API server \S+ unreachable: .*\n", res.stderr), (
        res.stderr
    )
    ku.wait_until(lambda: ku.node(pair.kube, pair.a), 30, "API server back")
    assert not ku.node(pair.kube, pair.a)["spec"].get("unschedulable")


def test_shipped_cluster_role_is_enough_to_drain(pair: Pair, cluster: Any, tmp_path: Any) -> None:
    import yaml

    paths = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
    with open("packaging/rbac.yaml") as fh:
        for doc in yaml.safe_load_all(fh):
            doc["metadata"]["name"] += f"-{pair.group}"
            if doc["kind"] == "ClusterRoleBinding":
                doc["roleRef"]["name"] += f"-{pair.group}"
            pair.kube.post(f"/apis/rbac.authorization.k8s.io/v1/{paths[doc['kind']]}", doc)
    kc = cluster.mint_kubeconfig(
        f"system:nodeagent:{pair.a}", ["nodeagent:agents"], tmp_path / "agent.kubeconfig"
    )
    ku.deployment(pair.kube, pair.ns, "web", pair.group, 2)
    ku.pdb(pair.kube, pair.ns, "web", {"app": "web"}, maxUnavailable=1)
    ku.wait_running(pair.kube, pair.a, 2)
    ku.wait_pdb_ready(pair.kube, pair.ns, "web")
    pair.open_b()

    res = agent(pair, "drain", "--deadline", "60s", kubeconfig=str(kc))

    assert res.returncode == 0, res.stderr + res.stdout
    assert "evicted 2" in res.stdout
    assert not ku.running(ku.pods_on(pair.kube, pair.a))


@pytest.mark.parametrize(
    ("own", "left", "given"),
    [
        (30, 100.0, None),  # fits: its own grace
        (30, 30.0, None),  # exactly fits
        (300, 12.7, 12),  # cut to the whole seconds left
        (300, 0.2, 1),  # never 0 (a kill without SIGTERM)
        (300, -5.0, 1),  # past the deadline
        (None, 10.0, 10),  # unknown grace: the time left
    ],
)
def test_grace_is_cut_to_the_time_the_node_has_left(
    own: int | None, left: float, given: int | None
) -> None:
    assert capped_grace(own, left) == given


def test_past_the_first_evictions_of_a_namespace_one_event_says_the_rest(pair: Pair) -> None:
    """The first PER_NAMESPACE plain evictions of a namespace each get an Evicted Event;
    the rest of that namespace one Evicted Event that counts and names them all."""
    pods = PER_NAMESPACE + 4
    ku.deployment(pair.kube, pair.ns, "web", pair.group, pods)
    ku.wait_running(pair.kube, pair.a, pods)
    pair.open_b()

    result = pair.drain(deadline=60)

    assert result.outcome == "drained" and len(result.evicted) == pods, render(result)
    events = pair.kube.get(f"/api/v1/namespaces/{pair.ns}/events")["items"]
    evicted = [e for e in events if e.get("reason") == "Evicted"]
    single = [e for e in evicted if not e["message"].startswith(COMBINED)]
    (combined,) = [e for e in evicted if e["message"].startswith(COMBINED)]
    assert len(single) == PER_NAMESPACE, evicted
    assert all(e["message"] == "Evicted by nodeagent (manual)" for e in single), single
    named = {e["involvedObject"]["name"] for e in single}
    rest = {p.name for p in result.evicted} - named
    assert len(rest) == 4 and "; 4 more pods: " in combined["message"], combined
    assert all(name in combined["message"] for name in rest), combined
    assert combined["involvedObject"]["name"] in rest and combined["count"] == 1


def _slow_leaver(pair: Pair) -> None:
    """One pod that ignores SIGTERM for its whole 300 s grace (the simulator finishes it
    after its termination delay, cut to the grace the deletion gave it)."""
    ku.deployment(
        pair.kube,
        pair.ns,
        "slow",
        pair.group,
        1,
        annotations={TERMINATION_DELAY: "300s"},
        terminationGracePeriodSeconds=300,
    )
    ku.wait_running(pair.kube, pair.a, 1)


def test_at_shutdown_a_long_grace_is_cut_to_the_deadline(pair: Pair) -> None:
    _slow_leaver(pair)

    result = pair.drain(reason="poweroff", deadline=6)

    assert result.outcome == "drained", render(result)
    (evicted,) = result.evicted
    assert evicted.grace_cut is not None and evicted.grace_cut[0] == 300
    assert 1 <= evicted.grace_cut[1] <= 6
    assert f"grace cut: {evicted.ref} (300s to" in render(result)
    events = pair.kube.get(f"/api/v1/namespaces/{pair.ns}/events")["items"]
    said = [e["message"] for e in events if e.get("reason") == "Evicted"]
    assert any("grace cut from 300s" in m for m in said), said


def test_an_evacuation_keeps_the_pods_own_grace(pair: Pair) -> None:
    _slow_leaver(pair)

    result = pair.drain(reason="evacuate", deadline=3)

    assert result.outcome == "timed-out", render(result)
    (pod,) = ku.pods_on(pair.kube, pair.a)
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 300
    assert all(p.grace_cut is None for p in result.evicted + result.blocked)


def _labelled(labels: dict[str, str], annotations: dict[str, str]) -> JSON:
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": {}}


@pytest.mark.parametrize(
    ("labels", "annotations", "ours"),
    [
        ({}, {}, True),  # absent: the agent sets it, and says so
        ({EXCLUDE_LB_LABEL: "true"}, {}, False),  # a person's: never the agent's
        ({EXCLUDE_LB_LABEL: "true"}, {EXCLUDED_LB: "true"}, True),  # set by an earlier cordon
        ({EXCLUDE_LB_LABEL: ""}, {EXCLUDED_LB: "false"}, False),
    ],
)
def test_the_load_balancer_label_is_the_agents_only_when_it_set_it(
    labels: dict[str, str], annotations: dict[str, str], ours: bool
) -> None:
    assert excludes_lb(_labelled(labels, annotations)) is ours


def test_the_node_leaves_load_balancers_with_the_cordon_and_returns_with_the_uncordon(
    pair: Pair, admin_kubeconfig: str
) -> None:
    kube = pair.kube
    assert pair.drain(deadline=10).outcome == "drained"
    node = ku.node(kube, pair.a)
    assert node["metadata"]["labels"].get(EXCLUDE_LB_LABEL) == AGENT
    assert node["metadata"]["annotations"].get(EXCLUDED_LB) == "true"

    assert agent(pair, "uncordon", kubeconfig=admin_kubeconfig).returncode == 0

    node = ku.node(kube, pair.a)
    assert EXCLUDE_LB_LABEL not in node["metadata"].get("labels", {})
    assert EXCLUDED_LB not in node["metadata"].get("annotations", {})


def test_a_load_balancer_label_a_person_set_outlives_the_agents_fence(
    pair: Pair, admin_kubeconfig: str
) -> None:
    kube = pair.kube
    kube.merge_patch(node_path(pair.a), {"metadata": {"labels": {EXCLUDE_LB_LABEL: "person"}}})
    assert pair.drain(deadline=10).outcome == "drained"
    assert EXCLUDED_LB not in ku.node(kube, pair.a)["metadata"]["annotations"]

    assert agent(pair, "uncordon", kubeconfig=admin_kubeconfig).returncode == 0

    node = ku.node(kube, pair.a)
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"].get(EXCLUDE_LB_LABEL) == "person"
