"""What hack/vm's runs share (smoke.py: the power button; restart.py: reboot and
soft-reboot): a local control plane of their own, a spare node for the pods, one VM node
with the agent, a workload under a PDB, the steps' timings, and the agent's milestones read
from the guest's journal. Each run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hack import kubeutil as ku
from hack import machinelock, milestones
from hack.localcluster.cluster import Cluster
from hack.realnode import TEST_IMAGE
from nodeagent.kube.client import Kube, node_path

from . import agent
from .config import KUBECONFIG, VmOptions
from .node import VmNode

POLITE = "trap 'exit 0' TERM; while true; do sleep 1; done"
REPLICAS = 2
AGENT_DEADLINE = 60
LOCK_WAIT = 3600.0


class SmokeFailed(AssertionError):
    """What the run saw differs from what the agent promises."""


@dataclass
class Timings:
    steps: dict[str, float] = field(default_factory=dict)

    def time(self, name: str, fn: Callable[[], object]) -> None:
        started = time.monotonic()
        fn()
        self.steps[name] = time.monotonic() - started
        print(f"  {name}: {self.steps[name]:.1f}s", flush=True)


@dataclass
class Stage:
    """The run's cluster client, its VM node, the namespace (`group`) and the spare node."""

    kube: Kube
    vm: VmNode
    group: str
    spare: str
    t: Timings


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


def boot_with_workload(stage: Stage) -> None:
    """Boot the VM, run the workload on it and wait for the agent's lock; then the spare
    node takes pods."""
    kube, vm, t = stage.kube, stage.vm, stage.t
    t.time("boot to kubelet Ready", vm.boot)
    workload(kube, stage.group)
    t.time(
        f"{REPLICAS} pods created to Running",
        lambda: ku.wait_running(kube, vm.name, REPLICAS, timeout=600),
    )
    ku.wait_pdb_ready(kube, stage.group, "web", timeout=120)
    t.time("agent holding logind's delay lock", lambda: wait_agent(vm))
    ku.open_node(kube, stage.spare)


def wait_agent(node: VmNode) -> None:
    def holding() -> bool:
        # The lock taken at the agent's start is its readiness.
        return milestones.first(node.milestones(), milestones.LOCK_TAKEN) is not None

    node.wait(300, holding, "the agent never took its logind lock")


def milestone(
    records: list[milestones.Record], name: str, after: float | None = None, **fields: str
) -> float:
    """When the first milestone `name` with `fields` (at `after` or later) was written."""
    found = milestones.when(records, name, after, **fields)
    if found is None:
        wanted = " ".join(f"{k}={v}" for k, v in fields.items())
        seen = "; ".join(f"{r.name} {dict(r.fields)} at {r.time:.1f}" for r in records[-10:])
        raise SmokeFailed(f"no milestone {name} {wanted} in the agent's journal; last: {seen}")
    return found


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """The machine-wide lock of runs that must not share the CPUs, if one is named."""
    with machinelock.held(lock, int(LOCK_WAIT), SmokeFailed):
        yield


def run(workdir: Path, scenario: Callable[[Stage], None], lock: Path | None) -> dict[str, float]:
    """A cluster, a spare node (cordoned until the workload runs on the VM) and the VM node
    with the agent; `scenario` runs under the machine lock. Returns the steps' seconds."""
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
            scenario(Stage(kube, vm, group, spare, t))
        return t.steps
    finally:
        if node is not None:
            node.stop()
        cluster.stop()


def main(name: str, scenario: Callable[[Stage], None], ok: str, lock: Path | None) -> int:
    """Run `scenario` in a directory of its own; print what it measured, or why it failed."""
    with tempfile.TemporaryDirectory(prefix=f"vm-{name}.") as tmp:
        try:
            steps = run(Path(tmp), scenario, lock)
        except SmokeFailed as exc:
            print(f"FAILED: {exc}")
            return 1
    print(f"OK: {ok}")
    print(" ".join(f"{k}={v:.1f}s" for k, v in steps.items()))
    return 0
