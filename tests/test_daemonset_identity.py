"""What each of the chart's identities prevents, with real credentials against the
local control plane (Node,RBAC authorization, NodeRestriction):

- identity=serviceAccount: the chart's ServiceAccount, ClusterRole and own-node
  ValidatingAdmissionPolicy, and a token bound to an agent pod on node A (so it names
  A). Cordon, status patch and pod delete on node B are refused; an eviction of B's
  pod is NOT: an Eviction names only the pod, and its inner delete runs no admission.
- identity=kubelet: node A's kubelet credentials (CN=system:node:A). The Node
  authorizer and NodeRestriction refuse all of the above on B, the eviction included.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import kubeutil as ku
from hack.chart import kubectl, objects, privileged_namespace, render
from nodeagent.kube.client import JSON, ApiError, Kube, node_path, pods_path


@pytest.fixture(scope="module")
def nodes(cluster: Any, kube: Kube) -> tuple[str, str]:
    """Two nodes, A (the agent's) and B (another), each running one bare pod."""
    group, a, b = ku.node_pair(cluster, kube, "ident")
    ku.open_node(kube, b)
    for node in (a, b):
        ku.bare_pod(kube, group, f"app-{node}", node)
    return a, b


def app_pod(kube: Kube, node: str) -> JSON:
    (pod,) = [p for p in ku.pods_on(kube, node) if p["metadata"]["name"].startswith("app-")]
    return pod


def apply(cluster: Any, docs: list[JSON]) -> None:
    done = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert done.returncode == 0, done.stderr


def token_kubeconfig(cluster: Any, token: str, path: Path) -> Path:
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "agent", "context": {"cluster": admin["clusters"][0]["name"],
                                                   "user": "agent"}}],
        "current-context": "agent",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def service_account(
    cluster: Any, kube: Kube, nodes: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kube]:
    """The chart's default objects (all but the DaemonSet: its controller would put a pod
    on every test node) and the agent's pod on A, as the DaemonSet would create it, with a
    token bound to that pod, as the kubelet would mount it."""
    a, _b = nodes
    ns = privileged_namespace(kube, ku.unique("ident-sa"))
    docs = objects(render("idsa", ns, []))
    apply(cluster, [d for d in docs if d["kind"] != "DaemonSet"])
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"] | {"nodeName": a}
    meta = {"name": "agent", "namespace": ns}
    pod = kube.post(pods_path(ns), {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                    "spec": spec})  # fmt: skip
    sa = spec["serviceAccountName"]
    ref = {"kind": "Pod", "apiVersion": "v1", "name": "agent", "uid": pod["metadata"]["uid"]}
    request = {"spec": {"audiences": [], "boundObjectRef": ref, "expirationSeconds": 3600}}
    issued = kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", request)
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    agent = Kube.from_kubeconfig(str(token_kubeconfig(cluster, issued["status"]["token"], path)))
    # The policy takes effect once the API server has compiled it.
    # (dry runs: admission runs, nothing changes).
    dry_cordon = {"spec": {"unschedulable": True}}
    ku.wait_until(
        lambda: refused(lambda: agent.merge_patch(node_path(nodes[1]) + "?dryRun=All", dry_cordon)),
        30,
        "the policy active",
    )
    try:
        yield agent
    finally:
        done = kubectl(cluster, "delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(
            [d for d in docs if d["kind"] not in ("DaemonSet",)]))  # fmt: skip
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def kubelet(
    cluster: Any, kube: Kube, nodes: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kube]:
    """A's kubelet credentials, plus the chart's PodDisruptionBudget reader for
    system:nodes (removed after: it is cluster-wide)."""
    ns = privileged_namespace(kube, ku.unique("ident-kl"))
    docs = objects(render("idkl", ns, ["identity=kubelet"]))
    rbac = [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    apply(cluster, rbac)
    path = tmp_path_factory.mktemp("kubelet") / "kubeconfig"
    try:
        yield Kube.from_kubeconfig(str(cluster.mint_node_kubeconfig(nodes[0], path)))
    finally:
        kubectl(cluster, "delete", "-f", "-", stdin=yaml.safe_dump_all(rbac))


def cordon(kube: Kube, node: str) -> Any:
    return kube.merge_patch(node_path(node), {"spec": {"unschedulable": True}})


def status_patch(kube: Kube, node: str) -> Any:
    cond = {"type": "NodeAgentReady", "status": "True", "reason": "Test", "message": "x"}
    return kube.strategic_patch(node_path(node) + "/status", {"status": {"conditions": [cond]}})


def delete_pod(kube: Kube, pod: JSON) -> Any:
    meta = pod["metadata"]
    return kube.delete(pods_path(meta["namespace"], meta["name"]))


def evict(kube: Kube, pod: JSON) -> Any:
    meta = pod["metadata"]
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}  # fmt: skip
    return kube.post(pods_path(meta["namespace"], meta["name"]) + "/eviction", body)


def refused(action: Any) -> str:
    """The 403's message, or '' when the action was allowed."""
    try:
        action()
    except ApiError as exc:
        assert exc.status == 403, exc
        return str(exc)
    return ""


def test_service_account_is_kept_to_its_own_node(
    service_account: Kube, kube: Kube, nodes: tuple[str, str]
) -> None:
    a, b = nodes
    assert not refused(lambda: cordon(service_account, a))
    assert not refused(lambda: status_patch(service_account, a))
    own_node_only = f"nodeagent on {a} may only change its own Node and its pods, not {b}"
    assert own_node_only in refused(lambda: cordon(service_account, b))
    assert own_node_only in refused(lambda: status_patch(service_account, b))
    assert own_node_only in refused(lambda: delete_pod(service_account, app_pod(kube, b)))
    assert not ku.node(kube, b)["spec"].get("unschedulable")


def test_service_account_eviction_gap(
    service_account: Kube, kube: Kube, nodes: tuple[str, str], cluster: Any
) -> None:
    """The documented gap: the ServiceAccount evicts a pod on another node."""
    _a, b = nodes
    victim = app_pod(kube, b)
    ns, name = victim["metadata"]["namespace"], victim["metadata"]["name"]
    assert not refused(lambda: evict(service_account, victim))
    ku.wait_until(lambda: not ku.exists(kube, pods_path(ns, name)), 30, "the evicted pod gone")
    ku.bare_pod(kube, ns, name, b)


def test_kubelet_identity_is_kept_to_its_own_node(
    kubelet: Kube, kube: Kube, nodes: tuple[str, str]
) -> None:
    a, b = nodes
    assert not refused(lambda: status_patch(kubelet, a))
    assert not refused(lambda: kubelet.get("/apis/policy/v1/poddisruptionbudgets"))
    for action in (
        lambda: cordon(kubelet, b),
        lambda: status_patch(kubelet, b),
        lambda: delete_pod(kubelet, app_pod(kube, b)),
        lambda: evict(kubelet, app_pod(kube, b)),  # what the ServiceAccount could do
    ):
        assert refused(action)
    assert "can only evict pods with spec.nodeName set to itself" in refused(
        lambda: evict(kubelet, app_pod(kube, b))
    )
    # Its own node's pods it may evict: the drain works under this identity.
    own = app_pod(kube, a)
    assert not refused(lambda: evict(kubelet, own))
    ku.bare_pod(kube, own["metadata"]["namespace"], f"app-{a}-2", a)
