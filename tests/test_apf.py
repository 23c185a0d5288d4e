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
from hack.fleet import apf
from nodeagent import metrics
from nodeagent.kube.client import ApiError, Kube, pods_path

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
    objects = apf.throttle(kube, user, apf.user(user))
    try:
        agent = Kube.from_kubeconfig(str(cluster.mint_kubeconfig(user, [], tmp_path / "kc")))
        yield agent, ns
    finally:
        apf.remove(kube, objects)


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
