"""API Priority and Fairness on purpose: a group's requests in a priority level of one share
that rejects what does not fit (no queue), so a start storm of that group gets real 429s
with Retry-After, as a busy API server gives them."""

from __future__ import annotations

import time

from nodeagent.kube.client import Kube

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
IN_EFFECT_TIMEOUT = 30.0


def throttle_group(kube: Kube, group: str, name: str = "bench-throttled") -> None:
    """Send every request of `group` to a priority level of one share; return once the
    FlowSchema is in effect."""
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
                    "subjects": [{"kind": "Group", "group": {"name": group}}],
                    "resourceRules": [{**every, "clusterScope": True, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    kube.post(f"{FLOWCONTROL}/prioritylevelconfigurations", level)
    kube.post(f"{FLOWCONTROL}/flowschemas", schema)
    deadline = time.monotonic() + IN_EFFECT_TIMEOUT
    while not _in_effect(kube, f"{FLOWCONTROL}/flowschemas/{name}"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"FlowSchema {name} not in effect after {IN_EFFECT_TIMEOUT:.0f}s")
        time.sleep(0.2)


def _in_effect(kube: Kube, path: str) -> bool:
    conditions = (kube.get(path).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Dangling" and c.get("status") == "False" for c in conditions)
