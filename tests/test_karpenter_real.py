"""The real Karpenter (v1.15.0, kwok provider; hack/actors/karpenter_real.py) terminating a
Node on the harness's control plane: the same ends as hack/actors/karpenter.py's re-enactment
asserts in tests/test_actors.py, now from Karpenter's own code. Built from the Go module
proxy on first use (hack/build-karpenter.sh), hence the artifacts tier."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.actors import api, karpenter
from hack.actors.karpenter_real import RealKarpenter, toleration
from hack.localcluster.kubelet_sim import BOOT_ID
from nodeagent.kube.client import JSON, Kube, node_path, pods_path


@pytest.fixture
def real(
    cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path
) -> Iterator[RealKarpenter]:
    group = ku.unique("kreal")
    ku.namespace(kube, group)
    karp = RealKarpenter.start(kube, admin_kubeconfig, group, tmp_path)
    try:
        yield karp
    finally:
        karp.stop()


def on_node(kube: Kube, node: str, app: str) -> list[JSON]:
    pods = ku.pods_on(kube, node)
    return [p for p in pods if api.labels_of(p).get("app") == app]


def deletion_stamp(kube: Kube, ns: str, name: str) -> str:
    pod = api.get_pod(kube, ns, name)
    return "gone" if pod is None else str(pod["metadata"].get("deletionTimestamp") or "")


def test_real_karpenter_terminates_a_node(real: RealKarpenter) -> None:
    """Provisioned for a Deployment, then deleted: the finalizer holds the Node; taint
    karpenter.sh/disrupted:NoSchedule and the load-balancer label "karpenter", never a
    cordon; a do-not-disrupt pod holds the drain (the DaemonSet tier waits) until its
    annotation goes; a pod tolerating the taint is left; the Node goes with the finalizer."""
    kube, ns, group = real.kube, real.group, real.group
    tol = [toleration(group)]
    ku.deployment(kube, ns, "web", group, 2, tolerations=tol)
    node = real.wait_node()
    labels = {"app": "ds"}
    template = {"metadata": {"labels": labels}, "spec": ku.pod_spec(group, tolerations=tol)}
    ds = {"selector": {"matchLabels": labels}, "template": template}
    kube.post(f"/apis/apps/v1/namespaces/{ns}/daemonsets", {"metadata": {"name": "ds"}, "spec": ds})
    tolerant = [*tol, {"key": karpenter.DISRUPTED, "operator": "Exists"}]
    ku.bare_pod(kube, ns, "tolerant", node, tolerations=tolerant)
    ku.bare_pod(kube, ns, "batch", node, {karpenter.DO_NOT_DISRUPT: "true"}, tolerations=tol)
    ku.wait_running(kube, node, 5, timeout=60)
    [ds_pod] = on_node(kube, node, "ds")
    ds_name = api.name_of(ds_pod)

    kube.delete(node_path(node))
    deadline = time.monotonic() + 6
    seen: list[JSON] = []
    while time.monotonic() < deadline:  # the batch pod holds the drain meanwhile
        seen.append(ku.node(kube, node))
        time.sleep(0.5)
    last = seen[-1]
    assert last["metadata"]["deletionTimestamp"]
    assert karpenter.FINALIZER in last["metadata"]["finalizers"]
    assert karpenter.DISRUPTED_TAINT in api.taints(last)
    assert api.labels_of(last)[karpenter.EXCLUDE_LB] == "karpenter"
    assert not any(n["spec"].get("unschedulable") for n in seen)
    assert not on_node(kube, node, "web") or all(
        p["metadata"].get("deletionTimestamp") for p in on_node(kube, node, "web")
    )
    assert deletion_stamp(kube, ns, "batch") == "" and deletion_stamp(kube, ns, ds_name) == ""

    kube.merge_patch(
        pods_path(ns, "batch"), {"metadata": {"annotations": {karpenter.DO_NOT_DISRUPT: None}}}
    )
    ku.wait_until(lambda: not ku.exists(kube, node_path(node)), 60, "the Node terminated")
    assert deletion_stamp(kube, ns, "batch") != ""
    assert deletion_stamp(kube, ns, ds_name) != ""
    assert deletion_stamp(kube, ns, "tolerant") == ""  # never evicted


def test_real_karpenter_reboots_a_node(real: RealKarpenter) -> None:
    """Karpenter v1.15's reboot (repair's Rebooting condition): taint karpenter.sh/rebooting,
    never a cordon, the pods evicted, the initialized label taken off, the provider's reboot
    (kwok: a bootID status patch, which the simulated kubelet's next status overwrites, so
    the harness reboots the node its way), then the taint gone once a new boot shows."""
    kube, ns, group = real.kube, real.group, real.group
    ku.deployment(kube, ns, "web", group, 2, tolerations=[toleration(group)])
    node = real.wait_node()
    ku.wait_running(kube, node, 2, timeout=60)

    real.request_reboot(node)
    ku.wait_until(lambda: real.rebooting(node) == "RebootIssued", 60, "the reboot issued")
    # The label goes in a write of its own, which may land after the condition's (seen
    # once in a full run): waited for, bounded, not assumed.
    ku.wait_until(
        lambda: karpenter.INITIALIZED not in api.labels_of(ku.node(kube, node)),
        30,
        "the initialized label taken off",
    )
    fenced = ku.node(kube, node)
    assert karpenter.REBOOTING_TAINT in api.taints(fenced)
    assert not fenced["spec"].get("unschedulable")
    assert not on_node(kube, node, "web")  # evicted, pending: no node takes them

    reboot = {"metadata": {"annotations": {BOOT_ID: str(uuid.uuid4())}}}
    kube.merge_patch(node_path(node), reboot)
    ku.wait_until(lambda: real.rebooting(node) == "RebootSucceeded", 60, "the reboot observed")
    after = ku.node(kube, node)
    assert not api.has_taint(after, karpenter.REBOOTING) and not after["spec"].get("unschedulable")
    ku.wait_running(kube, node, 2, timeout=60)
