"""Beyond the own Node, against the real control plane, with `nodeagent run` as a process:
the autoscaler's delay-deletion annotation a killed agent left goes at the next start;
kured's lock on its DaemonSet (hack/actors/kured.py's writes) read under the kubelet's own
identity with the one grant the chart adds (kured.daemonSet), and without it; what that
identity may not read (Events); the setting's bad values."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.actors import api, cluster_autoscaler, kured
from hack.agentproc import AgentProcess
from hack.chart import objects, render
from nodeagent.config import Config
from nodeagent.departure.executor import AutoscalerHold, FenceExecutor
from nodeagent.fence import marker
from nodeagent.fence.others import DELAY_DELETION
from nodeagent.kube import identity
from nodeagent.kube.client import JSON, Kube
from nodeagent.report import conditions
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import EventRecorder
from tests.test_evacuate import Node, node
from tests.test_fence_actors import has_our_taint

__all__ = ["node"]  # the fixture, shared with tests/test_evacuate.py

RBAC = "/apis/rbac.authorization.k8s.io/v1"


# -- the autoscaler's hold after a crash ------------------------------------------------------


def test_a_killed_agents_deletion_hold_goes_at_the_next_start(node: Node) -> None:
    """The annotation as a drain's AutoscalerHold writes it, on a node the autoscaler is
    removing; its agent then killed (nothing released it). The next agent removes it from
    what the API says, so the autoscaler's WaitForDelayDeletion returns at its first poll
    instead of after --node-deletion-delay-timeout (2 minutes)."""
    ca = cluster_autoscaler.ClusterAutoscaler(node.kube)
    ca.mark_to_be_deleted(node.name)
    who = "cluster-autoscaler (taint ToBeDeletedByClusterAutoscaler)"
    AutoscalerHold(node.kube, node.name, who).hold("poweroff: 1 volume(s) detaching")
    assert cluster_autoscaler.has_delay_deletion(node.obj())
    start = time.monotonic()
    agent = node.agent()
    ku.wait_until(lambda: DELAY_DELETION not in node.annotations(), 20, "the stale hold removed")
    took = time.monotonic() - start
    print(f"stale delay-deletion hold removed {took:.2f}s after the agent's start")
    said = "removed the autoscaler's delay-deletion hold a stopped agent left"
    ku.wait_until(lambda: said in agent.output(), 5, "the agent's line")
    assert not cluster_autoscaler.has_delay_deletion(node.obj())
    assert api.has_taint(node.obj(), cluster_autoscaler.TO_BE_DELETED)  # theirs stays
    assert took < 10


def test_a_hold_a_drain_has_now_is_not_stale(node: Node, kube: Kube) -> None:
    """The clean-up and a drain's hold share the executor's guard: what a running wait
    holds stays; once that wait let it go, a leftover would go."""
    cluster_autoscaler.ClusterAutoscaler(kube).mark_to_be_deleted(node.name)
    events, report = EventRecorder(kube, node.name), ConditionWriter(kube, node.name)
    executor = FenceExecutor(Config(node=node.name), kube, events, report, lambda _r, _m: None)
    hold = executor.deletion_hold(node.obj())
    hold.hold("poweroff: 1 volume(s) detaching")
    assert not executor.release_stale_hold(node.obj())
    assert cluster_autoscaler.has_delay_deletion(node.obj())
    hold.release()
    assert not cluster_autoscaler.has_delay_deletion(node.obj())
    AutoscalerHold(kube, node.name, "a killed agent's").hold("x")
    assert executor.release_stale_hold(node.obj())
    assert not cluster_autoscaler.has_delay_deletion(node.obj())


# -- kured's lock, under the kubelet's identity ------------------------------------------------


def kured_lock_grant(kube: Kube, ns: str, values: list[str]) -> list[JSON]:
    """The chart's Role and RoleBinding for kured.daemonSet=<ns>/kured (and `values`),
    created for real."""
    rendered = objects(render("na", "nodeagent", [*values, f"kured.daemonSet={ns}/kured"]))
    docs = [o for o in rendered if "kured" in o["metadata"]["name"]]
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    for doc in docs:
        kube.post(f"{RBAC}/namespaces/{ns}/{doc['kind'].lower()}s", doc)
    return docs


def reads_kured(kubeconfig: Path, ns: str, name: str = "kured") -> bool:
    """What the identity may do, as the API server's authorizers answer it."""
    kube = Kube.from_kubeconfig(str(kubeconfig))
    rights = [
        identity.Right("get", "daemonsets", group="apps", name=name),
        identity.Right("watch", "daemonsets", group="apps", name=name),
    ]
    return all(_allowed_in(kube, r, ns) for r in rights)


def _allowed_in(kube: Kube, right: identity.Right, ns: str) -> bool:
    attrs = right.attributes() | {"namespace": ns}
    review: JSON = {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1"}
    review["spec"] = {"resourceAttributes": attrs}
    return bool((kube.post(identity.SSAR_PATH, review).get("status") or {}).get("allowed"))


@pytest.fixture
def kubelet_conf(cluster: Any, node: Node, tmp_path: Path) -> Path:
    path: Path = cluster.mint_node_kubeconfig(node.name, tmp_path / "kubelet.conf")
    return path


def agent_as_kubelet(node: Node, kubeconfig: Path, kured_ds: str) -> AgentProcess:
    config: dict[str, dict[str, Any]] = {"": {"kubelet_kubeconfig": str(kubeconfig)}}
    if kured_ds:
        config["alongside"] = {"kured_daemonset": kured_ds}
    agent = AgentProcess.start(node.workdir, None, node.name, config)
    node.agents.append(agent)
    return agent


@pytest.fixture
def kured_node(node: Node) -> Iterator[Node]:
    ku.deployment(node.kube, node.ns, "web", node.group, 2)
    ku.daemonset(node.kube, node.ns, "kured", node.group)
    ku.wait_running(node.kube, node.name, 3)
    ku.open_node(node.kube, node.spare)
    yield node


def web(n: Node) -> list[JSON]:
    """The Deployment's pods on the node (kured's own DaemonSet pod stays)."""
    return [p for p in n.workload_pods() if p["metadata"]["labels"].get("app") == "web"]


def kured_draining(n: Node, kubelet_conf: Path, granted: bool, ttl_ns: int = 0) -> Any:
    """The agent under the kubelet's identity (with the chart's grant and the key, or
    neither); kured (no --annotate-nodes) takes its lock and cordons, the first writes of
    its drain; then the node gets the evacuate taint. Returns (agent, kured, the Node
    kured read before its cordon)."""
    if granted:
        kured_lock_grant(n.kube, n.ns, ["identity=kubelet"])
        ku.wait_until(lambda: reads_kured(kubelet_conf, n.ns), 20, "the grant authorized")
        assert not reads_kured(kubelet_conf, n.ns, "kured-other")  # that one DaemonSet only
    agent = agent_as_kubelet(n, kubelet_conf, f"{n.ns}/kured" if granted else "")
    ku.wait_until(lambda: "running; node needs no uncordon" in agent.output(), 20, "started")
    kr = kured.Kured(n.kube, n.name, ds_namespace=n.ns, lock_ttl_ns=ttl_ns)
    before = api.get_node(n.kube, n.name)
    assert kr.acquire(unschedulable=False)
    kr.helper().cordon_or_uncordon(before, True)
    n.taint()
    return agent, kr, before


def stands_aside(n: Node, agent: AgentProcess) -> None:
    ku.wait_until(
        lambda: n.annotations().get(marker.DRAIN_REASON) == "evacuate", 15, "the agent's record"
    )
    time.sleep(2)
    assert len(web(n)) == 2, "drained a second time beside kured"
    assert "not draining it a second time" in agent.output()
    assert "kured (lock weave.works/kured-node-lock" in agent.output()
    assert "cannot read kured's lock" not in agent.output()
    assert not has_our_taint(n.obj())  # the kubelet's identity: the cordon is the fence


def test_an_evacuation_beside_kureds_drain_stands_aside_until_it_gives_up(
    kured_node: Node, kubelet_conf: Path
) -> None:
    """With the lock readable the agent fences beside kured's cordon and drains nothing;
    kured's failed drain then releases the lock and uncordons (its order), and the agent
    drains the node itself."""
    n = kured_node
    agent, kr, before = kured_draining(n, kubelet_conf, granted=True)
    stands_aside(n, agent)
    start = time.monotonic()
    kr.release()
    kr.uncordon(before)  # main.go: "best-effort uncordon after failed cordon and drain"
    ku.wait_until(lambda: not web(n), 30, "the evacuation's own drain")
    print(f"kured gave the node back: the agent drained it in {time.monotonic() - start:.2f}s")
    # Whether kured's uncordon lands before the agent's cordon (then the cordon is the
    # agent's) or after its record under kured's cordon (then it is lifted while the
    # evacuation holds, and put back as the agent's: under this identity, which may not
    # taint, the cordon is the whole fence), the node ends cordoned by the agent, and the
    # drain is the agent's.
    assert n.annotations()[marker.DRAIN_REASON] == "evacuate"
    assert n.cordoned() and n.annotations().get(marker.CORDONED_BY) == marker.AGENT
    time.sleep(1)
    assert not web(n) and len(ku.running(ku.pods_on(n.kube, n.spare))) >= 2


def test_an_expired_kured_lock_is_no_drain(kured_node: Node, kubelet_conf: Path) -> None:
    """kured's --lock-ttl ran out (daemonsetlock.go ttlExpired): the lock counts for
    nothing, with no write on the DaemonSet; the agent's evacuation drains."""
    n = kured_node
    agent, _kr, _before = kured_draining(n, kubelet_conf, granted=True, ttl_ns=6 * 10**9)
    stands_aside(n, agent)
    ku.wait_until(lambda: not web(n), 30, "the evacuation's drain once the lock expired")


def test_unset_the_agent_drains_beside_kured(kured_node: Node, kubelet_conf: Path) -> None:
    """The baseline: the key unset, kured's drain is a cordon like a person's, and the
    evacuation drains at once beside kured: a second drainer."""
    n = kured_node
    kured_draining(n, kubelet_conf, granted=False)
    ku.wait_until(lambda: not web(n), 30, "the agent's own drain")


def test_without_the_grant_one_line_and_the_agent_goes_on(
    kured_node: Node, kubelet_conf: Path
) -> None:
    n = kured_node
    agent = agent_as_kubelet(n, kubelet_conf, f"{n.ns}/kured")
    ku.wait_until(lambda: "cannot read kured's lock" in agent.output(), 20, "the line")
    time.sleep(2)
    lines = [line for line in agent.output().splitlines() if "cannot read kured's lock" in line]
    assert len(lines) == 1, lines
    assert "grant get, list and watch on that DaemonSet" in lines[0]
    assert agent.healthz()[0] == 200, agent.output()[-2000:]


def test_the_charts_grant_to_its_service_account(node: Node, kube: Kube) -> None:
    """identity serviceAccount: the RoleBinding names the chart's ServiceAccount; what it
    may do on kured's namespace, as the authorizer answers for that user."""
    kured_lock_grant(kube, node.ns, [])
    user = "system:serviceaccount:nodeagent:na-nodeagent"
    ds = {"group": "apps", "resource": "daemonsets", "namespace": node.ns}
    get = ds | {"verb": "get", "name": "kured"}
    ku.wait_until(lambda: may(kube, user, get), 20, "the grant authorized")
    assert may(kube, user, ds | {"verb": "watch", "name": "kured"})  # metadata.name=kured
    assert may(kube, user, ds | {"verb": "list", "name": "kured"})
    assert not may(kube, user, ds | {"verb": "list"})  # every DaemonSet there: no
    assert not may(kube, user, ds | {"verb": "get", "name": "other"})
    assert not may(kube, user, ds | {"verb": "update", "name": "kured"})


def may(kube: Kube, user: str, attributes: JSON) -> bool:
    """A SubjectAccessReview for `user` (a ServiceAccount's groups included)."""
    groups = ["system:serviceaccounts", "system:serviceaccounts:nodeagent", "system:authenticated"]
    review: JSON = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
    review["spec"] = {"user": user, "groups": groups, "resourceAttributes": attributes}
    answer = kube.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool((answer.get("status") or {}).get("allowed"))


# -- Events on the Node: not readable by the agent's identities --------------------------------


def test_neither_identity_may_list_the_nodes_events(
    node: Node, kubelet_conf: Path, kube: Kube
) -> None:
    """`[warnings] other_handler = "auto"` reads labels and taints only: listing Events,
    even with the field selector on this Node, is refused to the kubelet's identity (the
    Node authorizer grants create, update and patch), and the chart grants its
    ServiceAccount create and patch only."""
    events = identity.Right(
        "list",
        "events",
        field_selector=f"involvedObject.kind=Node,involvedObject.name={node.name}",
    )
    as_kubelet = Kube.from_kubeconfig(str(kubelet_conf))
    assert not _allowed_in(as_kubelet, events, "default")
    assert _allowed_in(as_kubelet, identity.Right("create", "events"), "default")
    for values in ([], ["identity=kubelet"]):
        for doc in objects(render("na", "nodeagent", values)):
            for rule in doc.get("rules") or []:
                if "events" in rule.get("resources", []):
                    assert set(rule["verbs"]) == {"create", "patch"}, rule


# -- bad values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"kured"', "alongside.kured_daemonset: 'kured' is not NAMESPACE/NAME"),
        ('""', "alongside.kured_daemonset: empty value"),
    ],
)
def test_a_bad_kured_daemonset_stops_the_agent_before_anything(
    node: Node, tmp_path: Path, value: str, message: str
) -> None:
    before = node.obj()
    cfg = ku.write(tmp_path / "c.toml", f"[alongside]\nkured_daemonset = {value}\n")
    res = ku.run_agent(
        "run", "--node", node.name, "--kubeconfig", node.kubeconfig, "--config", str(cfg)
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nodeagent: error: {message}"), lines
    assert agents_part(node.obj()) == agents_part(before)


def agents_part(n: JSON) -> JSON:
    """What the agent writes on its Node. Not its resourceVersion: the kubelet's status
    heartbeat (every 10 s in the harness) moves that whatever the agent does."""
    conds = (n.get("status") or {}).get("conditions") or []
    return {
        "spec": n["spec"],
        "labels": n["metadata"].get("labels") or {},
        "annotations": n["metadata"].get("annotations") or {},
        "conditions": [c for c in conds if c["type"] in (conditions.READY, conditions.DRAINED)],
    }
