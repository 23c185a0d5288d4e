"""The chart's DaemonSet on a real node (hack/realnode: kubelet + containerd + logind in
systemd-nspawn): the image built by hack/build-image, imported into the node's
containerd, run by the real kubelet with the rendered manifest's mounts and the node's
own kubelet identity (the local control plane publishes no root CA, so no
ServiceAccount token volume could be built). A rollout of the DaemonSet replaces the
pod and leaves the Node as it was; a poweroff is drained by the new pod through the
node's real logind.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import pytest
import yaml

import tests.test_chart as chart
import tests.test_realnode as realnode
from hack.realnode import RealNode
from nodeagent.fence.marker import DRAIN_RESULT
from nodeagent.kube.client import JSON, Kube
from tests import kubeutil as ku
from tests.nspawn import hack
from tests.test_chart import kubectl, note_cluster_scoped, objects, privileged_namespace, render

pytestmark = pytest.mark.timeout(900)
env = realnode.env  # the real-node fixture
cluster_scoped = chart.cluster_scoped

KUBECONFIG = "/etc/kubernetes/kubelet.kubeconfig"  # hack/realnode's kubelet credentials


def apply(cluster: Any, node: str, ns: str, deadline: str, rbac: list[JSON]) -> JSON:
    """The chart for this node only (elsewhere the DaemonSet would run on simulated
    nodes), as `helm upgrade` would apply it; returns the rendered DaemonSet and adds
    its cluster-scoped objects to `rbac`."""
    values = [
        "identity=kubelet",
        f"kubeletIdentity.kubeconfig={KUBECONFIG}",
        "image.pullPolicy=Never",
        f"nodeSelector.kubernetes\\.io/hostname={node}",
        f"config.drain.deadline={deadline}",
        "config.log_format=text",
        # The real node's pods have a network without a route to the host, where the
        # local API server listens on loopback.
        "hostNetwork=true",
        # Host network means host ports: no surge (the new pod could not be placed).
        "updateStrategy.rollingUpdate.maxSurge=0",
        "updateStrategy.rollingUpdate.maxUnavailable=1",
        # The node's logind waits 5 s by default: the agent raises it.
        "logindDropIn.enabled=true",
    ]
    docs = objects(render(ns, ns, values))
    note_cluster_scoped(docs, rbac)
    done = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert done.returncode == 0, done.stderr
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds


def agent_pods(kube: Kube, ns: str) -> list[JSON]:
    return list(kube.get(f"/api/v1/namespaces/{ns}/pods")["items"])


def running_agent(kube: Kube, ns: str) -> JSON | None:
    live = [
        p
        for p in agent_pods(kube, ns)
        if ku.ready(p) and not p["metadata"].get("deletionTimestamp")
    ]
    return live[0] if len(live) == 1 else None


def agent_locks(node: RealNode) -> list[str]:
    out = node.run("systemd-inhibit", "--list", "--no-legend", "--no-pager").stdout
    return [line for line in out.splitlines() if "nodeagent" in line and "delay" in line]


def test_rollout_leaves_the_node_alone_and_poweroff_drains(
    env: Any, cluster: Any, kube: Kube, cluster_scoped: list[JSON]
) -> None:
    oci, docker = hack("build-image", 1800)
    del oci
    node = RealNode.create(cluster, f"{env.group}-ds", env.tmp / "ds", realnode.NodeOptions(
        labels={ku.GROUP_LABEL: env.group}))  # fmt: skip
    env.nodes.append(node)
    shutil.copyfile(docker, node.path("var/tmp/nodeagent.tar"))
    node.boot()
    # No registry: the image goes into the node's containerd as the test images do.
    done = node.run(
        "ctr", "-n", "k8s.io", "images", "import", "/var/tmp/nodeagent.tar", timeout=300
    )
    assert done.returncode == 0, done.stderr
    env.deployment("web", 1, realnode.POLITE, 2)
    ku.wait_until(lambda: len(ku.running(ku.pods_on(kube, node.name))) == 1, 120, "web")
    ns = privileged_namespace(kube, ku.unique("dsreal"))

    apply(cluster, node.name, ns, "30s", cluster_scoped)
    try:
        first = ku.wait_until(lambda: running_agent(kube, ns), 180, "the agent pod Ready")
    except AssertionError:
        for pod in agent_pods(kube, ns):
            print("agent pod:", pod["metadata"]["name"], pod.get("status"))
        print(kubectl(cluster, "get", "events", "-n", ns).stdout)
        raise
    ku.wait_until(lambda: agent_locks(node), 60, "the agent's logind delay lock")
    before = ku.node(kube, node.name)

    # A rollout: the config changes, so does the pod template's checksum.
    started = time.monotonic()
    apply(cluster, node.name, ns, "40s", cluster_scoped)

    def replaced() -> JSON | None:
        pod = running_agent(kube, ns)
        gone = all(p["metadata"]["uid"] != first["metadata"]["uid"] for p in agent_pods(kube, ns))
        return pod if pod and gone else None

    second = ku.wait_until(replaced, 180, "the rollout")
    ku.wait_until(lambda: agent_locks(node), 60, "the new pod's delay lock")
    print(f"rollout: new pod Ready and old one gone in {time.monotonic() - started:.1f}s")
    after = ku.node(kube, node.name)
    assert not after["spec"].get("unschedulable"), after["spec"]
    assert DRAIN_RESULT not in (after["metadata"].get("annotations") or {})
    assert len(ku.running(ku.pods_on(kube, node.name))) >= 1  # web still there
    assert before["spec"] == after["spec"]
    assert second["metadata"]["uid"] != first["metadata"]["uid"]

    # A poweroff: the new pod drains the node through the real logind.
    env.open_spare()
    assert node.run("systemctl", "poweroff").returncode == 0
    node.wait_exit(120)
    logs = sorted(node.path("var/log/pods").glob(f"{ns}_*/nodeagent/*.log"))
    print("\n".join(f"--- {log}\n{log.read_text(errors='replace')}" for log in logs))
    drained = ku.node(kube, node.name)
    assert drained["spec"].get("unschedulable"), drained["spec"]
    assert drained["metadata"]["annotations"].get(DRAIN_RESULT) == "drained"
