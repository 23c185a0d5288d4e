"""The departures another actor makes or meddles with (issue "Among the other actors"): the
ways down of the kinds foreign-uncordon, autoscaler-scale-down, karpenter-termination,
kured-reboot and node-deleted, as rows of ways.WAYS.

Every write of an actor is its re-enactment in hack/actors/ (each citing its source), sent
through a client of its own field manager (api.client_as), so that the Node's managedFields
tell the actor's writes from the agent's (witness.py). The node goes down as its kind says:
the actors' drains end in the machine's poweroff (the cloud's termination of the instance,
which logind hears as its power key) or kured's `systemctl reboot`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from hack import kubeutil as ku
from hack.actors import api
from hack.actors.cluster_autoscaler import ClusterAutoscaler, ScaleDownFailed
from hack.actors.karpenter import FINALIZER, Karpenter
from hack.actors.kubectl import Kubectl
from hack.actors.kured import Kured
from hack.realnode import RealNode
from hack.realnode.workload import import_into
from nodeagent.kube.client import JSON, ApiError, Kube, api_time, node_path

from .common import DEPARTURE_CAP_S, POLL_S, READY_TIMEOUT, poweroff, wait_whole
from .objects import APP, REPLICAS

if TYPE_CHECKING:
    from .scene import Node, Scene

# The drain the actor meddles with is the agent's for the poweroff: what a user sees first is
# the machine going down (a cloud's stop, an OS update's poweroff), and then a leftover
# cordon's cleanup by another tool (the autoscaler's restart, NTH's cancel, a person) lands
# in the middle of it. Without the agent nobody drains: the actor acts that long after the
# poweroff.
UNCORDON_AFTER_S = 2.0
DELETE_AFTER_S = 1.0
SCALE_UP = 3  # replicas added to the Deployment at the uncordon's moment
DRAIN_SEEN_S = 20.0  # how long the agent's cordon (its drain's start) may take to show


def client(scene: Scene, manager: str) -> Kube:
    return api.client_as(scene.cluster.kubeconfig, manager)


def _cordoned(kube: Kube, name: str) -> bool:
    return bool(kube.get(node_path(name))["spec"].get("unschedulable"))


def _at_drain(
    scene: Scene, after: float, act: Callable[[], None], notes: list[str]
) -> threading.Thread:
    """`act` `after` seconds into the agent's drain (its cordon seen), or into the poweroff
    without the agent, on a thread of its own; its error becomes a note."""
    kube, name = scene.cluster.kube, scene.leaving.name

    def run() -> None:
        try:
            if scene.config.agent:
                ku.wait_until(lambda: _cordoned(kube, name), DRAIN_SEEN_S,
                              "the agent's cordon", step=0.05)  # fmt: skip
            time.sleep(after)
            act()
        except Exception as exc:  # the cell says what the actor could not do
            notes.append(f"the actor's write failed: {exc}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _poweroff_with(
    scene: Scene, nodes: list[Node], notes: list[str], act: threading.Thread
) -> float:
    off = poweroff(scene, nodes, notes)
    act.join(DRAIN_SEEN_S + 30)
    return off


def foreign_uncordon(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """The poweroff; 2 s into the agent's drain, `kubectl uncordon` (whoever cordoned, the
    field goes: hack/actors/kubectl.py) and the Deployment scaled up by SCALE_UP at that
    moment, as an autoscaler's or a person's scale-up lands."""
    kubectl = Kubectl(client(scene, "kubectl-cordon"))
    deploy = f"/apis/apps/v1/namespaces/{scene.ns}/deployments/{APP}"

    def act() -> None:
        kubectl.uncordon(scene.leaving.name)
        scene.cluster.kube.merge_patch(deploy, {"spec": {"replicas": REPLICAS + SCALE_UP}})

    return _poweroff_with(scene, nodes, notes, _at_drain(scene, UNCORDON_AFTER_S, act, notes))


def node_deleted(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """The poweroff; 1 s into the agent's drain, `kubectl delete node` (one DELETE; the
    kubelet and the agent keep running)."""
    kubectl = Kubectl(client(scene, "kubectl"))
    act = _at_drain(scene, DELETE_AFTER_S, lambda: _deleted(kubectl, scene, notes), notes)
    return _poweroff_with(scene, nodes, notes, act)


def _deleted(kubectl: Kubectl, scene: Scene, notes: list[str]) -> None:
    if not kubectl.delete_node(scene.leaving.name):
        notes.append("the Node was gone before kubectl deleted it")


def autoscaler_scale_down(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """The Cluster Autoscaler's scale-down (hack/actors/cluster_autoscaler.py): its taint and
    cordon, its wait, its eviction drain, the delay-deletion annotations waited for; then
    the cloud terminates the instance (the poweroff) and the Node is deleted."""
    ca = ClusterAutoscaler(client(scene, "cluster-autoscaler"))
    name = scene.leaving.name
    ca.mark_to_be_deleted(name)
    time.sleep(ca.options.node_delete_delay_after_taint)
    try:
        ca.drain(name)
    except ScaleDownFailed as exc:
        notes.append(f"the scale-down failed, undone and no poweroff: {exc}")
        ca.fail(name, exc)
        return time.time()
    scene.evacuated = time.time()
    ca.wait_for_delay_deletion(name)
    node = api.get_node(ca.kube, name)
    off = poweroff(scene, nodes, notes)
    ca.delete_node(name)  # the cloud's node-lifecycle controller, once the instance is gone
    ca.event(node, "Normal", "ScaleDown", "nodes removed by cluster autoscaler")
    return off


def registered_to_karpenter(scene: Scene) -> None:
    """Karpenter's registration of the leaving node: its finalizer and NodePool labels."""
    Karpenter(client(scene, "karpenter")).register(scene.leaving.name)


def karpenter_termination(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """Karpenter's disruption and termination (hack/actors/karpenter.py): its taint, the
    Node deleted (a deletionTimestamp, the finalizer holds it), its tiered drain requeued
    every second, the instance deleted (the poweroff) and the finalizer removed."""
    name = scene.leaving.name
    off: list[float] = []

    def delete_instance() -> None:
        scene.evacuated = time.time()
        off.append(poweroff(scene, nodes, notes))

    karpenter = Karpenter(client(scene, "karpenter"), delete_instance=delete_instance)
    try:
        karpenter.disrupt(name)
        karpenter.terminate(name, bound=DEPARTURE_CAP_S)
    except api.ActorTimeout as exc:
        notes.append(f"{exc}: the finalizer taken off")
    finally:
        _unstick(scene.cluster.kube, name)
    return off[0] if off else poweroff(scene, nodes, notes)


def _unstick(kube: Kube, name: str) -> None:
    """A termination cut short leaves no Node held by the finalizer."""
    with contextlib.suppress(ApiError):
        if FINALIZER in (api.get_node(kube, name)["metadata"].get("finalizers") or []):
            api.release(kube, node_path(name))


KURED_DS = "kured"


def kured_daemonset(scene: Scene) -> None:
    """kured's DaemonSet, which holds its lock (here in the scene's namespace, with no pod:
    its node selector names a group no node is in; the re-enactment is kured's writes)."""
    labels = {"app": KURED_DS}
    template = {"metadata": {"labels": labels}, "spec": ku.pod_spec(f"{scene.group}-none")}
    body = {
        "metadata": {"name": KURED_DS, "namespace": scene.ns},
        "spec": {"selector": {"matchLabels": labels}, "template": template},
    }
    scene.cluster.kube.post(f"/apis/apps/v1/namespaces/{scene.ns}/daemonsets", body)


def kured_reboot(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """kured's reboot (hack/actors/kured.py, --annotate-nodes as the README asks): its
    annotations, lock, cordon and drain, `systemctl reboot`; after the boot, once the Node
    is Ready, its uncordon (the node was schedulable when it took the lock) and release.
    Returns when the node went down; `scene.returned` is when it was back, uncordoned and
    the service whole."""
    node = scene.leaving
    kured = Kured(client(scene, "kured"), node.name, ds_namespace=scene.ns, ds_name=KURED_DS,
                  annotate_nodes=True, bound=DEPARTURE_CAP_S)  # fmt: skip

    def reboot() -> None:
        scene.evacuated = time.time()
        node.run("systemctl", "reboot", "--no-block")

    if not kured.reboot_if_required(reboot):
        notes.append("kured's drain failed: it undid its cordon, no reboot")
        return time.time()
    node.wait_exit(scene.exit_cap)
    off = time.time()
    back = threading.Thread(target=_after_boot, args=(scene, kured, off, notes), daemon=True)
    back.start()
    node.boot(READY_TIMEOUT)  # Ready and schedulable: after kured's uncordon
    back.join(30)
    if isinstance(node, RealNode):
        import_into(node)
    wait_whole(scene)
    scene.returned = time.time()
    return off


def _after_boot(scene: Scene, kured: Kured, off: float, notes: list[str]) -> None:
    """kured's pod on the rebooted node: once the Node is Ready again, its first loop."""

    def ready() -> bool:
        with contextlib.suppress(ApiError):
            return _ready_since(scene.cluster.kube.get(node_path(scene.leaving.name)), off)
        return False

    try:
        ku.wait_until(ready, READY_TIMEOUT, "the rebooted Node Ready", step=POLL_S)
        if not kured.after_boot():
            notes.append("kured did not hold its lock after the boot")
    except Exception as exc:  # the cell says what kured could not do
        notes.append(f"kured after the boot: {exc}")


def _ready_since(node: JSON, since: float) -> bool:
    """Ready with a heartbeat of a whole second after `since` (the node down): the old
    boot's last heartbeat, written in the second it went down, is not the new boot's
    (seen: kured's uncordon 0.1 s after the node went down, before it booted)."""
    conds = (node.get("status") or {}).get("conditions") or []
    ready = [c for c in conds if c.get("type") == "Ready" and c.get("status") == "True"]
    beat = api_time(ready[0].get("lastHeartbeatTime")) if ready else None
    return beat is not None and beat > since
