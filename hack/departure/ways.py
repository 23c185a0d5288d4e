"""How each kind of departure goes (hack/departure/kinds.py), as a table: what is set up
first, how the node leaves, which nodes leave, and when the node was let go (the release).
The scene (scene.py) looks a kind up in WAYS and does what its row says.

The release, with the agent, is what the agent says by a milestone (hack/milestones.py) or
what the scene saw of its work; without it, when the node was off (a rolling reboot's
release is the wave's end either way).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hack import kubeutil as ku
from hack import milestones as ms
from hack.aemm import Aemm, rfc3339
from hack.nspawn import realtime
from hack.realnode import NodeError, RealNode
from hack.realnode.workload import import_into

from . import actorways as aw
from .common import DEPARTURE_CAP_S, POLL_S, READY_TIMEOUT, poweroff, wait_whole
from .kinds import Kind
from .objects import stubborn
from .vm import VmLeaving

if TYPE_CHECKING:
    from .scene import Node, Scene

EVACUATE_TAINT = "nodeagent.io/evacuate"  # the agent's default evacuate.taints
# How long an autoscaler without the agent waits between its taint and the termination.
EVACUATE_WAIT_S = 15.0
# The stop kind's maintenance: the runtime down this long (its containers stopped).
MAINTENANCE_S = 10.0
# EC2's Spot interruption notice comes two minutes before the instance is stopped.
SPOT_NOTICE_S = 120
WARNING_REASON = "warning"  # the agent's reason for a drain it does for the cloud's warning

Leave = Callable[["Scene", list["Node"], list[str]], float]
Release = Callable[["Scene", Kind], "float | None"]


# ---- the ways down -----------------------------------------------------------------------


def poweroff_target(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """`systemctl start poweroff.target`: the job queued without logind."""
    node = scene.leaving
    node.run("systemctl", "start", "--no-block", "poweroff.target")
    wait_off(node, notes)
    return time.time()


def evacuate(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """The evacuate taint, as an autoscaler sets it; then, once the node is empty (or after
    an autoscaler's wait without the agent), the poweroff."""
    taint = {"key": EVACUATE_TAINT, "effect": "NoSchedule"}
    name = scene.leaving.name
    # Under a field manager of its own: the harness's client says "nodeagent" (the agent's).
    autoscaler = aw.client(scene, "autoscaler")
    autoscaler.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": [taint]}})
    wait = DEPARTURE_CAP_S if scene.config.agent else EVACUATE_WAIT_S
    end = time.monotonic() + wait
    while time.monotonic() < end and not emptied(scene):
        time.sleep(1.0)
    scene.evacuated = time.time() if emptied(scene) else None
    if scene.config.agent and scene.evacuated is None:
        notes.append(f"no drain after {wait:.0f}s: powered off all the same")
    return poweroff(scene, nodes, notes)


def spot_interruption(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """The Spot notice served from now, its time two minutes ahead (whole seconds, as IMDS
    states it), and the poweroff at that time. Without an agent nobody reads it."""
    at = float(int(time.time()) + SPOT_NOTICE_S)
    log = scene.workdir / "aemm.log"
    notice = ["spot", "-a", "terminate", "-t", rfc3339(at)]
    mock = Aemm(notice, log, port=scene.metadata_port) if scene.metadata_port else None
    try:
        time.sleep(max(0.0, at - time.time()))
        return poweroff(scene, nodes, notes)
    finally:
        if mock is not None:
            mock.stop()


def reboot(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """Reboot `nodes` one after another, as an OS-update wave does (kured): the next only
    when the one before is back, Ready, uncordoned, and the service whole again. Returns
    when the last went down; `scene.returned` is when the wave was over."""
    off = time.time()
    for node in nodes:
        node.run("systemctl", "reboot", "--no-block")
        node.wait_exit(scene.exit_cap)
        off = time.time()
        node.boot(READY_TIMEOUT)  # Ready, and without the agent's cordon
        if isinstance(node, RealNode):  # a VM's containerd imports them as it starts
            import_into(node)  # a no-op when containerd kept its images
        wait_whole(scene)
    scene.returned = time.time()
    return off


def soft_reboot(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """`systemctl soft-reboot` (systemd 254+: userspace only, the same kernel and boot ID),
    then until the node is Ready with a heartbeat of the new userspace, uncordoned, and the
    service whole. Returns when the kubelet stopped (by the guest's journal);
    `scene.returned` is when the service was whole again."""
    node = scene.leaving
    if not isinstance(node, VmLeaving):
        raise ValueError("soft-reboot needs systemd 254+: the vm shape")
    before = userspace(node)
    sent = time.time()
    with contextlib.suppress(NodeError):  # the guest agent may stop before it answers
        node.run("systemctl", "soft-reboot", "--no-block", timeout=30)

    def restarted() -> bool:
        with contextlib.suppress(NodeError):
            now = userspace(node)
            return bool(now) and now != before
        return False

    cap = scene.exit_cap + scene.ready_timeout
    ku.wait_until(restarted, cap, "the new userspace after the soft-reboot", step=1.0)
    # A heartbeat from now on is the new kubelet's: the old one stopped before.
    up = time.monotonic()
    node.sync_clock()
    node.wait_ready(scene.ready_timeout, since=up)
    wait_whole(scene)
    scene.returned = time.time()
    stopped = [
        # systemd's own lines about the unit: not the kubelet's log, which is long.
        realtime(e) for e in node.journal("UNIT=kubelet.service")
        if realtime(e) >= sent and e["MESSAGE"].startswith("Stopped kubelet")
    ]  # fmt: skip
    return stopped[0] if stopped else sent


def maintain(scene: Scene, nodes: list[Node], notes: list[str]) -> float:
    """An operator's maintenance of the leaving node's runtime (an upgrade of the kubelet
    and containerd): `systemctl stop nodeagent` first where the agent is installed (it
    drains, then exits), then the kubelet stopped and every container stopped (SIGTERM),
    the runtime left down MAINTENANCE_S, and everything started again. Returns when the
    runtime went down; `scene.stopped` is when the agent's stop returned, `scene.returned`
    when the node was Ready and uncordoned again."""
    node = scene.leaving
    if scene.config.agent:
        node.run("systemctl", "stop", "nodeagent", timeout=scene.exit_cap)
    scene.stopped = time.time()
    node.run("systemctl", "stop", "kubelet", timeout=60)
    tasks = node.run("ctr", "-n", "k8s.io", "tasks", "ls", "-q", timeout=30).stdout.split()
    for task in tasks:
        node.run("ctr", "-n", "k8s.io", "tasks", "kill", task, timeout=30)
    down = time.time()
    time.sleep(MAINTENANCE_S)
    units = ["kubelet", "nodeagent"] if scene.config.agent else ["kubelet"]
    node.run("systemctl", "start", *units, timeout=60)
    node.wait_ready(scene.ready_timeout)
    scene.returned = time.time()
    return down


# ---- what is set up first ----------------------------------------------------------------


def stubborn_pod(scene: Scene) -> None:
    """A pod on the leaving node that ignores SIGTERM (objects.stubborn), Running."""
    kube, ns = scene.cluster.kube, scene.ns
    kube.post(f"/apis/apps/v1/namespaces/{ns}/deployments",
                stubborn(ns, scene.group, scene.leaving.name))  # fmt: skip
    path = f"/api/v1/namespaces/{ns}/pods"

    def running() -> bool:
        pods = kube.get(path, labelSelector="app=stubborn")["items"]
        return any((p.get("status") or {}).get("phase") == "Running" for p in pods)

    ku.wait_until(running, READY_TIMEOUT, "the SIGTERM-ignoring pod Running", step=POLL_S)


# ---- the releases ------------------------------------------------------------------------


def drained_for_shutdown(scene: Scene, kind: Kind) -> float | None:
    """The end of the agent's drain for a poweroff."""
    return ms.when(scene.agent_milestones(), ms.DRAIN_FINISHED, reason=Kind.POWEROFF.value)


def drained_for_restart(scene: Scene, kind: Kind) -> float | None:
    """The end of the agent's drain for the restart `kind`. logind of systemd 252 (the
    nspawn node's) does not say a reboot from a poweroff: the agent reports a reboot's drain
    as one for poweroff. The VM's systemd 257 sends the type
    (PrepareForShutdownWithMetadata)."""
    if scene.shape != "vm":
        return drained_for_shutdown(scene, kind)
    return ms.when(scene.agent_milestones(), ms.DRAIN_FINISHED, reason=kind.value)


def drained_for_warning(scene: Scene, kind: Kind) -> float | None:
    return ms.when(scene.agent_milestones(), ms.DRAIN_FINISHED, reason=WARNING_REASON)


def evacuated(scene: Scene, kind: Kind) -> float | None:
    return scene.evacuated


def stopped(scene: Scene, kind: Kind) -> float | None:
    return scene.stopped


def returned(scene: Scene, kind: Kind) -> float | None:
    return scene.returned


@dataclass(frozen=True)
class Way:
    """One kind's row: how the node leaves (`leave` returns when the last leaving node is
    off), the release with the agent, without it (None: when the node was off), what is
    set up first, whether the staying node leaves after it too, and whether the cap on
    the departure counts from the poweroff (a notice's comes minutes in), not its start."""

    leave: Leave
    release: Release = drained_for_shutdown
    unaided: Release | None = None
    prepare: Callable[[Scene], None] | None = None
    both_nodes: bool = False
    cap_from_poweroff: bool = False  # the departure's cap counts from the poweroff
    # The do-not-disrupt pod on the leaving node: Karpenter waits for it without end
    # (without a NodeClaim's terminationGracePeriod), so its kind runs without it.
    dnd: bool = True


WAYS: dict[Kind, Way] = {
    Kind.POWEROFF: Way(poweroff),
    Kind.EVACUATE: Way(evacuate, release=evacuated),
    Kind.REBOOT: Way(reboot, release=drained_for_restart),
    Kind.SOFT_REBOOT: Way(soft_reboot, release=drained_for_restart),
    Kind.ROLLING_REBOOT: Way(reboot, release=returned, unaided=returned, both_nodes=True),
    Kind.SIGTERM_IGNORING: Way(poweroff, prepare=stubborn_pod),
    Kind.STOP: Way(maintain, release=stopped),
    Kind.DAEMONSET_POWEROFF: Way(poweroff),
    Kind.POWEROFF_TARGET: Way(poweroff_target),
    Kind.SPOT_INTERRUPTION: Way(
        spot_interruption, release=drained_for_warning, cap_from_poweroff=True
    ),
    # The other actors' (actorways.py): their drain's end is the release with the agent or
    # without it (the agent does not drain a second time beside them).
    Kind.FOREIGN_UNCORDON: Way(aw.foreign_uncordon),
    Kind.NODE_DELETED: Way(aw.node_deleted),
    Kind.AUTOSCALER_SCALE_DOWN: Way(aw.autoscaler_scale_down, release=evacuated, unaided=evacuated),
    Kind.KARPENTER_TERMINATION: Way(
        aw.karpenter_termination,
        release=evacuated,
        unaided=evacuated,
        prepare=aw.registered_to_karpenter,
        dnd=False,
    ),
    Kind.KURED_REBOOT: Way(
        aw.kured_reboot, release=evacuated, unaided=evacuated, prepare=aw.kured_daemonset
    ),
}


def released(scene: Scene, kind: Kind, off: float | None) -> float | None:
    """When the node was let go (the table's release)."""
    way = WAYS[kind]
    if scene.config.agent:
        return way.release(scene, kind)
    return off if way.unaided is None else way.unaided(scene, kind)


def agent_times(records: list[ms.Record]) -> dict[str, float | None]:
    """From the agent's milestones: when it heard AWS's interruption warning and when that
    drain ended, and the seconds from logind's first PrepareForShutdown to the lock's
    release after it."""
    announced = ms.when(records, ms.SHUTDOWN_ANNOUNCED, source="logind")
    released = None if announced is None else ms.when(records, ms.LOCK_RELEASED, announced)
    return {
        "warning_heard": ms.when(records, ms.WARNING_HEARD, cloud="aws", kind="interruption"),
        "warning_drained": ms.when(records, ms.DRAIN_FINISHED, reason=WARNING_REASON),
        "lock_held_s": None if released is None or announced is None else released - announced,
    }


# ---- helpers -----------------------------------------------------------------------------


def emptied(scene: Scene) -> bool:
    """No pod of the service is left on the leaving node (the agent logs no evacuation
    outcome line at INFO: the API says when the drain is done)."""
    return not [p for p in scene.pods() if p["spec"].get("nodeName") == scene.leaving.name]


def wait_off(node: Node, notes: list[str]) -> None:
    """Until the node is off; one still up after DEPARTURE_CAP_S is noted with what its
    systemd still has queued, then killed (seen while the nodes' console was an unread pty:
    PID 1 blocked in a status line once it was full, hack/nspawn.py)."""
    try:
        node.wait_exit(DEPARTURE_CAP_S)
        return
    except subprocess.TimeoutExpired:
        pass
    notes.append(f"still up {DEPARTURE_CAP_S:.0f}s after the shutdown began ({jobs(node)}): killed")
    node.kill()


def jobs(node: Node) -> str:
    """What the node's systemd still has queued, for a note (its manager may not answer)."""
    try:
        out = node.run("systemctl", "list-jobs", "--no-legend", "--no-pager", timeout=10)
    except (subprocess.TimeoutExpired, NodeError):
        return "its systemd did not answer"
    listed = "; ".join(" ".join(line.split()[1:3]) for line in out.stdout.splitlines())
    return f"jobs queued: {listed or 'none'}"


def userspace(node: VmLeaving) -> str:
    """When the guest's systemd started its userspace (a soft-reboot starts it again)."""
    out = node.run("systemctl", "show", "-P", "UserspaceTimestampMonotonic", timeout=20)
    return out.stdout.strip() if out.returncode == 0 else ""
