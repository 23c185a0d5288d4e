"""Tests of the local cluster harness itself: control plane, kubelet simulator, CLI."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hack.k8sversion import kubelet_version
from hack.kubeutil import wait_until as wait_for
from hack.localcluster import Cluster, ClusterError
from hack.localcluster.kubelet_sim import BOOT_ID, READY_DELAY, REJECT, TERMINATION_DELAY
from hack.localcluster.reflector import Reflector
from nodeagent.kube.client import ApiError, Kube, KubeError

REPO = Path(__file__).resolve().parents[1]
NODES = ("harness-a", "harness-b")
NS = "default"

JSON = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster.start(tmp_path_factory.mktemp("harness"))
    try:
        for name in NODES:
            c.add_node(name)
        yield c
    finally:
        c.stop()


@pytest.fixture()
def kube(cluster: Cluster) -> Kube:
    return cluster.kube


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _pod(name: str, node: str = NODES[0], annotations: dict[str, str] | None = None) -> JSON:
    container = {"name": "app", "image": "registry.invalid/app:1"}
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"nodeName": node, "containers": [container]},
    }


def _get_pod(kube: Kube, name: str) -> JSON | None:
    try:
        return kube.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _ready(pod: JSON | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _running(pod: JSON | None) -> bool:
    return ((pod or {}).get("status") or {}).get("phase") == "Running"


def _create_running(kube: Kube, pod: JSON) -> str:
    name = str(pod["metadata"]["name"])
    kube.post(f"/api/v1/namespaces/{NS}/pods", pod)
    wait_for(lambda: _ready(_get_pod(kube, name)), 20, f"pod {name} Ready", step=0.02)
    return name


def _delete_and_time(kube: Kube, name: str, grace: int = 30) -> float:
    started = time.monotonic()
    kube.delete(f"/api/v1/namespaces/{NS}/pods/{name}", {"gracePeriodSeconds": grace})
    wait_for(lambda: _get_pod(kube, name) is None, 40, f"pod {name} gone", step=0.01)
    return time.monotonic() - started


def test_deployment_pods_become_running_and_ready(cluster: Cluster, kube: Kube) -> None:
    name = _name("web")
    labels = {"app": name}
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]},
    }
    spec = {"replicas": 3, "selector": {"matchLabels": labels}, "template": template}
    deployment = {"metadata": {"name": name}, "spec": spec}
    kube.post(f"/apis/apps/v1/namespaces/{NS}/deployments", deployment)

    def pods() -> list[JSON]:
        items = kube.get(f"/api/v1/namespaces/{NS}/pods", labelSelector=f"app={name}")["items"]
        return list(items)

    wait_for(lambda: sum(_running(p) and _ready(p) for p in pods()) == 3, 30, "3 ready pods")
    for pod in pods():
        assert pod["spec"]["nodeName"] in NODES
        assert pod["status"]["podIP"]
        assert pod["status"]["containerStatuses"][0]["state"]["running"]
    wait_for(
        lambda: (
            kube.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")["status"].get(
                "availableReplicas"
            )
            == 3
        ),
        30,
        "deployment available",
    )


def test_daemonset_pods_run_on_every_simulated_node(kube: Kube) -> None:
    name = _name("ds")
    labels = {"app": name}
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "d", "image": "d"}]},
    }
    spec = {"selector": {"matchLabels": labels}, "template": template}
    kube.post(
        f"/apis/apps/v1/namespaces/{NS}/daemonsets", {"metadata": {"name": name}, "spec": spec}
    )

    def ready_nodes() -> set[str]:
        items = kube.get(f"/api/v1/namespaces/{NS}/pods", labelSelector=f"app={name}")["items"]
        return {p["spec"]["nodeName"] for p in items if _running(p) and _ready(p)}

    wait_for(lambda: set(NODES) <= ready_nodes(), 30, "daemon pods on every node")


def test_graceful_delete_is_finished_at_once(kube: Kube) -> None:
    name = _create_running(kube, _pod(_name("grace")))
    took = _delete_and_time(kube, name, grace=30)
    assert took < 2.0


def test_termination_delay_is_respected(kube: Kube) -> None:
    name = _create_running(kube, _pod(_name("slow"), annotations={TERMINATION_DELAY: "1500ms"}))
    took = _delete_and_time(kube, name, grace=30)
    assert 1.5 <= took < 4.0


def test_termination_delay_is_capped_by_grace_period(kube: Kube) -> None:
    name = _create_running(kube, _pod(_name("capped"), annotations={TERMINATION_DELAY: "30s"}))
    took = _delete_and_time(kube, name, grace=1)
    assert 1.0 <= took < 4.0


def test_ready_delay(kube: Kube) -> None:
    name = _name("late")
    pod = _pod(name, node=NODES[1], annotations={READY_DELAY: "1s"})
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    started = time.monotonic()
    kube.post(f"/api/v1/namespaces/{NS}/pods", pod)
    wait_for(lambda: _running(_get_pod(kube, name)), 10, "running", step=0.02)
    assert not _ready(_get_pod(kube, name))
    wait_for(lambda: _ready(_get_pod(kube, name)), 10, "ready", step=0.02)
    assert time.monotonic() - started >= 1.0


def test_reject_annotation_fails_pod_like_the_kubelet(kube: Kube) -> None:
    name = _name("rejected")
    pod = _pod(name, annotations={REJECT: "OutOfcpu"})
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}}
    kube.post(f"/api/v1/namespaces/{NS}/pods", pod)
    wait_for(lambda: (_get_pod(kube, name) or {})["status"].get("phase") == "Failed", 10, "Failed")
    status = (_get_pod(kube, name) or {})["status"]
    assert status["reason"] == "OutOfcpu"
    assert status["message"].startswith(
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: "
    )
    assert status["message"].endswith("capacity: 32000")
    assert not status.get("containerStatuses")


def test_boot_id_follows_node_annotation(kube: Kube) -> None:
    path = f"/api/v1/nodes/{NODES[1]}"
    old = kube.get(path)
    assert old["status"]["nodeInfo"]["bootID"] == old["metadata"]["annotations"][BOOT_ID]
    assert old["status"]["nodeInfo"]["kubeletVersion"] == kubelet_version()
    new_id = str(uuid.uuid4())
    kube.merge_patch(path, {"metadata": {"annotations": {BOOT_ID: new_id}}})
    wait_for(lambda: kube.get(path)["status"]["nodeInfo"]["bootID"] == new_id, 10, "new boot id")


def test_minted_identity_is_forbidden(cluster: Cluster, tmp_path: Path) -> None:
    path = cluster.mint_kubeconfig("alice", ["developers"], tmp_path / "alice.kubeconfig")
    with pytest.raises(ApiError) as err:
        Kube.from_kubeconfig(str(path)).get(f"/api/v1/namespaces/{NS}/pods")
    assert err.value.status == 403
    assert "alice" in str(err.value)


def test_kubelet_identity_is_confined_to_its_node(cluster: Cluster, tmp_path: Path) -> None:
    """The API server runs as kubeadm runs it: Node authorizer and NodeRestriction."""
    node = Kube.from_kubeconfig(
        str(cluster.mint_node_kubeconfig(NODES[0], tmp_path / "kubelet.kubeconfig"))
    )
    assert node.get(f"/api/v1/nodes/{NODES[0]}")["metadata"]["name"] == NODES[0]
    with pytest.raises(ApiError) as read_other:
        node.get(f"/api/v1/nodes/{NODES[1]}")
    assert read_other.value.status == 403
    with pytest.raises(ApiError) as taint_self:
        node.merge_patch(
            f"/api/v1/nodes/{NODES[0]}",
            {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}},
        )
    assert taint_self.value.status == 403  # NodeRestriction: a node may not taint itself
    with pytest.raises(ApiError) as pdbs:
        node.get("/apis/policy/v1/poddisruptionbudgets")
    assert pdbs.value.status == 403


def test_admission_as_in_production(cluster: Cluster, kube: Kube) -> None:
    """ServiceAccount admission mounts a token; PodSecurity enforces a namespace's level."""
    name = _create_running(kube, _pod(_name("sa")))
    pod = _get_pod(kube, name) or {}
    assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])
    ns = _name("restricted")
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    kube.post("/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
    with pytest.raises(ApiError) as refused:
        kube.post(f"/api/v1/namespaces/{ns}/pods", _pod("privileged"))
    assert refused.value.status == 403
    assert "PodSecurity" in str(refused.value)


def _etcd_range_at(cluster: Cluster, revision: int) -> int:
    body = {"key": base64.b64encode(b"/").decode(), "revision": revision}
    req = urllib.request.Request(f"{cluster.etcd_url}/v3/kv/range", json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_compact_etcd(cluster: Cluster, kube: Kube) -> None:
    before = int(kube.get("/api/v1/namespaces/default/configmaps")["metadata"]["resourceVersion"])
    kube.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": _name("bump")}})
    assert _etcd_range_at(cluster, before) == 200
    assert cluster.compact_etcd() > before
    assert _etcd_range_at(cluster, before) != 200  # "required revision has been compacted"


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_simulator_survives_apiserver_restart(cluster: Cluster, kube: Kube, crash: bool) -> None:
    cluster.stop_apiserver(crash=crash)
    with pytest.raises(KubeError):
        kube.get("/api/v1/nodes")
    cluster.start_apiserver()
    name = _create_running(kube, _pod(_name("after-restart")))
    assert _delete_and_time(kube, name) < 5.0


def _processes_under(workdir: Path) -> list[int]:
    marker = str(workdir).encode() + b"/"
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def test_cli_up_down_leaves_no_process(tmp_path: Path) -> None:
    workdir, kubeconfig = tmp_path / "cluster", tmp_path / "kubeconfig"
    env = {k: v for k, v in os.environ.items() if k != "NODEAGENT_CLUSTER_DIR"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(REPO / "hack" / "cluster"), *args, "--workdir", str(workdir)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)

    try:
        up = cli("up", "--kubeconfig", str(kubeconfig))
        assert up.returncode == 0, up.stderr
        assert kubeconfig.exists()
        assert len(_processes_under(workdir)) == 5
        again = cli("up", "--kubeconfig", str(kubeconfig))
        assert again.returncode == 0 and "already up" in again.stdout
        node = cli("add-node", "cli-node")
        assert node.returncode == 0, node.stderr
        assert (
            Kube.from_kubeconfig(str(kubeconfig)).get("/api/v1/nodes/cli-node")["metadata"]["name"]
            == "cli-node"
        )
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert _processes_under(workdir) == []


def test_failed_start_raises_with_log_tail_and_cleans_up(tmp_path: Path) -> None:
    workdir = tmp_path / "broken"
    with pytest.raises(ClusterError) as err:
        Cluster.start(workdir, apiserver_extra_args=["--no-such-flag"])
    assert "kube-apiserver exited" in str(err.value)
    assert "no-such-flag" in str(err.value)
    assert _processes_under(workdir) == []


class _FakeKube:
    """Lists return one more object each time; the first watch fails with 410 Gone."""

    def __init__(self) -> None:
        self.lists = 0
        self.watches = 0

    def request(self, method: str, path: str, **_: Any) -> JSON:
        self.lists += 1
        items = [{"metadata": {"uid": f"u{i}", "resourceVersion": "1"}} for i in range(self.lists)]
        return {"metadata": {"resourceVersion": str(self.lists)}, "items": items}

    def watch(
        self, path: str, query: dict[str, str], length: int, silence: float
    ) -> Iterator[JSON]:
        self.watches += 1
        if self.watches == 1:
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
        else:
            time.sleep(0.05)


def test_reflector_relists_after_410() -> None:
    seen: list[tuple[str, str]] = []
    fake = _FakeKube()
    reflector = Reflector(
        cast(Kube, fake),
        "/api/v1/pods",
        lambda kind, obj: seen.append((kind, obj["metadata"]["uid"])),
    )
    reflector.start()
    try:
        wait_for(lambda: fake.lists >= 2, 5, "a relist", step=0.01)
    finally:
        reflector.stopped.set()
    assert seen[:3] == [("ADDED", "u0"), ("ADDED", "u0"), ("ADDED", "u1")]
