"""API Priority and Fairness on purpose: a user's or a group's requests in a priority level
of one share that rejects what does not fit (no queue), so parallel requests of theirs get
real 429s with Retry-After, as a busy API server gives them. The fleet's start storm
(bench/fleet.py, tests/test_fleet.py) and the client's own test (tests/test_apf.py) use it."""

from __future__ import annotations

import time
from typing import Any

from nodeagent.kube.client import Kube

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
IN_EFFECT_TIMEOUT = 30.0
JSON = dict[str, Any]


def user(name: str) -> JSON:
    return {"kind": "User", "user": {"name": name}}


def group(name: str) -> JSON:
    return {"kind": "Group", "group": {"name": name}}


def flow_objects(name: str, subject: JSON) -> list[tuple[str, JSON]]:
    """(where it is posted, the object): a priority level of few seats (1 share of the
    server's; no borrowing; no queue: what does not fit is rejected at once) and a
    FlowSchema sending every request of `subject` there."""
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
    every = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
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
                    "subjects": [subject],
                    "resourceRules": [{**every, "clusterScope": True, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    return [
        (f"{FLOWCONTROL}/prioritylevelconfigurations", level),
        (f"{FLOWCONTROL}/flowschemas", schema),
    ]


def throttle(kube: Kube, name: str, subject: JSON) -> list[tuple[str, JSON]]:
    """Send every request of `subject` to a priority level of one share; return once the
    FlowSchema is in effect, with the objects posted (for :func:`remove`)."""
    objects = flow_objects(name, subject)
    for path, body in objects:
        kube.post(path, body)
    deadline = time.monotonic() + IN_EFFECT_TIMEOUT
    while not _in_effect(kube, f"{FLOWCONTROL}/flowschemas/{name}"):
        if time.monotonic() > deadline:
            remove(kube, objects)
            raise TimeoutError(f"FlowSchema {name} not in effect after {IN_EFFECT_TIMEOUT:.0f}s")
        time.sleep(0.2)
    return objects


def throttle_group(kube: Kube, name: str, schema: str = "bench-throttled") -> None:
    """Every request of the group `name` throttled (the fleet's agents, for good)."""
    throttle(kube, schema, group(name))


def remove(kube: Kube, objects: list[tuple[str, JSON]]) -> None:
    for path, body in reversed(objects):
        kube.delete(f"{path}/{body['metadata']['name']}")


def _in_effect(kube: Kube, path: str) -> bool:
    conditions = (kube.get(path).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Dangling" and c.get("status") == "False" for c in conditions)
