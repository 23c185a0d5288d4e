"""hack/vm smoke: a VM node with the agent is powered off by its ACPI power button, and the
agent drains it first (cordon with the reason poweroff, the pods evicted to a spare, logind's
delay lock released, then the kubelet stops and the VM powers off). Prints what it measured.

It starts its own local control plane and leaves nothing behind (stage.py). Run it alone on
the machine's CPUs: the VM is emulated (TCG) and its timings are the point.
"""

from __future__ import annotations

import time
from pathlib import Path

from hack import kubeutil as ku
from hack import milestones as ms
from nodeagent.fence.marker import DRAIN_REASON
from nodeagent.kube.client import JSON, pods_path

from . import stage
from .node import VmNode
from .stage import REPLICAS, SmokeFailed, Stage, boot_with_workload, milestone


def scenario(run: Stage) -> None:
    """Boot, a workload, the power button, and what happened, read from the API and the disk."""
    vm = run.vm
    boot_with_workload(run)
    cgroup = vm.run("stat", "-fc", "%T", "/sys/fs/cgroup").stdout.strip()
    print(f"  guest: cgroup fs {cgroup}, kernel {vm.run('uname', '-r').stdout.strip()}")
    pressed = time.time()
    vm.power_button()
    run.t.time("power button to VM off", lambda: vm.wait_exit(600))
    check(run, pressed)


def kubelet_stopping(node: VmNode) -> float:
    """systemd's last "Stopping" line for the kubelet (guest clock; not the agent's)."""
    lines = [ln for ln in node.journal_text("-u", "kubelet").splitlines() if "Stopping" in ln]
    if not lines:
        raise SmokeFailed("no 'Stopping' in kubelet's journal")
    return float(lines[-1].split()[0])


def check(run: Stage, pressed: float) -> None:
    kube, node, t = run.kube, run.vm, run.t
    obj = ku.node(kube, node.name)
    reason = obj["metadata"].get("annotations", {}).get(DRAIN_REASON)
    if not obj["spec"].get("unschedulable") or reason != "poweroff":
        raise SmokeFailed(f"node not cordoned for poweroff: {DRAIN_REASON}={reason!r}")
    pods: list[JSON] = kube.get(pods_path(run.group)).get("items", [])
    moved = [p for p in pods if p["spec"].get("nodeName") == run.spare and ku.ready(p)]
    if len(moved) < REPLICAS:
        raise SmokeFailed(f"{len(moved)} of {REPLICAS} replacements Ready on the spare")
    records = node.milestones()
    drained = milestone(records, ms.DRAIN_FINISHED, reason="poweroff", outcome="drained")
    released = milestone(records, ms.LOCK_RELEASED, drained)
    stopping = kubelet_stopping(node)
    if not pressed < drained <= released < stopping:
        raise SmokeFailed(
            f"out of order: pressed {pressed:.1f}, drained {drained:.1f}, "
            f"released {released:.1f}, kubelet stopping {stopping:.1f}"
        )
    t.steps["power button to drained"] = drained - pressed
    t.steps["power button to lock released"] = released - pressed
    t.steps["power button to kubelet stopping"] = stopping - pressed
    for key in ("drained", "lock released", "kubelet stopping"):
        print(f"  power button to {key}: {t.steps['power button to ' + key]:.1f}s")


def main(lock: Path | None = None) -> int:
    ok = "the power button drained the node before it powered off"
    return stage.main("smoke", scenario, ok, lock)
