"""The other actors' writes (hack/actors/), each actor's sequence once against the real
control plane, and their pure rules (pod filters, tiers, the kured lock) as tables.

What each test asserts is what the actor's own code says the Node and its pods end as;
where that code undoes someone else's cordon or label, the test asserts that it does.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.actors import api, cluster_api, cluster_autoscaler, karpenter, kubectl, kured, nth
from hack.actors.cluster_api import Behavior
from hack.actors.karpenter import Tier
from hack.actors.kubectl import Status
from hack.localcluster.kubelet_sim import BOOT_ID
from nodeagent.kube.client import JSON, ApiError, Kube, api_stamp, node_path

# The node lifecycle controller's taint of a cordoned node.
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

# --- pure rules -------------------------------------------------------------------------


def pod(
    name: str = "p",
    *,
    owner: str = "",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    **spec: Any,
) -> JSON:
    """A pod as the API returns it; `owner` is "Kind" or "apiVersion/Kind" of its controller."""
    refs = []
    if owner:
        version, _, kind = owner.rpartition("/")
        default = "v1" if kind == "Node" else "apps/v1"
        refs = [{"apiVersion": version or default, "kind": kind, "name": "o", "controller": True}]
    meta = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "annotations": annotations or {},
        "labels": labels or {},
        "ownerReferences": refs,
    }
    return {"metadata": meta, "spec": dict(spec), "status": {"phase": phase}}


def deleted(p: JSON, seconds_ago: float) -> JSON:
    p["metadata"]["deletionTimestamp"] = api_stamp(time.time() - seconds_ago)
    return p


EMPTYDIR = [{"name": "scratch", "emptyDir": {}}]
RS, DS = pod(owner="ReplicaSet"), pod(owner="DaemonSet")
DS_DONE = pod(owner="DaemonSet", phase="Succeeded")
MIRRORED = pod(annotations={kubectl.MIRROR: "x"})
SCRATCH = pod(owner="ReplicaSet", volumes=EMPTYDIR)
OKAY, KEEP, WARN, FATAL = (
    (True, Status.OKAY),
    (False, Status.SKIP),
    (True, Status.WARNING),
    (False, Status.ERROR),
)


# The flags: --ignore-daemonsets, --force, --delete-emptydir-data.
@pytest.mark.parametrize(
    ("case", "p", "ignore_ds", "force", "emptydir", "want"),
    [
        ("ReplicaSet pod", RS, False, False, False, OKAY),
        ("DaemonSet pod, ignored", DS, True, False, False, (False, Status.WARNING)),
        ("DaemonSet pod: fatal", DS, False, False, False, FATAL),
        ("finished DaemonSet pod", DS_DONE, False, False, False, OKAY),
        ("mirror pod", MIRRORED, True, True, True, KEEP),
        ("unmanaged pod: fatal", pod(), True, False, False, FATAL),
        ("unmanaged pod, --force", pod(), True, True, False, WARN),
        ("emptyDir: fatal", SCRATCH, True, False, False, FATAL),
        # the warning is dropped by the filters after it (filters.go says so)
        ("emptyDir, with the flag", SCRATCH, True, False, True, OKAY),
    ],
)
def test_kubectl_drain_filters(
    case: str, p: JSON, ignore_ds: bool, force: bool, emptydir: bool, want: tuple[bool, Status]
) -> None:
    filters = [
        lambda q: kubectl.daemonset_filter(q, ignore_ds, force, lambda ns, name: True),
        kubectl.mirror_filter,
        lambda q: kubectl.local_storage_filter(q, emptydir),
        lambda q: kubectl.unreplicated_filter(q, force),
    ]
    [got] = kubectl.filter_pods([p], filters)
    assert (got.delete, got.status) == want, case


def test_kubectl_orphaned_daemonset_pod_goes_only_with_force() -> None:
    orphan = pod(owner="DaemonSet")
    gone = kubectl.daemonset_filter(orphan, True, True, lambda ns, name: False)
    kept = kubectl.daemonset_filter(orphan, True, False, lambda ns, name: False)
    assert (gone.delete, gone.status) == (True, Status.WARNING)
    assert (kept.delete, kept.status) == (False, Status.ERROR)


@pytest.mark.parametrize(
    ("skip_after", "ago", "want"),
    [(0, 600, Status.OKAY), (5, 3, Status.OKAY), (5, 7, Status.SKIP)],
)
def test_kubectl_skip_deleted_after_timeout(skip_after: int, ago: float, want: Status) -> None:
    p = deleted(pod(owner="ReplicaSet"), ago)
    assert kubectl.skip_deleted(p, skip_after, time.time()).status is want


def test_kubectl_cordon_patches() -> None:
    """The uncordon deletes the field (omitempty), whoever had set it."""
    assert kubectl.cordon_patch(True) == {"spec": {"unschedulable": True}}
    assert kubectl.cordon_patch(False) == {"spec": {"unschedulable": None}}


CA_DS_OFF = {cluster_autoscaler.ENABLE_DS_EVICTION: "false"}
CA_DS_ON = {cluster_autoscaler.ENABLE_DS_EVICTION: "true"}
CA_DS_POD = {cluster_autoscaler.DS_POD_ANNOTATION: "true"}


@pytest.mark.parametrize(
    ("case", "p", "by_default", "want"),
    [
        ("workload pod", pod(owner="ReplicaSet"), True, "other"),
        ("bare pod", pod(), False, "other"),
        ("mirror pod stays", pod(annotations={kubectl.MIRROR: "x"}), True, "stays"),
        ("DaemonSet pod, default on", pod(owner="DaemonSet"), True, "ds"),
        ("DaemonSet pod, default off", pod(owner="DaemonSet"), False, "stays"),
        ("DaemonSet pod opted out", pod(owner="DaemonSet", annotations=CA_DS_OFF), True, "stays"),
        ("DaemonSet pod opted in", pod(owner="DaemonSet", annotations=CA_DS_ON), False, "ds"),
        ("annotated as a DaemonSet pod", pod(annotations=CA_DS_POD), True, "ds"),
    ],
)
def test_autoscaler_pods_to_evict(case: str, p: JSON, by_default: bool, want: str) -> None:
    ds, others = cluster_autoscaler.pods_to_evict([p], by_default)
    got = "ds" if ds else "other" if others else "stays"
    assert got == want, case


@pytest.mark.parametrize(
    ("grace", "cap", "want"), [(None, 600, 30), (900, 600, 600), (10, 600, 10), (900, 0, 900)]
)
def test_autoscaler_eviction_grace(grace: int | None, cap: int, want: int) -> None:
    p = pod(owner="ReplicaSet") if grace is None else pod(terminationGracePeriodSeconds=grace)
    assert cluster_autoscaler.eviction_grace(p, cap) == want


@pytest.mark.parametrize(
    ("tolerations", "want"),
    [
        ([], False),
        ([{"operator": "Exists"}], True),
        ([{"key": karpenter.DISRUPTED, "operator": "Exists"}], True),
        ([{"key": karpenter.DISRUPTED, "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": karpenter.DISRUPTED, "operator": "Equal", "value": ""}], True),
        ([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], False),
    ],
)
def test_karpenter_tolerates_disrupted(tolerations: list[JSON], want: bool) -> None:
    assert karpenter.tolerates_disrupted(pod(tolerations=tolerations)) is want


CRIT: dict[str, Any] = {"priorityClassName": "system-node-critical"}


@pytest.mark.parametrize(
    ("p", "want"),
    [
        (pod(owner="ReplicaSet"), Tier.NON_CRITICAL),
        (pod(owner="DaemonSet"), Tier.NON_CRITICAL_DAEMON),
        (pod(owner="ReplicaSet", **CRIT), Tier.CRITICAL),
        (pod(owner="DaemonSet", **CRIT), Tier.CRITICAL_DAEMON),
    ],
)
def test_karpenter_tiers(p: JSON, want: Tier) -> None:
    assert karpenter.tier_of(p) is want


def test_karpenter_drain_waits_on_do_not_disrupt_and_skips_the_tolerant() -> None:
    """A do-not-disrupt pod holds its tier (nothing evicted, the DaemonSet tier waits);
    pods tolerating the taint, mirror pods, finished pods and pods stuck terminating are
    not waited for."""
    now = time.time()
    blocker = pod("blocker", owner="ReplicaSet", annotations={karpenter.DO_NOT_DISRUPT: "true"})
    ds = pod("ds", owner="DaemonSet")
    ignored = [
        pod("tolerant", owner="ReplicaSet", tolerations=[{"operator": "Exists"}]),
        pod("mirror", owner="v1/Node"),
        pod("done", owner="ReplicaSet", phase="Succeeded"),
        deleted(pod("stuck", owner="ReplicaSet"), 61),
    ]
    assert karpenter.first_tier([blocker, ds, *ignored], now) == (Tier.NON_CRITICAL, [])
    assert karpenter.first_tier([ds, *ignored], now) == (Tier.NON_CRITICAL_DAEMON, [ds])
    assert karpenter.first_tier(ignored, now) is None
    going = deleted(pod("going", owner="ReplicaSet"), 5)  # waited for, not evicted again
    assert karpenter.first_tier([going, ds], now) == (Tier.NON_CRITICAL, [])


def test_kured_lock_round_trip_and_ttl() -> None:
    created = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
    lock = kured.Lock("node-a", True, created, ttl_ns=30 * 60 * 10**9)
    text = lock.encode()
    assert '"nodeID":"node-a"' in text and '"metadata":{"unschedulable":true}' in text
    assert kured.Lock.decode(text) == lock
    assert not lock.expired(created + timedelta(minutes=29))
    assert lock.expired(created + timedelta(minutes=30))
    forever = kured.Lock("node-a", False, created)
    assert not forever.expired(created + timedelta(days=400))
    ds = {"metadata": {"annotations": {kured.LOCK_ANNOTATION: text}}}
    assert kured.lock_holder(ds, now=created + timedelta(hours=1)) is None
    assert kured.lock_holder(ds, now=created) == lock


@pytest.mark.parametrize(
    ("p", "want"),
    [
        (pod(owner="ReplicaSet"), Behavior.DRAIN),
        (pod(), Behavior.DRAIN),  # unmanaged: drained with a warning
        (pod(owner="DaemonSet"), Behavior.SKIP),
        (pod(owner="DaemonSet", phase="Failed"), Behavior.DRAIN),
        (pod(annotations={kubectl.MIRROR: "x"}), Behavior.SKIP),
        (pod(labels={cluster_api.DRAIN_LABEL: "skip"}), Behavior.SKIP),
        (pod(labels={cluster_api.DRAIN_LABEL: "wait-completed"}), Behavior.WAIT_COMPLETED),
        (pod(labels={cluster_api.DRAIN_LABEL: "other"}), Behavior.DRAIN),
    ],
)
def test_cluster_api_drain_behavior(p: JSON, want: Behavior) -> None:
    assert cluster_api.behavior(p) is want


# --- against the control plane -----------------------------------------------------------


@dataclass
class Group:
    """A node with workloads, and a spare for their replacements."""

    node: str
    spare: str
    group: str  # the nodes' group label, and the namespace of their workloads
    kube: Kube

    @property
    def ns(self) -> str:
        return self.group

    def obj(self) -> JSON:
        return ku.node(self.kube, self.node)

    def gone(self) -> bool:
        return not ku.exists(self.kube, node_path(self.node))

    def pods(self, app: str) -> list[JSON]:
        return [
            p
            for p in ku.running(ku.pods_on(self.kube, self.node))
            if api.labels_of(p).get("app") == app
        ]

    def names(self, app: str) -> set[str]:
        return {api.name_of(p) for p in self.pods(app)}

    def events(self, component: str, reason: str) -> list[JSON]:
        query = {
            "fieldSelector": f"involvedObject.name={self.node},source={component},reason={reason}"
        }
        return list(
            self.kube.request("GET", "/api/v1/namespaces/default/events", query=query)["items"]
        )


@pytest.fixture
def group(cluster: Any, kube: Kube) -> Iterator[Group]:
    name, node, spare = ku.node_pair(cluster, kube, "act")
    yield Group(node, spare, name, kube)


def daemonset(g: Group, name: str, annotations: dict[str, str] | None = None, **spec: Any) -> None:
    labels = {"app": name}
    template = {
        "metadata": {"labels": labels, "annotations": annotations or {}},
        "spec": ku.pod_spec(g.group, **spec),
    }
    body = {
        "metadata": {"name": name, "namespace": g.ns},
        "spec": {"selector": {"matchLabels": labels}, "template": template},
    }
    g.kube.post(f"/apis/apps/v1/namespaces/{g.ns}/daemonsets", body)


def mirror_pod(g: Group) -> None:
    """A pod as the kubelet mirrors a static pod: the mirror annotation, owned by the Node."""
    node = g.obj()
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": g.node,
        "uid": node["metadata"]["uid"],
        "controller": True,
    }
    meta: JSON = {"name": "static", "namespace": g.ns, "labels": {"app": "static"}}
    meta |= {"annotations": {kubectl.MIRROR: "hash"}, "ownerReferences": [owner]}
    containers = [{"name": "c", "image": "registry.invalid/static:1"}]
    body = {"metadata": meta, "spec": {"nodeName": g.node, "containers": containers}}
    g.kube.post(f"/api/v1/namespaces/{g.ns}/pods", body)


def web(g: Group, replicas: int = 2, pdb: bool = False) -> None:
    ku.deployment(g.kube, g.ns, "web", g.group, replicas)
    if pdb:
        ku.pdb(g.kube, g.ns, "web", {"app": "web"}, minAvailable=replicas)
        ku.wait_pdb_ready(g.kube, g.ns, "web")


def settle(g: Group, count: int) -> None:
    ku.wait_running(g.kube, g.node, count)


def later(seconds: float, fn: Any, *args: Any) -> threading.Timer:
    timer = threading.Timer(seconds, fn, args)
    timer.start()
    return timer


def remove_annotation(kube: Kube, path: str, key: str) -> None:
    kube.merge_patch(path, {"metadata": {"annotations": {key: None}}})


FAST_CA = cluster_autoscaler.Options(
    node_delete_delay_after_taint=0.2, eviction_retry_time=1.0, pod_eviction_headroom=5.0, poll=0.5
)


def test_autoscaler_scale_down(group: Group) -> None:
    """Taint and cordon in one Update, the drain (DaemonSet pods too unless opted out,
    mirror pods never), the wait for delay-deletion annotations, the Node deleted."""
    g = group
    web(g)
    daemonset(g, "ds")
    daemonset(g, "agent", {cluster_autoscaler.ENABLE_DS_EVICTION: "false"})
    mirror_pod(g)
    settle(g, 5)
    ku.open_node(g.kube, g.spare)
    delay = cluster_autoscaler.DELAY_DELETION_PREFIX + "test"
    g.kube.merge_patch(node_path(g.node), {"metadata": {"annotations": {delay: "volumes"}}})
    ca = cluster_autoscaler.ClusterAutoscaler(g.kube, FAST_CA)

    marked = ca.mark_to_be_deleted(g.node)
    [taint] = [t for t in api.taints(marked) if t["key"] == cluster_autoscaler.TO_BE_DELETED]
    assert taint["effect"] == "NoSchedule" and abs(int(taint["value"]) - time.time()) < 60
    assert marked["spec"]["unschedulable"] is True
    expected = {f"{g.ns}/{n}" for n in g.names("web") | g.names("ds")}
    agent, static = g.names("agent"), g.names("static")

    ca.drain(g.node)
    assert set(ca.evicted) == expected
    assert g.names("agent") == agent and g.names("static") == static
    timer = later(1.5, remove_annotation, g.kube, node_path(g.node), delay)
    waited = ca.wait_for_delay_deletion(g.node)
    timer.join()
    assert 1.5 <= waited < 1.5 + FAST_CA.poll + 1
    ca.delete_node(g.node)
    assert g.gone()
    assert g.events(cluster_autoscaler.COMPONENT, "ScaleDown")
    ku.wait_deployment_ready(g.kube, g.ns, "web")


def test_autoscaler_failed_scale_down_uncordons_a_cordon_it_did_not_make(group: Group) -> None:
    """A PDB holds the drain: ScaleDownFailed, and CleanToBeDeleted takes the taint and the
    cordon away, though a person had cordoned the node before the autoscaler came."""
    g = group
    web(g, pdb=True)
    settle(g, 2)
    ku.open_node(g.kube, g.spare)
    kubectl.Kubectl(g.kube).cordon(g.node)
    ca = cluster_autoscaler.ClusterAutoscaler(
        g.kube,
        cluster_autoscaler.Options(
            node_delete_delay_after_taint=0, max_pod_eviction_time=2.0, eviction_retry_time=1.0
        ),
    )
    assert ca.scale_down(g.node) is False
    node = g.obj()
    assert not api.has_taint(node, cluster_autoscaler.TO_BE_DELETED)
    assert not node["spec"].get("unschedulable")  # the person's cordon is gone
    assert len(g.pods("web")) == 2 and ca.evicted == []  # the PDB held
    assert ca.attempts >= 4  # each pod asked again every second for two seconds
    assert g.events(cluster_autoscaler.COMPONENT, "ScaleDownFailed")


def test_autoscaler_start_cleans_only_nodes_with_its_taint(group: Group) -> None:
    g = group
    ca = cluster_autoscaler.ClusterAutoscaler(g.kube, FAST_CA)
    ca.mark_to_be_deleted(g.node)  # left by an autoscaler that died; the spare is cordoned
    restarted = cluster_autoscaler.ClusterAutoscaler(g.kube, FAST_CA)
    assert restarted.clean_all_to_be_deleted([g.node, g.spare]) == [g.node]
    node, spare = g.obj(), ku.node(g.kube, g.spare)
    assert not api.has_taint(node, cluster_autoscaler.TO_BE_DELETED)
    assert not node["spec"].get("unschedulable")
    assert spare["spec"].get("unschedulable") is True
    assert g.events(cluster_autoscaler.COMPONENT, "ClusterAutoscalerCleanup")


def test_karpenter_termination(group: Group) -> None:
    """Finalizer, deletion, taint and LB label (never a cordon), the tiered drain held by a
    do-not-disrupt pod until its annotation goes, the finalizer removed, the Node gone."""
    g = group
    kp = karpenter.Karpenter(g.kube, min_drain_time=1.0)
    kp.register(g.node)
    web(g)
    daemonset(g, "ds")
    tolerant = [{"key": karpenter.DISRUPTED, "operator": "Exists"}]
    ku.bare_pod(g.kube, g.ns, "tolerant", g.node, tolerations=tolerant)
    ku.bare_pod(g.kube, g.ns, "batch", g.node, {karpenter.DO_NOT_DISRUPT: "true"})
    settle(g, 5)
    ku.open_node(g.kube, g.spare)

    kp.disrupt(g.node)
    node = g.obj()
    assert (
        node["metadata"]["deletionTimestamp"]
        and karpenter.FINALIZER in node["metadata"]["finalizers"]
    )
    assert kp.reconcile(g.node) is karpenter.Phase.DRAINING
    node = g.obj()
    assert [t for t in api.taints(node) if t["key"] == karpenter.DISRUPTED] == [
        karpenter.DISRUPTED_TAINT
    ]
    assert api.labels_of(node)[karpenter.EXCLUDE_LB] == "karpenter"
    assert not node["spec"].get("unschedulable")
    for _ in range(3):  # the do-not-disrupt pod holds the first tier; DaemonSet pods wait
        kp.reconcile(g.node)
        time.sleep(0.5)
    assert {t for t, _ in kp.evictions} == {Tier.NON_CRITICAL} and len(g.pods("ds")) == 1
    path = f"/api/v1/namespaces/{g.ns}/pods/batch"
    remove_annotation(g.kube, path, karpenter.DO_NOT_DISRUPT)

    phases = kp.terminate(g.node, bound=60)
    assert phases[-1] is karpenter.Phase.TERMINATED
    ku.wait_until(g.gone, 10, "the Node deleted once the finalizer went")
    order = [t for t, _ in kp.evictions]
    assert order == sorted(order, key=list(Tier).index) and order[-1] is Tier.NON_CRITICAL_DAEMON
    evicted = {name.split("/")[1] for _, name in kp.evictions}
    assert "batch" in evicted and "tolerant" not in evicted


def test_karpenter_abandoned_disruption_removes_only_its_taint(group: Group) -> None:
    g = group
    kp = karpenter.Karpenter(g.kube)
    kubectl.Kubectl(g.kube).cordon(g.node)
    other = {"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}
    g.kube.merge_patch(node_path(g.node), {"spec": {"taints": [other]}})
    assert kp.require_taint(g.node, True)
    assert kp.require_taint(g.node, False)
    # The node controller's taint for the cordon follows it in a write of its own, and the
    # whole-list patch above dropped it: read once it is back, not before or after at random.
    node = ku.wait_until(
        lambda: n if api.has_taint(n := g.obj(), UNSCHEDULABLE) else None,
        30,
        "the node controller's unschedulable taint",
    )
    others = [t for t in api.taints(node) if t["key"] != UNSCHEDULABLE]
    assert others == [other] and node["spec"]["unschedulable"] is True


def kured_daemonset(g: Group) -> None:
    ku.daemonset(g.kube, g.ns, "kured", g.group)


def reboot(kube: Kube, node: str) -> None:
    """A reboot as the simulated kubelet shows one: a new boot ID."""
    kube.merge_patch(node_path(node), {"metadata": {"annotations": {BOOT_ID: str(uuid.uuid4())}}})


def test_kured_reboot_and_uncordon_after_boot(group: Group) -> None:
    g = group
    kured_daemonset(g)
    web(g)
    settle(g, 3)
    ku.open_node(g.kube, g.spare)
    kr = kured.Kured(g.kube, g.node, ds_namespace=g.ns, annotate_nodes=True,
                     pre_reboot_labels={"example.com/rebooting": "yes"},
                     post_reboot_labels={"example.com/rebooting": "no"})  # fmt: skip

    assert kr.reboot_if_required(lambda: reboot(g.kube, g.node))
    lock = kr.holding()
    assert lock is not None and lock.node_id == g.node and lock.unschedulable is False
    node = g.obj()
    assert node["spec"]["unschedulable"] is True
    assert kured.REBOOT_IN_PROGRESS in api.annotations_of(node)
    assert api.labels_of(node)["example.com/rebooting"] == "yes"
    assert not g.pods("web") and len(g.pods("kured")) == 1
    assert kr.drainer is not None and len(kr.drainer.evicted) == 2

    assert kr.after_boot()
    node = g.obj()
    assert not node["spec"].get("unschedulable")
    assert kured.REBOOT_IN_PROGRESS not in api.annotations_of(node)
    assert api.labels_of(node)["example.com/rebooting"] == "no"
    ds = g.kube.get(kr.ds_path)
    assert kured.LOCK_ANNOTATION not in api.annotations_of(ds)


def test_kured_keeps_a_cordon_it_recorded_after_boot(group: Group) -> None:
    g = group
    kured_daemonset(g)
    settle(g, 1)
    kubectl.Kubectl(g.kube).cordon(g.node)
    kr = kured.Kured(g.kube, g.node, ds_namespace=g.ns)
    assert kr.reboot_if_required(lambda: reboot(g.kube, g.node))
    assert kr.holding() is not None and kr.holding().unschedulable is True  # type: ignore[union-attr]
    assert kr.after_boot()
    assert g.obj()["spec"]["unschedulable"] is True


def test_kured_failed_drain_uncordons_a_cordon_it_did_not_make(group: Group) -> None:
    """The drain times out on a PDB: kured releases the lock and uncordons, though the
    lock says the node was cordoned before it came. With no retry delay it asks again at
    once: the number of eviction requests in two seconds shows it."""
    g = group
    kured_daemonset(g)
    web(g, pdb=True)
    settle(g, 3)
    kubectl.Kubectl(g.kube).cordon(g.node)
    kr = kured.Kured(g.kube, g.node, ds_namespace=g.ns, drain_timeout=2.0)
    rebooted: list[bool] = []
    assert not kr.reboot_if_required(lambda: rebooted.append(True))
    assert not rebooted
    assert not g.obj()["spec"].get("unschedulable")
    assert kr.holding() is None
    assert len(g.pods("web")) == 2
    assert kr.drainer is not None
    assert kr.drainer.attempts > 20, kr.drainer.attempts


def test_nth_scheduled_event_then_cancel(group: Group) -> None:
    """A scheduled reboot event, then its cancellation: the labels and taint NTH wrote go;
    the load-balancer label another owner set is kept on the drain and removed on cancel
    (its value is not NTH's)."""
    g = group
    web(g)
    daemonset(g, "ds")
    settle(g, 3)
    ku.open_node(g.kube, g.spare)
    g.kube.merge_patch(node_path(g.node), {"metadata": {"labels": {nth.EXCLUDE_LB: "nodeagent"}}})
    cfg = nth.Config(taint_node=True, exclude_from_load_balancers=True)
    h = nth.NodeTerminationHandler(g.kube, g.node, cfg)

    h.scheduled_event("instance-event-0123456789abcdef0")
    node = g.obj()
    labels = api.labels_of(node)
    assert labels[nth.EVENT_ID] == "instance-event-0123456789abcdef0"
    assert labels[nth.ACTION] == nth.UNCORDON_AFTER_REBOOT and labels[nth.ACTION_TIME].isdigit()
    assert labels[nth.EXCLUDE_LB] == "nodeagent"
    assert api.has_taint(node, nth.SCHEDULED_MAINTENANCE) and node["spec"]["unschedulable"] is True
    assert not g.pods("web") and len(g.pods("ds")) == 1 and not h.errors
    assert g.events(nth.COMPONENT, "CordonAndDrain") and g.events(nth.COMPONENT, "ScheduledEvent")

    h.cancel()
    node = g.obj()
    assert not node["spec"].get("unschedulable")
    assert not set(api.labels_of(node)) & {
        nth.EVENT_ID,
        nth.ACTION,
        nth.ACTION_TIME,
        nth.EXCLUDE_LB,
    }
    assert not api.has_taint(node, nth.SCHEDULED_MAINTENANCE) and not h.errors
    assert g.events(nth.COMPONENT, "Uncordon")


def test_nth_cancel_uncordons_a_cordon_it_did_not_make(group: Group) -> None:
    """Cordoned before the event: NTH sets no action labels, yet its cancel uncordons; the
    removal of the missing action label fails and ends its label clean-up there."""
    g = group
    kubectl.Kubectl(g.kube).cordon(g.node)
    h = nth.NodeTerminationHandler(g.kube, g.node, nth.Config(taint_node=True))
    h.scheduled_event("instance-event-1")
    assert nth.ACTION not in api.labels_of(g.obj())
    h.cancel()
    node = g.obj()
    assert not node["spec"].get("unschedulable")
    assert nth.EVENT_ID not in api.labels_of(node)
    assert not api.has_taint(node, nth.SCHEDULED_MAINTENANCE)
    assert len(h.errors) == 1 and "removing NTH labels" in h.errors[0]


def test_nth_spot_interruption_taints_labels_and_drains(group: Group) -> None:
    g = group
    web(g)
    settle(g, 2)
    ku.open_node(g.kube, g.spare)
    cfg = nth.Config(
        taint_node=True, exclude_from_load_balancers=True, enable_out_of_service_taint=True
    )
    h = nth.NodeTerminationHandler(g.kube, g.node, cfg)
    h.spot_interruption("spot-itn-0123")
    node = g.obj()
    [spot] = [t for t in api.taints(node) if t["key"] == nth.SPOT_ITN]
    assert spot == {"key": nth.SPOT_ITN, "value": "spot-itn-0123", "effect": "NoSchedule"}
    [oos] = [t for t in api.taints(node) if t["key"] == nth.OUT_OF_SERVICE["key"]]
    assert (oos["value"], oos["effect"]) == ("nodeshutdown", "NoExecute")
    assert api.labels_of(node)[nth.EXCLUDE_LB] == nth.COMPONENT
    assert node["spec"]["unschedulable"] is True and not g.pods("web")
    pod_events = g.kube.request(
        "GET", f"/api/v1/namespaces/{g.ns}/events", query={"fieldSelector": "reason=PodEviction"}
    )["items"]
    assert len(pod_events) == 2


def test_cluster_api_machine_deletion(group: Group) -> None:
    g = group
    web(g)
    daemonset(g, "ds")
    ku.bare_pod(g.kube, g.ns, "pinned", g.node)
    g.kube.merge_patch(
        f"/api/v1/namespaces/{g.ns}/pods/pinned",
        {"metadata": {"labels": {cluster_api.DRAIN_LABEL: "skip"}}},
    )
    settle(g, 4)
    ku.open_node(g.kube, g.spare)
    m = cluster_api.MachineDeletion(g.kube, g.node, drain_retry=1.0, volume_retry=1.0)
    assert not m.drain_once()
    assert g.obj()["spec"]["unschedulable"] is True
    m.delete(bound=60)
    assert g.gone()
    assert len(m.evicted) == 2 and all(n.startswith(f"{g.ns}/web-") for n in m.evicted)
    remaining = {
        api.labels_of(p).get("app") or api.name_of(p)
        for p in ku.running(ku.pods_on(g.kube, g.node))
    }
    assert remaining == {"ds", "pinned"}


def test_kubectl_drain_goes_on_after_the_node_is_deleted(group: Group) -> None:
    """`kubectl delete node` mid-drain: the drain neither notices nor ends early; the pods
    stay bound to the deleted name."""
    g = group
    web(g, pdb=True)
    settle(g, 2)
    person = kubectl.Kubectl(g.kube)
    errors: list[Exception] = []

    def drain() -> None:
        try:
            person.drain(g.node, timeout=3.0)
        except (kubectl.DrainError, ApiError) as exc:
            errors.append(exc)

    start = time.monotonic()
    worker = threading.Thread(target=drain)
    worker.start()
    time.sleep(1.0)
    assert person.delete_node(g.node)
    worker.join(30)
    assert g.gone() and time.monotonic() - start >= 3.0
    assert len(errors) == 1 and "global timeout reached" in str(errors[0])
    assert len(ku.pods_on(g.kube, g.node)) == 2
