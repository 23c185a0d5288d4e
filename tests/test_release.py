"""Installing from a registry, as a cluster whose nodes pull their images does: hack/release
pushes the two-architecture image index and the chart to a real OCI registry started here on
loopback (go-containerregistry's `crane registry serve`, hack/ociregistry.py), and writes the
release manifest; a real node's containerd then PULLS the image from that registry (nothing
imported from a tar), for the chart installed by `helm install oci://...` and for the
manifest applied by `kubectl apply -f`. And the source chart, which names no image, fails
its install in one line instead of leaving every node in ImagePullBackOff.

The real node shares the host's network namespace, so its containerd reaches the registry
on the host's 127.0.0.1 (plain HTTP, as containerd speaks to a loopback registry); the
agent's values are the real-node DaemonSet tests' (hack/realnode/daemonset.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.test_realnode as realnode
from hack import kubeutil as ku
from hack.agentproc import free_port
from hack.chart import CHART, helm, kubectl, objects, privileged_namespace
from hack.emulation import host_arch
from hack.ociregistry import LoopbackRegistry, crane_binary
from hack.realnode import NodeOptions, RealNode
from hack.realnode import daemonset as ds
from nodeagent.kube.client import JSON, Kube

# Cold, hack/release first builds the image for both architectures (arm64 emulated).
pytestmark = pytest.mark.timeout(5400)

ROOT = Path(__file__).resolve().parent.parent
RELEASE_LABEL = "test.nodeagent.io/release"
PATH = "nodeagent-test"
RELEASE_TIMEOUT = 5000
READY_TIMEOUT = 240
env = realnode.env  # the real-node fixture


@dataclass(frozen=True)
class Release:
    """What hack/release pushed, and the label of the nodes its manifest's DaemonSet runs on."""

    registry: LoopbackRegistry
    version: str
    image: str  # repository:tag@digest
    chart: str  # oci://.../nodeagent
    manifest: Path
    token: str
    seconds: float

    @property
    def repository(self) -> str:
        return self.image.split("@")[0].rsplit(":", 1)[0]

    @property
    def digest(self) -> str:
        return self.image.split("@")[1]

    @property
    def by_digest(self) -> str:
        """repository@digest: what a runtime records for the image it pulled."""
        return f"{self.repository}@{self.digest}"

    @property
    def selector(self) -> dict[str, str]:
        return {RELEASE_LABEL: self.token}

    def served(self) -> str:
        """The registry's log: one line per request it answered."""
        return self.registry.log.read_text(errors="replace")


def agent_values(selector: dict[str, str]) -> list[str]:
    """The real-node DaemonSet's values, the image pulled (they import it and never pull)."""
    return [*ds.values(selector, metrics_port=free_port()), "image.pullPolicy=IfNotPresent"]


def summary(stdout: str) -> dict[str, str]:
    """hack/release's last lines: `image REF`, `chart oci://... --version V (DIGEST)`,
    `manifest PATH`."""
    return dict(line.split(" ", 1) for line in stdout.strip().splitlines())


def run_release(registry: LoopbackRegistry, dist: Path, *args: str) -> dict[str, str]:
    """hack/release to the test's registry; its summary (it must succeed)."""
    cmd = [str(ROOT / "hack" / "release"), "--registry", f"{registry.host}/{PATH}"]
    done = subprocess.run(
        [*cmd, "--dist", str(dist), *args],
        capture_output=True, text=True, timeout=RELEASE_TIMEOUT, check=False,
    )  # fmt: skip
    print(done.stderr)
    assert done.returncode == 0, done.stderr
    return summary(done.stdout)


def crane(*args: str) -> str:
    done = subprocess.run(
        [crane_binary(), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    work = tmp_path_factory.mktemp("release")
    token = ku.unique("rel")
    with LoopbackRegistry.start(work / "registry") as registry:
        sets = [arg for v in agent_values({RELEASE_LABEL: token}) for arg in ("--set", v)]
        started = time.monotonic()
        out = run_release(registry, work / "dist", *sets)
        took = time.monotonic() - started
        chart, version = out["chart"].split(" (")[0].split(" --version ")
        yield Release(registry, version, out["image"], chart, Path(out["manifest"]), token, took)


def test_the_release_is_in_the_registry(released: Release) -> None:
    """Both architectures under the version's tag, the chart beside them: read back with the
    registry clients (crane, helm), not from hack/release's own words."""
    tagged = f"{released.repository}:{released.version}"
    platforms = sorted(
        f"{m['platform']['os']}/{m['platform']['architecture']}"
        for m in json.loads(crane("manifest", tagged))["manifests"]
    )
    assert platforms == ["linux/amd64", "linux/arm64"]
    assert crane("digest", tagged).strip() == released.digest
    shown = helm("show", "chart", released.chart, "--version", released.version, "--plain-http")
    meta = yaml.safe_load(shown.stdout)
    assert meta["version"] == meta["appVersion"] == released.version
    values = yaml.safe_load(
        helm("show", "values", released.chart, "--version", released.version, "--plain-http").stdout
    )
    assert values["image"]["repository"] == released.repository
    assert values["image"]["digest"] == released.digest
    print(f"hack/release (image cached or built, both pushes) {released.seconds:.1f}s")


def test_another_version_tags_the_same_build(released: Release, tmp_path: Path) -> None:
    """--version V: the same image index under tag V (its digest unchanged), the chart at
    version V, the manifest named for V."""
    version = "0.1.1-rc.1"
    out = run_release(released.registry, tmp_path, "--version", version)
    assert out["image"] == f"{released.repository}:{version}@{released.digest}"
    assert sorted(crane("ls", released.repository).split()) == [released.version, version]
    shown = helm("show", "chart", released.chart, "--version", version, "--plain-http")
    assert yaml.safe_load(shown.stdout)["appVersion"] == version
    assert Path(out["manifest"]) == tmp_path / f"nodeagent_{version}.yaml"
    assert f'image: "{out["image"]}"' in Path(out["manifest"]).read_text()


def release_node(env: Any, released: Release, suffix: str) -> RealNode:
    labels = {ku.GROUP_LABEL: env.group, **released.selector}
    name = f"{env.group}-{suffix}"
    node = RealNode.create(env.cluster, name, env.tmp / suffix, NodeOptions(labels=labels))
    env.nodes.append(node)
    print(f"{name}: boot to Ready {node.boot():.1f}s")
    return node


def node_images(node: RealNode) -> list[str]:
    done = node.run("ctr", "-n", "k8s.io", "images", "ls", "-q", timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def agent_running(kube: Kube, ns: str, node: RealNode) -> JSON:
    """The agent's one pod, Ready on the real node (its Events printed if it never is)."""

    def one() -> JSON | None:
        live = [p for p in ds.ready_agents(kube, ns) if p["spec"].get("nodeName") == node.name]
        return live[0] if len(live) == 1 else None

    try:
        return dict(ku.wait_until(one, READY_TIMEOUT, "the agent pod Ready"))
    except AssertionError:
        for event in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]:
            print("event:", event["reason"], event["message"])
        raise


def platform_manifest(released: Release, arch: str) -> str:
    """The digest of one architecture's manifest in the pushed index."""
    return crane("digest", "--platform", f"linux/{arch}", released.image).strip()


def assert_pulled(
    node: RealNode, kube: Kube, ns: str, pod: JSON, released: Release, since: int
) -> None:
    """The pod runs the released image, which the node's containerd pulled from the
    registry: after `since` (an offset in its log) the registry served the host's
    architecture's manifest, the runtime records the image by the pushed index's digest,
    and the kubelet says it pulled it."""
    (status,) = pod["status"]["containerStatuses"]
    assert status["imageID"] == released.by_digest, status
    assert released.by_digest in node_images(node)
    served = released.served()[since:]
    manifest = platform_manifest(released, host_arch())
    assert f"GET /v2/{PATH}/nodeagent/manifests/{manifest}" in served, served
    assert f"GET /v2/{PATH}/nodeagent/blobs/sha256:" in served, served
    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    pulled = [e["message"] for e in events if e["reason"] == "Pulled"]
    assert any("Successfully pulled image" in m for m in pulled), pulled
    print("\n".join(pulled))


def test_helm_install_from_the_registry(
    env: Any, cluster: Any, kube: Kube, released: Release
) -> None:
    """`helm install oci://...`: the chart pulled from the registry, its default image the
    released one (no image value given), pulled by the node."""
    node = release_node(env, released, "helm")
    assert not [i for i in node_images(node) if released.registry.host in i]
    ns = privileged_namespace(kube, ku.unique("relhelm"))
    since = len(released.served())
    sets = [arg for v in agent_values(released.selector) for arg in ("--set", v)]
    started = time.monotonic()
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", ns]
    done = helm("install", ns, released.chart, "--version", released.version, "--plain-http",
                *kubeconfig, *sets, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        pod = agent_running(kube, ns, node)
        print(f"helm install to the agent Ready on {node.name}: {time.monotonic() - started:.1f}s")
        assert_pulled(node, kube, ns, pod, released, since)
        ku.wait_until(lambda: ds.agent_locks(node), 60, "the agent's logind delay lock")
    finally:
        helm("uninstall", ns, "--wait", "--timeout", "100s", *kubeconfig, check=False)


def test_kubectl_apply_of_the_release_manifest(
    env: Any, cluster: Any, kube: Kube, released: Release
) -> None:
    """`kubectl apply -f` of the manifest hack/release wrote: its image pinned by digest,
    pulled by the node."""
    docs = objects(released.manifest.read_text())
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == released.image and "@sha256:" in container["image"]
    node = release_node(env, released, "apply")
    assert not [i for i in node_images(node) if released.registry.host in i]
    since = len(released.served())
    started = time.monotonic()
    done = kubectl(cluster, "apply", "-f", str(released.manifest))
    assert done.returncode == 0, done.stderr
    try:
        ns = daemonset["metadata"]["namespace"]
        pod = agent_running(kube, ns, node)
        print(f"kubectl apply to the agent Ready on {node.name}: {time.monotonic() - started:.1f}s")
        assert_pulled(node, kube, ns, pod, released, since)
        ku.wait_until(lambda: ds.agent_locks(node), 60, "the agent's logind delay lock")
    finally:
        kubectl(cluster, "delete", "--ignore-not-found", "-f", str(released.manifest))


def test_an_install_naming_no_image_fails_at_once(cluster: Any, kube: Kube) -> None:
    """The source chart names no image: `helm install` stops with one line naming the value,
    and nothing is created (no DaemonSet whose pods could not pull on any node)."""
    ns = privileged_namespace(kube, ku.unique("relnoimg"))
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", ns]
    done = helm("install", "noimage", str(CHART), *kubeconfig, check=False)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "image.repository is unset" in line, line
    print(line)
    assert kube.get(f"/apis/apps/v1/namespaces/{ns}/daemonsets")["items"] == []
    assert helm("list", "--all", "-q", *kubeconfig).stdout.strip() == ""
