"""hack/vm smoke: a VM node with the agent is powered off by its ACPI power button, and the
agent drains it first (cordon with the reason poweroff, the pods evicted to a spare, logind's
delay lock released, then the kubelet stops and the VM powers off). Prints what it measured.

It starts its own local control plane and leaves nothing behind. Run it alone on the
machine's CPUs: the VM is emulated (TCG) and its timings are the point.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hack import kubeutil as ku
from hack import machinelock
from hack.localcluster.cluster import Cluster
from hack.realnode import TEST_IMAGE
from nodeagent.fence.marker import DRAIN_REASON
from nodeagent.kube.client import JSON, Kube, node_path, pods_path

from . import agent
from .config import KUBECONFIG, VmOptions
from .node import VmNode

POLITE = "trap 'exit 0' TERM; while true; do sleep 1; done"
REPLICAS = 2
AGENT_DEADLINE = 60
LOCK_WAIT = 3600.0


class SmokeFailed(AssertionError):
    """What the smoke run saw differs from a drain before the power-off."""


@dataclass
class Timings:
    steps: dict[str, float] = field(default_factory=dict)

    def time(self, name: str, fn: Callable[[], object]) -> None:
        started = time.monotonic()
        fn()
        self.steps[name] = time.monotonic() - started
        print(f"  {name}: {self.steps[name]:.1f}s", flush=True)


def agent_config() -> str:
    # No node name and no kubeconfig of its own: the host form's defaults, the kubelet's
    # identity (the node name comes from its certificate).
    return f"""kubelet_kubeconfig = "{KUBECONFIG}"

[drain]
deadline = "{AGENT_DEADLINE}s"

[uncordon]
settle = "1s"

[reporting]
metrics_address = ""
"""


def workload(kube: Kube, group: str) -> None:
    container = {
        "name": "app",
        "image": TEST_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", POLITE],
    }
    ku.deployment(
        kube, group, "web", group, REPLICAS,
        containers=[container], terminationGracePeriodSeconds=10,
        automountServiceAccountToken=False,
    )  # fmt: skip
    ku.pdb(kube, group, "web", {"app": "web"}, maxUnavailable=1)


def journal_time(node: VmNode, unit: str, text: str) -> float:
    lines = [ln for ln in node.journal_text("-u", unit).splitlines() if text in ln]
    if not lines:
        raise SmokeFailed(f"no {text!r} in {unit}'s journal")
    return float(lines[-1].split()[0])


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """The machine-wide lock of runs that must not share the CPUs, if one is named."""
    with machinelock.held(lock, int(LOCK_WAIT), SmokeFailed):
        yield


def run(workdir: Path, lock: Path | None = None) -> dict[str, float]:
    t = Timings()
    cluster = Cluster.start(workdir / "cluster")
    node: VmNode | None = None
    try:
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        group = ku.unique("vm")
        ku.namespace(kube, group)
        spare = f"{group}-spare"
        cluster.add_node(spare, {ku.GROUP_LABEL: group})
        kube.merge_patch(node_path(spare), {"spec": {"unschedulable": True}})
        name = f"{group}-a"
        opts = VmOptions(labels={ku.GROUP_LABEL: group})

        def create() -> None:
            nonlocal node
            node = VmNode.create(cluster, name, workdir / name, opts)
            agent.install(node.root, agent_config())

        t.time("root copy, node files, agent", create)
        assert node is not None
        vm = node
        t.time("disk image (mke2fs -d)", vm.make_disk)
        with held(lock):
            scenario(kube, vm, group, spare, t)
        return t.steps
    finally:
        if node is not None:
            node.stop()
        cluster.stop()


def scenario(kube: Kube, vm: VmNode, group: str, spare: str, t: Timings) -> None:
    """Boot, a workload, the power button, and what happened, read from the API and the disk."""
    name = vm.name
    t.time("boot to kubelet Ready", vm.boot)
    cgroup = vm.run("stat", "-fc", "%T", "/sys/fs/cgroup").stdout.strip()
    print(f"  guest: cgroup fs {cgroup}, kernel {vm.run('uname', '-r').stdout.strip()}")
    workload(kube, group)
    t.time(
        f"{REPLICAS} pods created to Running",
        lambda: ku.wait_running(kube, name, REPLICAS, timeout=600),
    )
    ku.wait_pdb_ready(kube, group, "web", timeout=120)
    t.time("agent holding logind's delay lock", lambda: wait_agent(vm))
    ku.open_node(kube, spare)
    pressed = time.time()
    vm.power_button()
    t.time("power button to VM off", lambda: vm.wait_exit(600))
    check(kube, vm, group, spare, pressed, t)


def wait_agent(node: VmNode) -> None:
    def holding() -> bool:
        out = node.run("journalctl", "-u", "nodeagent", "-o", "cat").stdout
        return "holding a logind delay lock" in out

    node.wait(300, holding, "the agent never took its logind lock")


def check(kube: Kube, node: VmNode, group: str, spare: str, pressed: float, t: Timings) -> None:
    obj = ku.node(kube, node.name)
    reason = obj["metadata"].get("annotations", {}).get(DRAIN_REASON)
    if not obj["spec"].get("unschedulable") or reason != "poweroff":
        raise SmokeFailed(f"node not cordoned for poweroff: {DRAIN_REASON}={reason!r}")
    pods: list[JSON] = kube.get(pods_path(group)).get("items", [])
    moved = [p for p in pods if p["spec"].get("nodeName") == spare and ku.ready(p)]
    if len(moved) < REPLICAS:
        raise SmokeFailed(f"{len(moved)} of {REPLICAS} replacements Ready on the spare")
    drained = journal_time(node, "nodeagent", "drain for poweroff: drained")
    released = journal_time(node, "nodeagent", "released the logind delay lock")
    stopping = journal_time(node, "kubelet", "Stopping")
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
    with tempfile.TemporaryDirectory(prefix="vm-smoke.") as tmp:
        try:
            steps = run(Path(tmp), lock)
        except SmokeFailed as exc:
            print(f"FAILED: {exc}")
            return 1
    print("OK: the power button drained the node before it powered off")
    print(" ".join(f"{k}={v:.1f}s" for k, v in steps.items()))
    return 0
