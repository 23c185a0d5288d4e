"""nodeagent.service in a booted systemd (systemd-nspawn), against the real control plane.

Each test boots a fresh copy of the cached Debian root (``hack/nspawn-root``) with the agent's
Debian package installed as on a node image (``hack/build-deb``: unit, logind drop-in, config)
and a stand-in kubelet it is ordered after; the container's name is also the simulated Node's
name. Shutdowns are real: ``poweroff``,
``reboot``, ``systemctl stop``, a logind bypass and a shutdown logind itself cancels, each
checked from the API (cordon, pods, annotations, Events) and from the container's journal.

Runs as root with systemd-nspawn and debootstrap installed (``hack/setup`` provides both).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hack import kubeutil as ku
from hack import milestones
from hack.deb import build_deb
from hack.nspawn import EXIT_REBOOT, realtime
from nodeagent.fence.marker import (
    CORDONED_BY,
    DRAIN_REASON,
    DRAIN_RESULT,
    LAST_BOOT_ID,
    MARKER_KEYS,
)
from nodeagent.kube.client import Kube, node_path
from nodeagent.report.conditions import READY
from tests.nspawn import (
    KUBELET_KUBECONFIG,
    ApiRelay,
    Machine,
    next_deb,
    nspawn_root,
    packaged_root,
)

DEADLINE = 20.0
LOGIND_DELAY = 128.0  # systemd/logind-nodeagent.conf
# Shutdown beyond the drain: reporting, closing the lock, stopping the other units.
MARGIN = 15.0


def config(deadline: float = DEADLINE, extra: str = "") -> str:
    # No kubeconfig and no node name: the agent's defaults, the kubelet's own kubeconfig and
    # the node name in its certificate.
    return f"""[drain]
deadline = "{deadline:.0f}s"

[uncordon]
settle = "1s"

[reporting]
metrics_address = ""
{extra}"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packaged_root(nspawn_root(), tmp_path_factory.getbasetemp() / "packaged")


@dataclass
class Node:
    """A container and the simulated Node of the same name, with a spare node for replacements."""

    kube: Kube
    machine: Machine
    name: str
    spare: str
    group: str
    ns: str

    def open_spare(self) -> None:
        self.kube.merge_patch(node_path(self.spare), {"spec": {"unschedulable": False}})

    def workloads(self) -> None:
        """Three Deployment replicas and a DaemonSet pod on the node, all Ready."""
        ku.deployment(self.kube, self.ns, "web", self.group, 3)
        ku.daemonset(self.kube, self.ns, "logs", self.group)
        ku.wait_running(self.kube, self.name, 4)
        self.open_spare()

    def annotations(self) -> dict[str, str]:
        return dict(ku.node(self.kube, self.name)["metadata"].get("annotations") or {})

    def unschedulable(self) -> bool:
        return bool(ku.node(self.kube, self.name)["spec"].get("unschedulable"))

    def left(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in ku.running(ku.pods_on(self.kube, self.name)))

    def boot(self, cfg: str | None = None) -> None:
        if cfg is not None:
            self.machine.write_config(cfg)
        self.machine.boot()

    def agent_ready(self) -> None:
        """Until the agent holds its logind lock (it hears PrepareForShutdown from then on)."""
        ku.wait_until(lambda: self.locks_taken() >= 1, 30, "the agent to take its logind lock")

    def records(self) -> list[milestones.Record]:
        """The agent's milestones in its unit's journal, every boot's (read as data)."""
        return milestones.from_journal(self.machine.journal("-u", "nodeagent.service"))

    def locks_taken(self) -> int:
        """How often the agent took its logind lock (each start, each cancelled shutdown)."""
        return sum(r.name == milestones.LOCK_TAKEN for r in self.records())

    def journal_line(self, text: str) -> dict[str, str]:
        found = [e for e in self.machine.journal("-u", "nodeagent.service") if text in e["MESSAGE"]]
        assert found, f"no {text!r} in the agent's journal:\n" + "\n".join(self.machine.messages())
        return found[-1]

    def milestone(self, name: str, **fields: str) -> float:
        """When the agent last wrote milestone `name` with these fields (read as data)."""
        records = self.records()
        found = milestones.last(records, name, None, **fields)
        assert found, f"no milestone {name} {fields} in the agent's journal: {records}"
        return found.time


@contextmanager
def new_node(cluster: Any, kube: Kube, template: Path, tmp_path: Path) -> Iterator[Node]:
    """A simulated Node, a spare, a namespace, and a container of the template's."""
    group = ku.unique("sys")
    name, spare = f"{group}-a", f"{group}-b"
    cluster.add_node(name, {ku.GROUP_LABEL: group})
    cluster.add_node(spare, {ku.GROUP_LABEL: group})
    kube.merge_patch(node_path(spare), {"spec": {"unschedulable": True}})
    ns = ku.namespace(kube, group)
    machine = Machine(template, tmp_path, name)
    try:
        yield Node(kube, machine, name, spare, group, ns)
    finally:
        # Shown by pytest only when the test fails.
        print(machine.journal_text()[-20000:])
        machine.destroy()


@pytest.fixture
def node(cluster: Any, kube: Kube, template: Path, tmp_path: Path) -> Iterator[Node]:
    with new_node(cluster, kube, template, tmp_path) as n:
        kubelet = cluster.mint_node_kubeconfig(n.name, tmp_path / "kubelet.kubeconfig")
        n.machine.install_agent(kubelet, config(), kubelet=True)
        yield n


def assert_drained(node: Node, *reasons: str) -> None:
    ann = node.annotations()
    assert node.unschedulable()
    assert ann.get(CORDONED_BY) == "nodeagent"
    assert ann.get(DRAIN_REASON) in reasons, ann
    assert ann.get(DRAIN_RESULT) == "drained", ann
    # Only the DaemonSet pod stays.
    left = node.left()
    assert len(left) == 1 and left[0].startswith("logs-"), left


def wait_uncordoned(node: Node, what: str) -> None:
    ku.wait_until(
        lambda: not node.unschedulable() and CORDONED_BY not in node.annotations(), 30, what
    )


def uncordoned_event(node: Node) -> None:
    # The agent posts its Events in the background, after the write they report.
    ku.wait_until(
        lambda: any(e["reason"] == "Uncordoned" for e in ku.node_events(node.kube, node.name)),
        10,
        "the Uncordoned Event",
    )


# What Debian 12's unattended-upgrades ships (/usr/lib) and what the kubelet writes (/etc) when
# its graceful node shutdown is on, here with shutdownGracePeriod: 30s. Both set logind's
# ceiling; the agent's drop-in must sort after them.
VENDOR_DROPINS = {
    "usr/lib/systemd/logind.conf.d/unattended-upgrades-logind-maxdelay.conf": (
        "[Login]\n# delay\nInhibitDelayMaxSec=30\n"
    ),
    "etc/systemd/logind.conf.d/99-kubelet.conf": (
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
    ),
}
KUBELET_GRACE = 30.0


def install_vendor_dropins(machine: Machine) -> None:
    for inside, text in VENDOR_DROPINS.items():
        path = machine.path(inside)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_logind_dropin_wins_over_vendor_and_kubelet_dropins(node: Node) -> None:
    install_vendor_dropins(node.machine)
    node.boot()
    node.agent_ready()

    delay = node.machine.logind_delay()
    print(f"logind's effective InhibitDelayMaxUSec: {delay:.0f}s")
    assert delay == LOGIND_DELAY
    assert delay >= KUBELET_GRACE  # else the kubelet's shutdown manager would not start


def test_poweroff_drains_before_the_kubelet_stops(node: Node) -> None:
    node.workloads()
    node.boot()
    node.agent_ready()

    start = time.time()
    assert node.machine.run("poweroff").returncode == 0
    assert node.machine.wait_exit(DEADLINE + MARGIN) == 0

    assert_drained(node, "poweroff")
    (stopped,) = node.machine.kubelet_stops()
    drained = node.milestone(milestones.DRAIN_FINISHED, reason="poweroff", outcome="drained")
    assert start < drained < stopped
    print(f"poweroff to kubelet stop: {stopped - start:.2f}s")
    # On the kubelet's own identity, found by the agent itself.
    node.journal_line(f"identity system:node:{node.name}")


def test_reboot_drains_and_uncordons_after_the_next_boot(node: Node) -> None:
    node.workloads()
    node.boot()
    node.agent_ready()

    assert node.machine.run("reboot").returncode == 0
    assert node.machine.wait_exit(DEADLINE + MARGIN) == EXIT_REBOOT
    # logind before v255 (bookworm has 252) sends PrepareForShutdown without the type, which the
    # agent records as a poweroff; a newer logind says reboot.
    assert_drained(node, "reboot", "poweroff")
    assert len(node.machine.kubelet_stops()) == 1

    # The simulated Node's bootID does not change with the container: the agent keys on its
    # own marker's reason.
    node.boot()
    wait_uncordoned(node, "the agent to uncordon the node after the reboot")
    uncordoned_event(node)


def test_stop_drains_and_start_uncordons(node: Node) -> None:
    node.workloads()
    node.boot()
    node.agent_ready()

    stop = node.machine.run("systemctl", "stop", "nodeagent", timeout=DEADLINE + MARGIN)
    assert stop.returncode == 0, stop.stderr
    assert_drained(node, "stop")
    node.milestone(milestones.STOPPING, reason="stop")
    assert node.machine.kubelet_stops() == []  # a maintenance stop leaves the kubelet alone

    start = node.machine.run("systemctl", "start", "nodeagent")
    assert start.returncode == 0, start.stderr
    wait_uncordoned(node, "the agent to uncordon the node after its start")


def test_restart_neither_cordons_nor_evicts(node: Node) -> None:
    node.workloads()
    node.boot()
    node.agent_ready()
    before = node.left()

    restart = node.machine.run("systemctl", "restart", "nodeagent", timeout=DEADLINE + MARGIN)
    assert restart.returncode == 0, restart.stderr
    ku.wait_until(
        lambda: node.locks_taken() >= 2,
        30,
        "the restarted agent to take its logind lock",
    )

    node.milestone(milestones.STOPPING, reason="restart")
    assert not node.unschedulable()
    assert CORDONED_BY not in node.annotations()
    assert node.left() == before
    assert not any(
        e["reason"] in ("Cordoned", "Drained", "DrainTimedOut")
        for e in ku.node_events(node.kube, node.name)
    )


def test_blocking_pdb_is_named_and_shutdown_completes_by_the_deadline(node: Node) -> None:
    deadline = 8.0
    ku.deployment(node.kube, node.ns, "web", node.group, 2)
    ku.wait_running(node.kube, node.name, 2)
    ku.pdb(node.kube, node.ns, "web-never", {"app": "web"}, maxUnavailable=0)
    ku.wait_pdb_ready(node.kube, node.ns, "web-never")
    node.open_spare()
    # Without forcing, the pods are still there at the deadline and the report names the PDB.
    node.boot(config(deadline, "\n[shutdown]\nforce_after_deadline = false\n"))
    node.agent_ready()

    start = time.monotonic()
    assert node.machine.run("poweroff").returncode == 0
    assert node.machine.wait_exit(deadline + MARGIN) == 0
    took = time.monotonic() - start

    assert deadline - 1 < took < deadline + MARGIN, took
    assert node.unschedulable()
    timed_out = [e for e in ku.node_events(node.kube, node.name) if e["reason"] == "DrainTimedOut"]
    assert timed_out, ku.node_events(node.kube, node.name)
    assert "web-never" in timed_out[-1]["message"], timed_out[-1]["message"]
    assert len(node.left()) == 2


def test_unreachable_api_server_does_not_hold_up_shutdown(node: Node, cluster: Any) -> None:
    node.workloads()
    node.boot()
    node.agent_ready()

    cluster.stop_apiserver()
    try:
        start = time.monotonic()
        assert node.machine.run("poweroff").returncode == 0
        assert node.machine.wait_exit(DEADLINE + MARGIN) == 0
        took = time.monotonic() - start
    finally:
        cluster.start_apiserver()

    print(f"poweroff with the API server down: {took:.1f}s")
    assert took < DEADLINE + MARGIN
    failed = node.milestone(milestones.DRAIN_FAILED, reason="poweroff")
    (stopped,) = node.machine.kubelet_stops()
    assert failed < stopped
    assert not node.unschedulable()


def test_bad_config_fails_the_unit_and_leaves_the_node_alone(node: Node) -> None:
    node.boot(config().replace("deadline =", "deadlin ="))

    errors = ku.wait_until(
        lambda: [m for m in node.machine.messages() if m.startswith("nodeagent: error:")],
        30,
        "the agent's error line",
    )
    assert "deadlin" in errors[0] and "\n" not in errors[0], errors
    assert node.machine.run("systemctl", "is-active", "nodeagent").stdout.strip() != "active"
    # Exit 2 stops the unit (RestartPreventExitStatus=2): past RestartSec=5 it has not been
    # restarted, and the journal says why once.
    time.sleep(7)
    show = node.machine.run(
        "systemctl", "show", "nodeagent", "-p", "NRestarts,Result,ExecMainStatus,ActiveState"
    ).stdout.split()
    assert sorted(show) == [
        "ActiveState=failed",
        "ExecMainStatus=2",
        "NRestarts=0",
        "Result=exit-code",
    ], show
    errors = [m for m in node.machine.messages() if m.startswith("nodeagent: error:")]
    assert len(errors) == 1, errors
    assert not node.unschedulable()
    assert not [k for k in node.annotations() if k.startswith("nodeagent.io/")]
    assert ku.node_events(node.kube, node.name) == []


def test_poweroff_target_bypassing_logind_drains_on_sigterm(node: Node) -> None:
    node.workloads()
    node.boot()
    node.agent_ready()
    container_scope(node.machine, POD_SCOPE)

    start = time.time()
    out = node.machine.run("systemctl", "start", "--no-block", "poweroff.target")
    assert out.returncode == 0, out.stderr
    assert node.machine.wait_exit(DEADLINE + MARGIN) == 0

    assert_drained(node, "poweroff")
    assert not any("PrepareForShutdown(True" in m for m in node.machine.messages())
    node.milestone(milestones.STOPPING, reason="poweroff")
    (stopped,) = node.machine.kubelet_stops()
    drained = node.milestone(milestones.DRAIN_FINISHED, reason="poweroff", outcome="drained")
    assert start < drained < stopped
    # The pod slice's stop at the shutdown's start stopped the container's scope only once
    # the agent had stopped (the package's drop-in, systemd/pod-scope-nodeagent.conf).
    agent_stopped = first_line(node.machine, "nodeagent.service", "Stopped ")
    assert drained < agent_stopped <= first_line(node.machine, POD_SCOPE, "Stopping ")


# A container's scope as containerd's systemd cgroup driver names it, in a pod's slice.
POD_SCOPE = "cri-containerd-0123456789abcdef.scope"
POD_SLICE = "kubepods-besteffort-pod0123.slice"


def container_scope(machine: Machine, name: str) -> None:
    """A container's scope in its pod's slice, both made as the kubelet's and runc's systemd
    driver make them: transient, DefaultDependencies=no. The slice still conflicts with
    shutdown.target, and its stop at a shutdown's start takes the scope down with it."""
    slice_unit = (
        "busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 "
        "org.freedesktop.systemd1.Manager StartTransientUnit 'ssa(sv)a(sa(sv))' "
        f"{POD_SLICE} replace 1 DefaultDependencies b false 0"
    )
    out = machine.run("sh", "-c", slice_unit)
    assert out.returncode == 0, out.stderr
    run = f"systemd-run --scope --unit={name} --slice={POD_SLICE} -p DefaultDependencies=no"
    out = machine.run("sh", "-c", f"{run} sleep infinity >/dev/null 2>&1 &")
    assert out.returncode == 0, out.stderr
    ku.wait_until(
        lambda: machine.run("systemctl", "is-active", name).stdout.strip() == "active",
        30,
        f"{name} active",
    )


def first_line(machine: Machine, unit: str, prefix: str) -> float:
    """When systemd first logged `prefix...` about `unit` (wall clock)."""
    found = [
        realtime(e)
        for e in machine.journal("_PID=1")
        if e.get("UNIT") == unit and e["MESSAGE"].startswith(prefix)
    ]
    assert found, f"systemd logged no {prefix!r} for {unit}"
    return min(found)


def agent_locks(node: Node) -> list[list[str]]:
    """The agent's own delay inhibitor locks on shutdown, as logind lists them."""
    return [
        row
        for row in node.machine.inhibitors()
        if row[0] == "nodeagent" and row[5] == "shutdown" and row[7] == "delay"
    ]


def test_cancelled_shutdown_uncordons_and_retakes_the_lock(node: Node) -> None:
    """logind announces a poweroff, then cannot start poweroff.target: PrepareForShutdown(false).

    systemd 252's logind (src/login/logind-dbus.c) sends PrepareForShutdown(true) once it has
    checked that the target is loaded, waits for every delay lock, then starts the target; when
    that StartUnit call fails it sends PrepareForShutdown(false) and forgets the shutdown. A
    second delay lock, held here by a transient unit, keeps logind waiting after the agent has
    drained and released its own; the target is masked in that window and the lock let go.
    """
    machine = node.machine
    node.workloads()
    node.boot()
    node.agent_ready()
    hold = machine.run(
        "systemd-run",
        "--unit=hold-shutdown",
        "--quiet",
        "systemd-inhibit",
        "--what=shutdown",
        "--mode=delay",
        "--who=hold-shutdown",
        "--why=keeps logind in its delay window",
        "sleep",
        "infinity",
    )
    assert hold.returncode == 0, hold.stderr
    ku.wait_until(
        lambda: any(row[0] == "hold-shutdown" for row in machine.inhibitors()),
        10,
        "the second delay lock",
    )

    assert machine.run("poweroff").returncode == 0
    ku.wait_until(
        lambda: not agent_locks(node), DEADLINE + MARGIN, "the agent to drain and release its lock"
    )
    assert_drained(node, "poweroff")
    assert machine.kubelet_stops() == []

    mask = machine.run("systemctl", "mask", "poweroff.target")
    assert mask.returncode == 0, mask.stderr
    start = time.monotonic()
    release = machine.run("systemctl", "stop", "hold-shutdown")
    assert release.returncode == 0, release.stderr
    ku.wait_until(
        lambda: not node.unschedulable() and not set(MARKER_KEYS) & set(node.annotations()),
        30,
        "the agent to undo its fence after the cancelled shutdown",
    )
    took = time.monotonic() - start
    print(f"cancel to uncordon: {took:.2f}s")

    # The cancel was logind's own: its delayed poweroff failed and it said so on the bus.
    assert any(
        "Error during inhibitor-delayed operation" in m and "masked" in m
        for m in machine.messages("systemd-logind.service")
    ), machine.messages("systemd-logind.service")
    node.journal_line("PrepareForShutdown(False")
    uncordoned_event(node)
    assert machine.run("systemctl", "is-active", "nodeagent").stdout.strip() == "active"
    ku.wait_until(lambda: agent_locks(node), 10, "the agent to take a new delay lock")
    assert len(agent_locks(node)) == 1, machine.inhibitors()
    assert machine.running()

    # The next shutdown is heard and drained like the first. New pods land on this node
    # only: the replacements from the first drain stay on the spare, closed again for now.
    node.kube.merge_patch(node_path(node.spare), {"spec": {"unschedulable": True}})
    ku.deployment(node.kube, node.ns, "api", node.group, 2)
    ku.wait_running(node.kube, node.name, 3)
    node.open_spare()
    unmask = machine.run("systemctl", "unmask", "poweroff.target")
    assert unmask.returncode == 0, unmask.stderr
    assert machine.run("poweroff").returncode == 0
    assert machine.wait_exit(DEADLINE + MARGIN) == 0
    assert_drained(node, "poweroff")
    assert len(machine.kubelet_stops()) == 1


def test_blackholed_api_server_does_not_hold_up_shutdown(node: Node, cluster: Any) -> None:
    """The API server goes silent (no refusal, no reset) just before a poweroff.

    The drain's first request goes out on a pooled keep-alive connection and waits out the
    client's read timeout; requests on new connections wait out the connect timeout, as their
    TLS handshake never completes. Either way the agent must give up inside its deadline.
    """
    relay = ApiRelay(int(urlsplit(cluster.server).port or 0))
    try:
        kubeconfig = node.machine.path(KUBELET_KUBECONFIG).read_text()
        assert kubeconfig.count(cluster.server) == 1
        node.machine.write_kubelet_kubeconfig(
            kubeconfig.replace(cluster.server, f"https://127.0.0.1:{relay.port}")
        )
        node.workloads()
        node.boot()
        node.agent_ready()
        # The agent has talked to the API server through the relay (it records the boot ID
        # at start), so it holds pooled connections that now go silent too.
        ku.wait_until(
            lambda: relay.accepted and LAST_BOOT_ID in node.annotations(),
            30,
            "the agent to reach the API server through the relay",
        )
        relay.blackhole()

        wall = time.time()
        start = time.monotonic()
        assert node.machine.run("poweroff").returncode == 0
        assert node.machine.wait_exit(DEADLINE + MARGIN) == 0
        took = time.monotonic() - start
    finally:
        relay.close()

    print(f"poweroff to container down with the API server blackholed: {took:.1f}s")
    failed = node.journal_line("drain for poweroff failed")
    # One line, and it says the server went silent (not that it refused).
    assert "\n" not in failed["MESSAGE"], failed["MESSAGE"]
    assert "timed out" in failed["MESSAGE"].lower(), failed["MESSAGE"]
    gave_up = realtime(failed) - wall
    print(f"poweroff to the agent giving up: {gave_up:.1f}s")
    assert gave_up < DEADLINE, failed["MESSAGE"]
    (stopped,) = node.machine.kubelet_stops()
    assert realtime(failed) < stopped
    assert took < DEADLINE + MARGIN
    # The API server never heard of the shutdown.
    assert not node.unschedulable()
    assert len(node.left()) == 4


# -- the package's life on a running node ---------------------------------------------------


def dpkg(node: Node, *args: str) -> str:
    out = node.machine.run("dpkg", *args, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def put_deb(node: Node, deb: Path) -> str:
    """Copy a package into the running container; its path inside."""
    inside = f"/var/cache/{deb.name}"
    shutil.copyfile(deb, node.machine.path(inside))
    return inside


def agent_pid(node: Node) -> int:
    out = node.machine.run("systemctl", "show", "-P", "MainPID", "nodeagent")
    return int(out.stdout.strip() or 0)


def no_fence(node: Node) -> None:
    assert not node.unschedulable()
    assert not set(MARKER_KEYS) & set(node.annotations())
    assert not any(
        e["reason"] in ("Cordoned", "Drained", "DrainTimedOut")
        for e in ku.node_events(node.kube, node.name)
    )


def test_upgrade_restarts_the_agent_without_draining(node: Node, tmp_path: Path) -> None:
    node.workloads()
    node.boot()
    node.agent_ready()
    before, old_pid = node.left(), agent_pid(node)

    dpkg(node, "-i", put_deb(node, next_deb(build_deb(), tmp_path, "0.1.0+next1")))

    node.milestone(milestones.STOPPING, reason="restart")
    ku.wait_until(
        lambda: node.locks_taken() >= 2,
        30,
        "the upgraded agent to take its logind lock",
    )
    assert agent_pid(node) not in (0, old_pid)
    assert node.machine.run("nodeagent", "version").stdout.strip() == "nodeagent 0.1.0+next1"
    no_fence(node)
    assert node.left() == before
    assert not any("Traceback" in m for m in node.machine.messages())


def test_old_agent_drains_with_the_next_version_unpacked_under_it(
    node: Node, tmp_path: Path
) -> None:
    """dpkg has replaced every file of the agent, the unit has not been restarted yet, and the
    node powers off. Every module of the next version raises on import: the running agent must
    drain on what it loaded at start."""
    node.workloads()
    node.boot()
    node.agent_ready()
    poisoned = next_deb(build_deb(), tmp_path, "0.1.0+poisoned", poison=True)
    dpkg(node, "--unpack", put_deb(node, poisoned))
    assert "0.1.0+poisoned" in dpkg(node, "-s", "nodeagent")

    assert node.machine.run("poweroff").returncode == 0
    assert node.machine.wait_exit(DEADLINE + MARGIN) == 0

    assert_drained(node, "poweroff")
    assert not any("loaded into a running process" in m for m in node.machine.messages())


def ready_condition(node: Node) -> dict[str, str]:
    conds = ku.node(node.kube, node.name)["status"].get("conditions") or []
    return next((c for c in conds if c["type"] == READY), {})


def test_install_reloads_logind_and_removal_neither_drains_nor_lingers(
    cluster: Any, kube: Kube, tmp_path: Path
) -> None:
    """On a running node without the agent: install, remove, purge, as apt would."""
    with new_node(cluster, kube, nspawn_root(), tmp_path) as node:
        machine = node.machine
        install_vendor_dropins(machine)
        machine.install_kubelet()
        machine.verbose_agent()
        kubelet = cluster.mint_node_kubeconfig(node.name, tmp_path / "kubelet.kubeconfig")
        machine.write_kubelet_kubeconfig(kubelet.read_text())
        machine.write_config(config())
        node.workloads()
        node.boot()
        assert machine.logind_delay() == KUBELET_GRACE

        # The config is the administrator's, written before: dpkg keeps it.
        dpkg(node, "-i", "--force-confold", put_deb(node, build_deb()))
        # Told by the postinst (SIGHUP): no reboot, no logind restart.
        assert machine.logind_delay() == LOGIND_DELAY
        ku.wait_until(
            lambda: machine.run("systemctl", "is-active", "nodeagent").stdout.strip() == "active",
            30,
            "the package to start the agent",
        )
        ku.wait_until(
            lambda: ready_condition(node).get("reason") == "AgentRunning", 30, "the heartbeat"
        )
        assert machine.run("systemctl", "is-enabled", "nodeagent").stdout.strip() == "enabled"
        before = node.left()
        assert machine.path("var/lib/nodeagent").is_dir()

        dpkg(node, "-r", "nodeagent")
        stopping = ku.wait_until(
            lambda: [r for r in node.records() if r.name == milestones.STOPPING],
            10,
            "the agent's stopping milestone in the journal",
        )
        assert stopping[-1].fields.get("reason") == "remove", stopping
        no_fence(node)
        assert node.left() == before
        cond = ready_condition(node)
        assert (cond["status"], cond["reason"]) == ("Unknown", "AgentRemoved"), cond
        assert machine.logind_delay() == KUBELET_GRACE
        # The flag went with the unit's runtime directory.
        assert machine.run("test", "-e", "/run/nodeagent").returncode == 1

        dpkg(node, "-P", "nodeagent")
        assert not machine.path("var/lib/nodeagent").exists()
        assert not machine.path("etc/nodeagent/config.toml").exists()
