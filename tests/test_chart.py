"""The Helm chart and the plain manifests rendered from it: lint, schema, versions, and
every rendered object accepted by the real API server (admission and PodSecurity
included) with the real prometheus-operator CRDs installed."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import nodeagent
from hack import kubeutil as ku
from hack.chart import (
    CHART,
    LOCAL_IMAGE,
    helm,
    helm_binary,
    kubectl,
    objects,
    privileged_namespace,
    render,
)
from nodeagent.kube.client import ApiError, Kube

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "packaging" / "manifests" / "nodeagent.yaml"

# Every toggle away from its default at once, and the other identity.
NON_DEFAULT = [
    "serviceAccount.name=agent",
    "hostPID=true",
    "hostNetwork=true",
    "logindDropIn.enabled=true",
    "serviceMonitor.enabled=true",
    "podMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "grafanaDashboard.enabled=true",
    "grafanaDashboard.annotations.grafana_folder=Nodes",
    "image.tag=0.1.0-custom",
    "config.drain.deadline=90s",
    "extraEnv[0].name=NODEAGENT_LOG_FORMAT",
    "extraEnv[0].value=text",
    "podSecurityContext.seLinuxOptions.type=super_t",
]
KUBELET = ["identity=kubelet", "kubeletIdentity.kubeconfig=/var/lib/kubelet/kubeconfig"]
# Its Role goes into kured's namespace (tests/test_alongside_cluster.py creates it for real).
KURED = ["kured.daemonSet=kube-system/kured"]


def crd_dir() -> Path:
    helm = Path(helm_binary())
    (version,) = re.findall(
        r"^promop_version=(\S+)", (ROOT / "hack/build-helm.sh").read_text(), re.M
    )
    return helm.parent.parent / f"prometheus-operator-crds-{version}"


@pytest.fixture
def cluster_scoped(cluster: Any) -> Iterator[list[dict[str, Any]]]:
    """A list for the cluster-scoped objects a test applies from a rendering, deleted
    after the test: left behind, the kubelet identity's PDB reader (bound to all of
    system:nodes) would let later tests' kubelet identities read PDBs."""
    applied: list[dict[str, Any]] = []
    yield applied
    if applied:
        kubectl(
            cluster, "delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(applied)
        )


@pytest.fixture(scope="module")
def monitoring_crds(cluster: Any, kube: Kube) -> None:
    """The real CRDs from prometheus-operator's module: a stub would accept anything."""
    for path in sorted(crd_dir().glob("*.yaml")):
        done = kubectl(cluster, "apply", "--server-side", "-f", str(path))
        assert done.returncode == 0, done.stderr
    for kind in ("servicemonitors", "podmonitors", "prometheusrules"):
        # Polled rather than `kubectl wait`: kubectl 1.35 fails at once ("accessor
        # error") on a CRD whose status has no conditions yet, instead of waiting.
        ku.wait_until(functools.partial(crd_established, kube, kind), 60, f"CRD {kind} Established")


def crd_established(kube: Kube, kind: str) -> bool:
    crd = kube.get(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind}.monitoring.coreos.com"
    )
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def test_lint_strict() -> None:
    for values in ([], NON_DEFAULT, KUBELET, KURED, KUBELET + KURED):
        sets = [arg for v in values for arg in ("--set", v)]
        done = helm("lint", "--strict", str(CHART), *sets, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("metrics.port=abc", "at '/metrics/port': got string, want integer"),
        ("hostPID=yes", "at '/hostPID': got string, want boolean"),
        ("identity=root", "at '/identity': value must be one of"),
        ("image.digest=latest", "at '/image/digest': 'latest' does not match pattern"),
        ("metric.port=1", "additional properties 'metric' not allowed"),
        ("kured.daemonSet=kured", "at '/kured/daemonSet': 'kured' does not match pattern"),
    ],
)
def test_schema_rejects(value: str, message: str) -> None:
    done = helm("template", "x", str(CHART), "--set", value, check=False)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert "values don't meet the specifications of the schema" in done.stderr


def test_kured_daemonset_is_named_once() -> None:
    """The grant and the key name one DaemonSet: a config key naming another fails."""
    other = "config.alongside.kured_daemonset=other/kured"
    done = helm("template", "x", str(CHART), "--set", KURED[0], "--set", other, check=False)
    assert done.returncode == 1, done.stdout
    assert "config.alongside.kured_daemonset (other/kured) is not kured.daemonSet" in done.stderr


def test_kube_version_floor() -> None:
    """A pod-bound token names its node from 1.32: the own-node policy needs it."""
    done = helm("template", "x", str(CHART), "--kube-version", "1.31.0", check=False)
    assert done.returncode == 1
    assert "chart requires kubeVersion: >=1.32.0-0" in done.stderr, done.stderr
    image = f"image.repository={LOCAL_IMAGE}"
    done = helm("template", "x", str(CHART), "--kube-version", "1.32.0", "--set", image)
    assert done.returncode == 0


def test_versions_agree() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["version"] == chart["appVersion"] == project["version"] == nodeagent.__version__
    (ds,) = [o for o in objects(render("r", "ns", [])) if o["kind"] == "DaemonSet"]
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.rsplit(":", 1)[1] == chart["appVersion"]


def test_plain_manifests_match_the_chart(tmp_path: Path) -> None:
    fresh = tmp_path / "nodeagent.yaml"
    subprocess.run([str(ROOT / "hack" / "render-manifests"), str(fresh)], check=True)
    assert MANIFESTS.read_text() == fresh.read_text(), "run hack/render-manifests"
    kinds = [o["kind"] for o in objects(MANIFESTS.read_text())]
    assert kinds[0] == "Namespace" and "DaemonSet" in kinds


def test_config_is_valid_for_the_agent(tmp_path: Path) -> None:
    """The rendered config.toml loads in the agent itself: a key the chart invents fails."""
    from nodeagent import config

    for values in ([], NON_DEFAULT, KURED):
        docs = objects(render("r", "ns", values))
        (cm,) = [o for o in docs if o["kind"] == "ConfigMap" and "config.toml" in o["data"]]
        path = tmp_path / "config.toml"
        path.write_text(cm["data"]["config.toml"])
        (ds,) = [o for o in objects(render("r", "ns", values)) if o["kind"] == "DaemonSet"]
        env = {
            e["name"]: e["value"]
            for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]
            if "value" in e
        }
        cfg = config.load(str(path), environ=env | {"NODE_NAME": "n1"})
        assert cfg.form == "pod" and cfg.reporting.metrics_address == "0.0.0.0:9102"


@pytest.mark.parametrize(
    ("name", "values"),
    [("default", []), ("non-default", NON_DEFAULT), ("kubelet", KUBELET)],
)
def test_server_accepts_every_object(
    name: str, values: list[str], cluster: Any, kube: Kube, monitoring_crds: None
) -> None:
    ns = privileged_namespace(kube, ku.unique(f"chart-{name}"))
    text = render(f"na-{name}", ns, values)
    done = kubectl(cluster, "apply", "--dry-run=server", "-n", ns, "-f", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    created = done.stdout.strip().splitlines()
    assert len(created) == len(objects(text)), done.stdout
    assert all(line.endswith("(server dry run)") for line in created), done.stdout
    assert "Warning" not in done.stderr, done.stderr


def test_plain_manifests_accepted(cluster: Any, kube: Kube) -> None:
    """`kubectl apply -f` of the plain manifests: their Namespace for real (a dry run
    cannot create what the rest goes into; the DaemonSet would run on every test node),
    then all of it as a server dry run."""
    text = MANIFESTS.read_text()
    namespace = yaml.safe_dump(objects(text)[0])
    assert kubectl(cluster, "apply", "-f", "-", stdin=namespace).returncode == 0
    done = kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()) == len(objects(text))


@pytest.mark.parametrize("level", ["privileged", "baseline"])
def test_the_agent_pod_needs_podsecurity_privileged(level: str, kube: Kube) -> None:
    """The DaemonSet's pod as its controller would create it: admitted only where the
    namespace enforces "privileged" (what NOTES.txt and the README ask for)."""
    ns = privileged_namespace(kube, ku.unique(f"psa-{level}"), level)
    (ds,) = [o for o in objects(render("na", ns, [])) if o["kind"] == "DaemonSet"]
    template = ds["spec"]["template"]
    template["spec"]["serviceAccountName"] = "default"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", **{
        "labels": template["metadata"]["labels"]}}, "spec": template["spec"]}  # fmt: skip
    path = f"/api/v1/namespaces/{ns}/pods?dryRun=All"
    if level == "privileged":
        kube.post(path, pod)
        return
    with pytest.raises(ApiError) as err:
        kube.post(path, pod)
    assert err.value.status == 403 and "violates PodSecurity" in str(err.value)
    assert "hostPath volumes" in str(err.value)


def test_schema_file_is_json() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])


@pytest.mark.parametrize("values", [[], NON_DEFAULT, KUBELET])
def test_the_pod_stays_through_the_autoscalers_drain_and_tolerates_every_taint(
    values: list[str],
) -> None:
    """The Cluster Autoscaler evicts DaemonSet pods unless they opt out; Karpenter neither
    waits for nor evicts a pod tolerating its taint; the agent's own taint and the others'
    must not keep the agent off a node being drained."""
    (ds,) = [o for o in objects(render("r", "ns", values)) if o["kind"] == "DaemonSet"]
    template = ds["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/enable-ds-eviction"] == "false"
    assert {"operator": "Exists"} in template["spec"]["tolerations"]
