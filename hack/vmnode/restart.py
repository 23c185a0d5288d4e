"""hack/vm reboot|soft-reboot: a VM node with the agent is restarted from inside
(``systemctl reboot``: a new kernel and boot ID; ``systemctl soft-reboot``: userspace only,
the same kernel and boot ID), and the agent names the shutdown's type from systemd 257's
``PrepareForShutdownWithMetadata``, drains, and uncordons the node once its kubelet is back.

What it checks, from the API (polled through the restart) and the guest's journal (read once
it is back): the drain reason, the drain before logind's lock is released, the boot ID
changed or kept as the kind says, no ``UncleanShutdown``, and the uncordon no earlier than
the kubelet's first heartbeat after it started again. Prints what it measured.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

from hack import kubeutil as ku
from hack import milestones as ms
from nodeagent.fence.marker import DRAIN_REASON
from nodeagent.kube.client import Kube, api_time, node_path
from nodeagent.objects import condition, is_ready

from . import stage
from .node import VmError, VmNode
from .stage import SmokeFailed, Stage, Timings, boot_with_workload, milestone

KINDS = ("reboot", "soft-reboot")
COMEBACK = 900.0  # seconds from the command to uncordoned, TCG at nice 19 included


@dataclass(frozen=True)
class Seen:
    """One look at the Node from the host while it restarts."""

    at: float  # host wall clock
    boot_id: str
    cordoned: bool
    reason: str
    ready: bool
    heartbeat: float


def look(kube: Kube, name: str) -> Seen:
    obj = kube.get(node_path(name))
    ready = condition(obj, "Ready") or {}
    return Seen(
        at=time.time(),
        boot_id=(obj.get("status") or {}).get("nodeInfo", {}).get("bootID", ""),
        cordoned=bool(obj["spec"].get("unschedulable")),
        reason=obj["metadata"].get("annotations", {}).get(DRAIN_REASON, ""),
        ready=is_ready(obj),
        heartbeat=(api_time(ready.get("lastHeartbeatTime")) or 0.0) if ready else 0.0,
    )


def scenario(kind: str, run: Stage) -> None:
    kube, vm = run.kube, run.vm
    boot_with_workload(run)
    before = look(kube, vm.name)
    ahead = vm.clock_offset()
    sent = time.time()
    try:
        vm.run("systemctl", kind, timeout=60)
    except VmError as exc:  # the guest agent may be stopped before it answers
        print(f"  systemctl {kind}: {exc}")
    seen = watch(kube, vm, sent)
    try:
        vm.wait(300, vm.guest_agent_up, "the guest agent did not come back")
    except VmError as exc:
        raise SmokeFailed(f"{exc}\n{post_mortem(vm)}") from exc
    clocks = Clocks(ahead, vm.clock_offset())
    print(f"  guest clock ahead of the host: {clocks.before:+.2f}s, after the {kind} "
          f"{clocks.after:+.2f}s")  # fmt: skip
    check(kind, kube, vm, before, sent, seen, clocks, run.t)


def post_mortem(vm: VmNode) -> str:
    """With no guest agent to ask: the power button (a clean stop flushes the journal), then
    what the disk's journal says of the guest agent, its port and the units it was late for."""
    if vm.running():
        vm.power_button()
        vm.wait_exit(600)
    lines = vm.journal_text("--no-hostname").splitlines()
    keys = ("qemu-guest-agent", "guest_agent", "qemu-ga", "soft-reboot", "vmnode-net", "-- Boot")
    return "\n".join(ln for ln in lines if any(k in ln for k in keys))


def watch(kube: Kube, vm: VmNode, sent: float) -> list[Seen]:
    """The Node, once a second, from the command until it is cordoned and then uncordoned."""
    seen: list[Seen] = []

    def uncordoned() -> bool:
        seen.append(look(kube, vm.name))
        return any(s.cordoned for s in seen) and not seen[-1].cordoned

    vm.wait(COMEBACK, uncordoned, "not cordoned and uncordoned again")
    return seen


def kubelet_line(vm: VmNode, text: str, after: float) -> float:
    """When the kubelet unit's first line holding `text` after `after` was written (every
    boot's journal; systemd's lines about the unit, not the agent's milestones)."""
    out = vm.run("journalctl", "-u", "kubelet", "-o", "short-unix", "--no-pager", timeout=120)
    lines = [ln for ln in out.stdout.splitlines() if ln[:1].isdigit()]
    later = [ln for ln in lines if float(ln.partition(" ")[0]) >= after]
    for line in later:
        stamp, _, rest = line.partition(" ")
        if text in rest:
            return float(stamp)
    tail = "\n".join(later[-20:])
    raise SmokeFailed(
        f"no {text!r} in kubelet's journal after {after:.1f}; its last lines:\n{tail}"
    )


@dataclass(frozen=True)
class Clocks:
    """The guest's clock minus the host's before the command and once the guest is back: a
    reboot starts the guest's clock again from the emulated RTC's whole seconds."""

    before: float
    after: float


@dataclass(frozen=True)
class Stamps:
    """When each step happened, by the guest's clock (its journal) and the kubelet's heartbeat."""

    drained: float
    released: float
    stopped: float
    started: float
    back: float  # the restarted kubelet's first Ready heartbeat seen (whole seconds)
    uncordoned: float  # the agent's "cordon undone", logged once the API took the uncordon

    def on_host(self, clocks: Clocks) -> Stamps:
        """The same moments by the host's clock: up to the kubelet's stop by the guest's clock
        before the command, from its start again on by the guest's clock once it is back."""
        return Stamps(
            self.drained - clocks.before,
            self.released - clocks.before,
            self.stopped - clocks.before,
            self.started - clocks.after,
            self.back - clocks.after,
            self.uncordoned - clocks.after,
        )


def stamps(kind: str, vm: VmNode, sent: float, seen: list[Seen]) -> Stamps:
    """The guest's stamps of each step; `sent` by the guest's clock."""
    records = vm.milestones()
    announced = ms.first(records, ms.SHUTDOWN_ANNOUNCED, sent, source="logind")
    if announced is None or announced.fields.get("reason") != kind:
        raise SmokeFailed(f"the agent heard: {announced}")
    drained = milestone(records, ms.DRAIN_FINISHED, sent, reason=kind, outcome="drained")
    released = milestone(records, ms.LOCK_RELEASED, sent)
    stopped = kubelet_line(vm, "Stopping", sent)
    started = kubelet_line(vm, "Started kubelet", stopped)
    # The uncordon after a boot: the departure worker's settled step, once the API took it.
    uncordoned = milestone(records, ms.UNCORDONED, released, reason=kind)
    back = [s for s in seen if s.ready and s.heartbeat >= int(started)]
    if not back:
        raise SmokeFailed("no heartbeat from the restarted kubelet seen before the uncordon")
    return Stamps(drained, released, stopped, started, back[0].heartbeat, uncordoned)


def check(
    kind: str,
    kube: Kube,
    vm: VmNode,
    before: Seen,
    sent: float,
    seen: list[Seen],
    clocks: Clocks,
    t: Timings,
) -> None:
    reasons = {s.reason for s in seen if s.cordoned and s.reason}
    if reasons != {kind}:
        raise SmokeFailed(f"cordoned with {DRAIN_REASON} {sorted(reasons)}, not {kind!r}")
    guest = stamps(kind, vm, sent + clocks.before, seen)
    at = guest.on_host(clocks)
    for label, stamp in (
        ("drained", at.drained),
        ("lock released", at.released),
        ("kubelet started again", at.started),
        ("back Ready (heartbeat)", at.back),
        ("uncordoned", at.uncordoned),
    ):
        t.steps[f"{kind} to {label}"] = stamp - sent
        print(f"  {kind} to {label}: {stamp - sent:.1f}s", flush=True)
    after = seen[-1]
    print(f"  boot ID {before.boot_id} -> {after.boot_id}")
    if not sent < at.drained <= at.released < at.stopped < at.started:
        raise SmokeFailed(
            f"out of order: sent {sent:.1f}, drained {at.drained:.1f}, released "
            f"{at.released:.1f}, kubelet stopped {at.stopped:.1f}, started {at.started:.1f}"
        )
    if at.uncordoned < at.back:
        raise SmokeFailed(
            f"uncordoned at {at.uncordoned:.1f}, before the restarted kubelet's first heartbeat "
            f"{at.back:.0f}"
        )
    same = after.boot_id == before.boot_id
    if same != (kind == "soft-reboot"):
        raise SmokeFailed(f"boot ID {before.boot_id} -> {after.boot_id} after a {kind}")
    unclean = [
        c for c in ku.node(kube, vm.name)["status"].get("conditions", [])
        if c.get("reason") == "UncleanShutdown"
    ]  # fmt: skip
    if unclean:
        raise SmokeFailed(f"reported {unclean[0]['type']}=UncleanShutdown after a {kind}")


def main(kind: str, lock: Path | None = None) -> int:
    ok = f"the {kind} was named, drained first, and undone once the kubelet was back"
    return stage.main(kind, functools.partial(scenario, kind), ok, lock)
