"""The harness's API helpers, for tests and benchmarks alike: build workloads on simulated
nodes and wait for what the API says."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nodeagent.kube.client import JSON, ApiError, Kube, node_path, pods_path

SIM_LABEL = "nodeagent.io/simulated"
GROUP_LABEL = "test.nodeagent.io/group"
NODEAGENT = [sys.executable, "-m", "nodeagent"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


class WaitTimeout(AssertionError):
    """A wait ran out. An AssertionError, so that a test fails on it as on an assert; a class
    of its own, so that a benchmark or the demo can catch a wait that ran out and no other
    failed check."""


def wait_until(
    check: Callable[[], Any], timeout: float = 30.0, what: str = "", step: float = 0.1
) -> Any:
    """Poll `check` every `step` seconds until it returns something truthy, and return that
    (the harness only; the agent watches)."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(step)


def run_agent(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NODEAGENT, *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def namespace(kube: Kube, name: str) -> str:
    kube.post("/api/v1/namespaces", {"metadata": {"name": name}})
    return name


def pod_spec(group: str, **extra: Any) -> JSON:
    spec: JSON = {
        "nodeSelector": {GROUP_LABEL: group},
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
    }
    spec.update(extra)
    return spec


def bare_pod(
    kube: Kube,
    ns: str,
    name: str,
    node: str,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> JSON:
    body = {
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
            **spec,
        },
    }
    return kube.post(pods_path(ns), body)


def deployment(
    kube: Kube,
    ns: str,
    name: str,
    group: str,
    replicas: int,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> JSON:
    body = deployment_body(ns, name, {"app": name}, replicas, pod_spec(group, **spec), annotations)
    return kube.post(f"/apis/apps/v1/namespaces/{ns}/deployments", body)


def deployment_body(
    ns: str,
    name: str,
    labels: dict[str, str],
    replicas: int,
    spec: JSON,
    annotations: dict[str, str] | None = None,
) -> JSON:
    """A Deployment of `replicas` pods labelled `labels` (its selector too), of `spec`."""
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations or {}},
                "spec": spec,
            },
        },
    }


def job(kube: Kube, ns: str, name: str, group: str, **spec: Any) -> JSON:
    """A Job of one pod that never restarts in place; `spec` adds to the Job's spec."""
    template = {"spec": pod_spec(group, restartPolicy="Never")}
    body = {"metadata": {"name": name, "namespace": ns}, "spec": {"template": template, **spec}}
    return kube.post(f"/apis/batch/v1/namespaces/{ns}/jobs", body)


def daemonset(kube: Kube, ns: str, name: str, group: str) -> JSON:
    labels = {"app": name}
    body = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(group)},
        },
    }
    return kube.post(f"/apis/apps/v1/namespaces/{ns}/daemonsets", body)


def pdb(kube: Kube, ns: str, name: str, selector: dict[str, str], **spec: Any) -> JSON:
    body = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"matchLabels": selector}, **spec},
    }
    return kube.post(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", body)


def priority_class(kube: Kube, name: str, value: int, **extra: Any) -> JSON:
    """Create a PriorityClass and wait until admission knows it: the Priority admission
    plugin reads classes from an informer, so a pod created right after the class can
    be refused ("no PriorityClass with name ... was found") on a loaded machine."""
    body = {"metadata": {"name": name}, "value": value, **extra}
    created = kube.post("/apis/scheduling.k8s.io/v1/priorityclasses", body)
    probe = {
        "metadata": {"generateName": "priority-probe-"},
        "spec": {"priorityClassName": name, "containers": [{"name": "c", "image": "x"}]},
    }

    def admitted() -> bool:
        try:
            kube.request("POST", pods_path("default"), query={"dryRun": "All"}, body=probe)
        except ApiError as exc:
            if "no PriorityClass" not in str(exc):
                raise
            return False
        return True

    wait_until(admitted, 30, f"admission to know PriorityClass {name}")
    return created


def pods_on(kube: Kube, node: str) -> list[JSON]:
    query = {"fieldSelector": f"spec.nodeName={node}"}
    return list(kube.request("GET", "/api/v1/pods", query=query)["items"])


def running(pods: list[JSON]) -> list[JSON]:
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]


def ready(pod: JSON) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def wait_running(kube: Kube, node: str, count: int, timeout: float = 60) -> list[JSON]:
    return list(
        wait_until(
            lambda: (lambda r: r if len(r) >= count else None)(
                [p for p in running(pods_on(kube, node)) if ready(p)]
            ),
            timeout,
            f"{count} Ready pods on {node}",
        )
    )


def _observed(obj: JSON) -> bool:
    """Its controller has seen the object's latest spec (its status says so)."""
    status = obj.get("status") or {}
    return bool(status.get("observedGeneration") == obj["metadata"]["generation"])


def wait_pdb_ready(kube: Kube, ns: str, name: str, timeout: float = 30) -> JSON:
    """Until the disruption controller has observed the PDB (evictions get 429 before)."""
    path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}"

    def check() -> JSON | None:
        obj = kube.get(path)
        return obj if _observed(obj) and obj["status"].get("expectedPods") else None

    return dict(wait_until(check, timeout, f"PDB {ns}/{name} observed"))


def wait_deployment_ready(kube: Kube, ns: str, name: str, timeout: float = 60) -> JSON:
    """Until the Deployment's controllers have counted every replica Ready. Pods Ready on
    their node are not enough: a ReplicaSet controller whose pod watch the API server cut
    during the creation burst has not seen them, and it creates no replacement for an
    evicted pod until its expectations expire (5 minutes)."""
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"

    def check() -> JSON | None:
        obj = kube.get(path)
        ready = _observed(obj) and obj["status"].get("readyReplicas") == obj["spec"]["replicas"]
        return obj if ready else None

    return dict(wait_until(check, timeout, f"Deployment {ns}/{name} ready"))


def node(kube: Kube, name: str) -> JSON:
    return kube.get(node_path(name))


def node_events(kube: Kube, name: str) -> list[JSON]:
    """Events nodeagent recorded on the Node (controllers record their own)."""
    query = {
        "fieldSelector": f"involvedObject.kind=Node,involvedObject.name={name},source=nodeagent"
    }
    return list(kube.request("GET", "/api/v1/namespaces/default/events", query=query)["items"])


def exists(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def node_pair(cluster: Any, kube: Kube, prefix: str) -> tuple[str, str, str]:
    """A fresh group: a node for workloads and a cordoned spare for their replacements
    (open it with `open_node` before draining). Returns (group, node, spare); the group
    also names a new namespace."""
    group = unique(prefix)
    node, spare = f"{group}-a", f"{group}-b"
    cluster.add_node(node, {GROUP_LABEL: group})
    cluster.add_node(spare, {GROUP_LABEL: group})
    kube.merge_patch(node_path(spare), {"spec": {"unschedulable": True}})
    namespace(kube, group)
    return group, node, spare


def open_node(kube: Kube, name: str) -> None:
    kube.merge_patch(node_path(name), {"spec": {"unschedulable": False}})


def shipped_identity(
    cluster: Any, kube: Kube, node: str, group: str, tmp_path: Path, roles: tuple[str, ...]
) -> Kube:
    """A client for a fresh agent identity of `node` bound to `roles` of
    packaging/rbac.yaml only (copies named after `group`)."""
    import yaml

    members = f"nodeagent:agents:{group}"
    paths = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
    with open("packaging/rbac.yaml") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d["metadata"]["name"] in roles]
    for doc in docs:
        doc["metadata"]["name"] += f"-{group}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{group}"
            doc["subjects"] = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                "name": members}]  # fmt: skip
        kube.post(f"/apis/rbac.authorization.k8s.io/v1/{paths[doc['kind']]}", doc)
    kc = cluster.mint_kubeconfig(f"system:nodeagent:{node}", [members], tmp_path / "a.kc")
    return Kube.from_kubeconfig(str(kc))


def via_proxy(port: int, admin_kubeconfig: str, tmp_path: Path) -> Kube:
    """The admin's client, through a relay listening on `port` (tests/tcpproxy.py)."""
    cfg = yaml.safe_load(Path(admin_kubeconfig).read_text())
    for entry in cfg["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = tmp_path / f"via-{port}.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return Kube.from_kubeconfig(str(path))
