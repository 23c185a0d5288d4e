"""The chart's DaemonSet on a real node (hack/realnode: kubelet + containerd + logind in
systemd-nspawn): the image built by hack/build-image, imported into the node's
containerd, run by the real kubelet with the rendered manifest's mounts and the node's
own kubelet identity (the local control plane publishes no root CA, so no
ServiceAccount token volume could be built). A rollout of the DaemonSet replaces the
pod and leaves the Node as it was; a poweroff is drained by the new pod through the
node's real logind.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import tests.test_chart as chart
import tests.test_realnode as realnode
from hack import kubeutil as ku
from hack.chart import kubectl, privileged_namespace
from hack.localcluster.procs import free_ports
from hack.realnode import RealNode
from hack.realnode import daemonset as ds
from nodeagent.fence.marker import DRAIN_RESULT
from nodeagent.kube.client import JSON, Kube

pytestmark = pytest.mark.timeout(900)
env = realnode.env  # the real-node fixture
cluster_scoped = chart.cluster_scoped


def apply(cluster: Any, node: str, ns: str, deadline: str, rbac: list[JSON]) -> JSON:
    """The chart for this node only, as `helm upgrade` would apply it, its metrics on a free
    port: the real node shares the host's network, where 9102 may be taken."""
    (port,) = free_ports(1)
    values = ds.values({"kubernetes.io/hostname": node}, deadline, metrics_port=port)
    return ds.apply(cluster, ns, values, rbac)


def running_agent(kube: Kube, ns: str) -> JSON | None:
    live = ds.ready_agents(kube, ns)
    return live[0] if len(live) == 1 else None


def test_rollout_leaves_the_node_alone_and_poweroff_drains(
    env: Any, cluster: Any, kube: Kube, cluster_scoped: list[JSON]
) -> None:
    archive = ds.image_archive()
    node = RealNode.create(cluster, f"{env.group}-ds", env.tmp / "ds", realnode.NodeOptions(
        labels={ku.GROUP_LABEL: env.group}))  # fmt: skip
    env.nodes.append(node)
    node.boot()
    ds.import_image(node, archive)
    env.deployment("web", 1, realnode.POLITE, 2)
    ku.wait_until(lambda: len(ku.running(ku.pods_on(kube, node.name))) == 1, 120, "web")
    ns = privileged_namespace(kube, ku.unique("dsreal"))

    apply(cluster, node.name, ns, "30s", cluster_scoped)
    try:
        first = ku.wait_until(lambda: running_agent(kube, ns), 180, "the agent pod Ready")
    except AssertionError:
        for pod in ds.agent_pods(kube, ns):
            print("agent pod:", pod["metadata"]["name"], pod.get("status"))
        print(kubectl(cluster, "get", "events", "-n", ns).stdout)
        raise
    ku.wait_until(lambda: ds.agent_locks(node), 60, "the agent's logind delay lock")
    before = ku.node(kube, node.name)

    # A rollout: the config changes, so does the pod template's checksum.
    started = time.monotonic()
    apply(cluster, node.name, ns, "40s", cluster_scoped)

    def replaced() -> JSON | None:
        pod = running_agent(kube, ns)
        gone = all(
            p["metadata"]["uid"] != first["metadata"]["uid"] for p in ds.agent_pods(kube, ns)
        )
        return pod if pod and gone else None

    second = ku.wait_until(replaced, 180, "the rollout")
    ku.wait_until(lambda: ds.agent_locks(node), 60, "the new pod's delay lock")
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
    logs = ds.pod_logs(node, ns)
    print("\n".join(f"--- {log}\n{log.read_text(errors='replace')}" for log in logs))
    drained = ku.node(kube, node.name)
    assert drained["spec"].get("unschedulable"), drained["spec"]
    assert drained["metadata"]["annotations"].get(DRAIN_RESULT) == "drained"
