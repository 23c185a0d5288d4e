"""A drain restarted after an eviction was granted but never carried out finishes it
instead of waiting out the PodDisruptionBudget's 2-minute memory of it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hack import kubeutil as ku
from nodeagent.departure.executor import cordon_then_drain
from nodeagent.drain.engine import Drain, DrainOptions
from nodeagent.drain.grants import (
    Grant,
    grant_of,
    granted_despite_conflict,
    is_fresh,
    is_pod_conflict,
)
from nodeagent.kube.client import JSON, ApiError, Kube, api_stamp, api_time, pods_path
from nodeagent.report.events import EventRecorder

T0 = 1_800_000_000.0


def test_api_stamp_and_api_time_are_inverses() -> None:
    assert api_stamp(T0) == "2027-01-15T08:00:00Z"
    assert api_time(api_stamp(T0)) == T0
    now = api_time(api_stamp())
    assert now is not None and abs(now - time.time()) < 2


def pod(
    *,
    target: tuple[str, str, float] | None = None,
    ready_at: float | None = T0 - 100,
    deleting: bool = False,
    created: float = T0 - 200,
) -> JSON:
    conditions = []
    if target:
        status, reason, at = target
        conditions.append(
            {"type": "DisruptionTarget", "status": status, "reason": reason,
             "lastTransitionTime": api_stamp(at)}
        )  # fmt: skip
    if ready_at is not None:
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": api_stamp(ready_at)}
        )
    meta: JSON = {"name": "db-0", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
    meta["creationTimestamp"] = api_stamp(created)
    if deleting:
        meta["deletionTimestamp"] = api_stamp(T0)
    return {"metadata": meta, "spec": {}, "status": {"conditions": conditions}}


def pdb(disrupted: dict[str, float]) -> JSON:
    return {
        "metadata": {"name": "db", "namespace": "ns"},
        "status": {"disruptedPods": {k: api_stamp(v) for k, v in disrupted.items()}},
    }


GRANTED = ("True", "EvictionByEvictionAPI", T0)


@pytest.mark.parametrize(
    ("obj", "budget", "grant"),
    [
        (pod(), None, None),
        (pod(target=GRANTED), None, Grant(T0, "condition")),
        (pod(target=GRANTED, deleting=True), None, None),  # carried out already
        (pod(target=("True", "PreemptionByScheduler", T0)), None, None),
        (pod(target=("True", "TerminationByKubelet", T0)), None, None),
        (pod(target=("False", "EvictionByEvictionAPI", T0)), None, None),
        # Unready when evicted (no budget spent), Ready since: protected again.
        (pod(target=GRANTED, ready_at=T0 + 5), None, None),
        (pod(target=GRANTED, ready_at=None), None, Grant(T0, "condition")),
        (pod(), pdb({"db-0": T0}), Grant(T0, "PDB db")),
        (pod(), pdb({"db-1": T0}), None),
        (pod(created=T0 + 1), pdb({"db-0": T0}), None),  # the entry was a predecessor's
        (pod(target=GRANTED), pdb({"db-0": T0 - 1}), Grant(T0, "condition")),
        (pod(target=GRANTED), pdb({"db-0": T0 + 1}), Grant(T0 + 1, "PDB db")),
    ],
)
def test_grant_of(obj: JSON, budget: JSON | None, grant: Grant | None) -> None:
    assert grant_of(obj, budget) == grant


@pytest.mark.parametrize(
    ("age", "fresh"), [(-1, True), (-5, False), (0, True), (59, True), (60, False), (119, False)]
)
def test_fresh_by_the_server_clock(age: float, fresh: bool) -> None:
    assert is_fresh(Grant(T0, "condition"), T0 + age) is fresh


def version(
    rv: str, *, ready_at: float | None = T0 - 100, phase: str = "Running", **kw: Any
) -> JSON:
    obj = pod(ready_at=ready_at, **kw)
    obj["metadata"]["resourceVersion"] = rv
    obj["status"]["phase"] = phase
    return obj


def other_uid(obj: JSON) -> JSON:
    obj["metadata"]["uid"] = "another"
    return obj


@pytest.mark.parametrize(
    ("seen", "granted"),
    [
        # Ready throughout: the handler read it Ready, so it spent the budget first.
        (version("8"), True),
        # Finished: the handler let it go without a budget (and the drain keeps it).
        (version("8", phase="Failed"), False),
        (version("8", phase="Succeeded"), False),
        # Being deleted: someone else's delete, nothing spent.
        (version("8", deleting=True), False),
        # Unready now: the handler may have taken the unready path, nothing spent.
        (version("8", ready_at=None), False),
        # Ready again since: it was unready in between, when the handler may have read it.
        (version("8", ready_at=T0 - 1), False),
        # Another pod under the same name.
        (other_uid(version("8")), False),
        # The version sent: the watch never showed it move, which proves nothing.
        (version("7"), False),
    ],
)
def test_granted_despite_conflict(seen: JSON, granted: bool) -> None:
    assert granted_despite_conflict(version("7"), seen) is granted


def test_an_unready_pod_is_never_taken_for_granted() -> None:
    unready = version("7", ready_at=None)
    assert not granted_despite_conflict(unready, version("8", ready_at=None))
    assert not granted_despite_conflict(unready, version("8"))


def test_ready_without_a_transition_time_is_no_evidence() -> None:
    def undated(rv: str) -> JSON:
        obj = version(rv)
        del obj["status"]["conditions"][-1]["lastTransitionTime"]
        return obj

    assert not granted_despite_conflict(undated("7"), undated("8"))


def conflict(details: JSON) -> ApiError:
    return ApiError(status=409, reason="Conflict", message="m", body={"details": details})


@pytest.mark.parametrize(
    ("error", "about_the_pod"),
    [
        # addConditionAndDeletePod's own precondition check (eviction.go)
        (conflict({"name": "db-0", "kind": "Pod"}), True),
        # the generic store's delete precondition
        (conflict({"name": "db-0", "kind": "pods"}), True),
        # the handler out of retries on the PDB's status write: nothing spent
        (conflict({"name": "db", "group": "policy", "kind": "poddisruptionbudgets"}), False),
        (conflict({}), False),
        (ApiError(409, "AlreadyExists", "m", {"details": {"kind": "pods"}}), False),
        (ApiError(429, "TooManyRequests", "m", {"details": {"kind": "pods"}}), False),
    ],
)
def test_a_conflict_about_the_pod(error: ApiError, about_the_pod: bool) -> None:
    assert is_pod_conflict(error) is about_the_pod


def spend_budget_without_delete(kube: Kube, ns: str, name: str) -> None:
    """Make the API server grant an eviction and then fail its delete, the state an
    evicting client killed between the two writes leaves: a resourceVersion
    precondition that no longer matches is checked only after the budget is spent
    (eviction.go: checkAndDecrement, then addConditionAndDeletePod), so the PDB lists
    the pod as disrupted while the pod stays, undeleted and without its condition."""
    stale = kube.get(pods_path(ns, name))["metadata"]
    kube.merge_patch(pods_path(ns, name), {"metadata": {"labels": {"bumped": "yes"}}})
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
        "deleteOptions": {
            "preconditions": {"uid": stale["uid"], "resourceVersion": stale["resourceVersion"]}
        },
    }
    with pytest.raises(ApiError) as err:
        kube.post(pods_path(ns, name) + "/eviction", body)
    assert err.value.status == 409, err.value


def granted_condition(kube: Kube, ns: str, name: str) -> None:
    """The handler's next write, which the kill would otherwise have let through."""
    cond = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": api_stamp(time.time()),
    }
    kube.strategic_patch(pods_path(ns, name) + "/status", {"status": {"conditions": [cond]}})


@pytest.mark.parametrize("seen_by", ["condition", "PDB"])
def test_restarted_drain_finishes_the_granted_eviction(
    seen_by: str, cluster: Any, kube: Kube
) -> None:
    group, node, spare = ku.node_pair(cluster, kube, "grant")
    ku.deployment(kube, group, "db", group, 2)
    pods = ku.wait_running(kube, node, 2)
    ku.pdb(kube, group, "db", {"app": "db"}, minAvailable=1)
    ku.wait_pdb_ready(kube, group, "db")
    victim = pods[0]["metadata"]["name"]
    spend_budget_without_delete(kube, group, victim)
    budget = kube.get(f"/apis/policy/v1/namespaces/{group}/poddisruptionbudgets/db")["status"]
    assert victim in budget["disruptedPods"] and budget["disruptionsAllowed"] == 0
    if seen_by == "condition":
        granted_condition(kube, group, victim)
    ku.open_node(kube, spare)
    messages: list[str] = []
    events = EventRecorder(kube, node)

    # Without finishing the grant both evictions are refused until the PDB forgets it
    # (2 minutes): the drain would end timed-out.
    result = cordon_then_drain(
        Drain(kube, node, DrainOptions(deadline=40), events, messages.append)
    )
    events.flush()

    assert result.outcome == "drained", (result, messages)
    assert sorted(p.name for p in result.evicted) == sorted(p["metadata"]["name"] for p in pods)
    source = "condition" if seen_by == "condition" else "PDB db"
    assert any(
        m.startswith(f"{group}/{victim}: finished the eviction granted at ") and f"({source})" in m
        for m in messages
    ), messages
