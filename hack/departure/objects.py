"""The departure scene's workload as API objects (hack/departure/scene.py posts them): the
service (hack/realnode/workload.py's image) as Deployments whose pods take a preStop pause
and serve long requests, spread over the nodes or preferring one."""

from __future__ import annotations

from typing import Any

from hack import kubeutil as ku
from hack.realnode.images import TEST_IMAGE
from hack.realnode.workload import PORT, WORKLOAD_IMAGE

DND = "karpenter.sh/do-not-disrupt"
APP = "web"
REPLICAS = 4
PRESTOP_S = 5
LONG_S = 20
# Covers the preStop pause and the long request with room to spare.
GRACE_S = 45
# The sigterm-ignoring kind's pod: PID 1 without a handler, a grace far past any deadline.
STUBBORN = "trap '' TERM; while true; do sleep 1; done"
STUBBORN_GRACE_S = 300


def container() -> dict[str, Any]:
    probe = {"exec": {"command": ["/workload", "-get", "/healthz"]}}
    return {
        "name": "app",
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "ports": [{"containerPort": PORT, "name": "http"}],
        "readinessProbe": {**probe, "periodSeconds": 2, "failureThreshold": 1},
        "lifecycle": {
            "preStop": {"exec": {"command": ["/workload", "-get", f"/prestop?s={PRESTOP_S}"]}}
        },
    }


def pod_spec(group: str, **extra: Any) -> dict[str, Any]:
    return {
        "nodeSelector": {ku.GROUP_LABEL: group},
        "terminationGracePeriodSeconds": GRACE_S,
        # The local control plane publishes no root CA: no token volume.
        "automountServiceAccountToken": False,
        "containers": [container()],
        **extra,
    }


def deployment(ns: str, name: str, tier: str, replicas: int, spec: dict[str, Any],
               annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    labels = {"app": APP, "tier": tier}
    return ku.deployment_body(ns, name, labels, replicas, spec, annotations)


def spread(tier: str) -> list[dict[str, Any]]:
    """Even over the nodes, counting only nodes pods may go to (a cordon takes one out)."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": APP, "tier": tier}},
            "nodeTaintsPolicy": "Honor",
        }
    ]


def prefer(node: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                  "values": [node]}]}  # fmt: skip
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": term}]}}  # fmt: skip


# ---- the scene ---------------------------------------------------------------------------


def stubborn(ns: str, group: str, node: str) -> dict[str, Any]:
    """A Deployment of one pod on `node` that ignores SIGTERM, its grace far past the
    deadline (not behind the Service: it serves nothing, it only holds the shutdown)."""
    spec = pod_spec(group, terminationGracePeriodSeconds=STUBBORN_GRACE_S)
    spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    spec["containers"] = [{"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never",
                           "command": ["sh", "-c", STUBBORN]}]  # fmt: skip
    body = deployment(ns, "stubborn", "stubborn", 1, spec)
    body["metadata"]["labels"] = body["spec"]["template"]["metadata"]["labels"] = {
        "app": "stubborn"
    }
    body["spec"]["selector"] = {"matchLabels": {"app": "stubborn"}}
    return body
