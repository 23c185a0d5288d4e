"""The agent in its DaemonSet form on real nodes (hack/realnode): the image built by
hack/build-image imported into the node's containerd, and the Helm chart's DaemonSet
rendered for the node's own kubelet identity (the local control plane publishes no root
CA, so no ServiceAccount token volume could be built). tests/test_daemonset_realnode.py
and the departure benchmark's kind daemonset-poweroff (hack/departure/scene.py) share it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from hack import kubeutil as ku
from hack.chart import kubectl, note_cluster_scoped, objects, render
from hack.deb import hack
from hack.realnode import RealNode

JSON = dict[str, Any]
KUBECONFIG = "/etc/kubernetes/kubelet.kubeconfig"  # hack/realnode's kubelet credentials
# Inside the node's root, where the archive is copied before the import.
INSIDE = "var/tmp/nodeagent.tar"
IMPORT_TIMEOUT = 300
BUILD_TIMEOUT = 1800


class DaemonSetError(RuntimeError):
    """The image could not be imported or the chart not applied."""


def image_archive() -> Path:
    """The docker archive of the image (hack/build-image reuses an up-to-date one)."""
    return hack("build-image", BUILD_TIMEOUT)[1]


def import_image(node: RealNode, archive: Path) -> None:
    """No registry: the image goes into the node's containerd as the test images do."""
    target = node.path(INSIDE)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(archive, target)
    done = node.run("ctr", "-n", "k8s.io", "images", "import", "/" + INSIDE, timeout=IMPORT_TIMEOUT)
    if done.returncode != 0:
        raise DaemonSetError(f"importing the agent's image into {node.name}: {done.stderr}")


def values(
    selector: dict[str, str], deadline: str | None = None, metrics_port: int | None = None
) -> list[str]:
    """The chart's values for the real nodes `selector` picks (elsewhere the DaemonSet
    would run on simulated nodes); the chart's drain deadline and metrics port unless
    given. Its JSON logs stay: the agent's milestones are read from them (hack/milestones.py)."""
    keys = [k.replace(".", "\\.") for k in selector]
    return [
        "identity=kubelet",
        f"kubeletIdentity.kubeconfig={KUBECONFIG}",
        "image.pullPolicy=Never",
        *[f"nodeSelector.{k}={v}" for k, v in zip(keys, selector.values(), strict=True)],
        *([f"config.drain.deadline={deadline}"] if deadline else []),
        *([f"metrics.port={metrics_port}"] if metrics_port else []),
        # No request to a real 169.254.169.254 from the host's network.
        "config.warnings.cloud=off",
        # The real node's pods have a network without a route to the host, where the
        # local API server listens on loopback.
        "hostNetwork=true",
        # Host network means host ports: no surge (the new pod could not be placed).
        "updateStrategy.rollingUpdate.maxSurge=0",
        "updateStrategy.rollingUpdate.maxUnavailable=1",
        # The node's logind waits 5 s by default: the agent raises it.
        "logindDropIn.enabled=true",
    ]


def apply(
    cluster: Any,
    ns: str,
    chart_values: list[str],
    rbac: list[JSON],
    release: str = "",
    verbose: bool = False,
) -> JSON:
    """The chart as `helm upgrade` would apply it (release `release`, or `ns`, in `ns`);
    returns the rendered DaemonSet and adds its cluster-scoped objects to `rbac`. With
    `verbose`, the agent runs with -v (its INFO lines: what it heard, its drain's
    outcome), as the host form's journal gets them from hack/deb.py's drop-in."""
    docs = objects(render(release or ns, ns, chart_values))
    note_cluster_scoped(docs, rbac)
    if verbose:
        for doc in docs:
            if doc["kind"] == "DaemonSet":
                doc["spec"]["template"]["spec"]["containers"][0]["args"].append("-v")
    done = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    if done.returncode != 0:
        raise DaemonSetError(f"applying the chart: {done.stderr}")
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds


def remove_cluster_scoped(cluster: Any, rbac: list[JSON]) -> None:
    """The ClusterRole and ClusterRoleBinding a namespace's deletion leaves behind (the
    kubelet identity's PDB reader is bound to all of system:nodes)."""
    if rbac:
        done = kubectl(
            cluster, "delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(rbac)
        )
        if done.returncode != 0:
            raise DaemonSetError(f"deleting the chart's cluster-scoped objects: {done.stderr}")


def agent_pods(kube: Any, ns: str) -> list[JSON]:
    return list(kube.get(f"/api/v1/namespaces/{ns}/pods")["items"])


def ready_agents(kube: Any, ns: str) -> list[JSON]:
    """The agent pods Ready and not being deleted."""
    return [
        p
        for p in agent_pods(kube, ns)
        if ku.ready(p) and not p["metadata"].get("deletionTimestamp")
    ]


def agent_locks(node: RealNode) -> list[str]:
    """The agent's logind delay locks on `node`, as logind lists them (the pod's equivalent
    of the host form's lock-taken milestone, which goes to the pod's log file)."""
    out = node.run("systemd-inhibit", "--list", "--no-legend", "--no-pager").stdout
    return [line for line in out.splitlines() if "nodeagent" in line and "delay" in line]


def pod_logs(node: RealNode, ns: str) -> list[Path]:
    """The kubelet's log files of the agent's containers in `ns` on `node` (every pod)."""
    return sorted(node.path("var/log/pods").glob(f"{ns}_*/nodeagent/*.log"))
