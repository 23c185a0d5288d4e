"""API Priority and Fairness against the real API server: a FlowSchema puts a test user
into a priority level with a few seats that rejects what does not fit, so parallel
requests of that user get real 429s with Retry-After. The client waits them out: every
call succeeds, for every verb, and the 429s it absorbed are counted (each would have been
an error without the wait). A PodDisruptionBudget's 429 is not waited out: the drain
engine handles it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from nodeagent import metrics
from nodeagent.kube.client import ApiError, Kube, pods_path

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
WORKERS, ROUNDS = 24, 8


def throttled_total() -> float:
    samples = metrics.enable().collect()
    return sum(
        s.value
        for family in samples
        if family.name == "nodeagent_api_throttled"
        for s in family.samples
        if s.name.endswith("_total")
    )


def flow_objects(name: str) -> list[tuple[str, dict[str, Any]]]:
    """A priority level of few seats (1 share of the server's; no borrowing; no queue: what
    does not fit is rejected at once) and a FlowSchema sending user `name` there."""
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 100,  # before every default schema but the exempt one
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": name}}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    return [
        (f"{FLOWCONTROL}/prioritylevelconfigurations", level),
        (f"{FLOWCONTROL}/flowschemas", schema),
    ]


@pytest.fixture
def throttled(cluster: Any, kube: Kube, tmp_path: Path) -> Iterator[tuple[Kube, str]]:
    """(a client of a user APF throttles, a namespace where it may manage ConfigMaps)."""
    user = ku.unique("apf-user")
    ns = ku.namespace(kube, user)
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]
    kube.post(f"{RBAC}/namespaces/{ns}/roles", {"metadata": {"name": "cm"}, "rules": rules})
    binding = {
        "metadata": {"name": "cm"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    kube.post(f"{RBAC}/namespaces/{ns}/rolebindings", binding)
    objects = flow_objects(user)
    for path, body in objects:
        kube.post(path, body)
    try:
        schema = f"{FLOWCONTROL}/flowschemas/{user}"
        ku.wait_until(
            lambda: any(
                c["type"] == "Dangling" and c["status"] == "False"
                for c in kube.get(schema).get("status", {}).get("conditions", [])
            ),
            30,
            "the FlowSchema in effect",
        )
        agent = Kube.from_kubeconfig(str(cluster.mint_kubeconfig(user, [], tmp_path / "kc")))
        yield agent, ns
    finally:
        for path, body in reversed(objects):
            kube.delete(f"{path}/{body['metadata']['name']}")


def test_apf_rejections_are_waited_out_for_every_verb(throttled: tuple[Kube, str]) -> None:
    agent, ns = throttled
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    bounded = agent.bounded(time.monotonic() + 120)  # as a drain's requests are

    def worker(i: int) -> int:
        for r in range(ROUNDS):
            name = f"cm-{i}-{r}"
            bounded.post(cms, {"metadata": {"name": name}, "data": {"n": "0"}})
            bounded.get(f"{cms}/{name}")
            bounded.merge_patch(f"{cms}/{name}", {"data": {"n": "1"}})
            bounded.strategic_patch(f"{cms}/{name}", {"data": {"n": "2"}})
            bounded.get("/version")
            bounded.delete(f"{cms}/{name}")
        return ROUNDS

    before = throttled_total()
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        done = sum(pool.map(worker, range(WORKERS)))  # any error is raised here
    absorbed = throttled_total() - before
    print(
        f"\n{WORKERS * ROUNDS * 6} requests in {time.monotonic() - started:.1f}s, "
        f"{absorbed:.0f} APF 429s waited out"
    )
    assert done == WORKERS * ROUNDS
    assert agent.get(cms)["items"] == []
    assert absorbed > 0, "the priority level never rejected: the test proves nothing"


def test_a_pdb_refusal_is_left_to_the_drain_engine(cluster: Any, kube: Kube) -> None:
    group, node, _spare = ku.node_pair(cluster, kube, "apf-pdb")
    labels = {"app": "held"}
    pod = kube.post(
        pods_path(group),
        {
            "metadata": {"name": "held", "namespace": group, "labels": labels},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
            },
        },
    )
    ku.pdb(kube, group, "keep", labels, minAvailable=1)
    ku.wait_pdb_ready(kube, group, "keep")
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "held", "namespace": group},
        "deleteOptions": {"preconditions": {"uid": pod["metadata"]["uid"]}},
    }
    before, started = throttled_total(), time.monotonic()
    with pytest.raises(ApiError) as err:
        kube.bounded(started + 60).post(pods_path(group, "held") + "/eviction", eviction)
    assert err.value.status == 429
    assert [c["reason"] for c in err.value.causes] == ["DisruptionBudget"]
    assert time.monotonic() - started < 5  # not waited out (its Retry-After is 10 s)
    assert throttled_total() == before
