"""nodeagent against a real kubelet and container runtime (hack/realnode).

Each test boots a real node (kubelet + containerd in systemd-nspawn, joined with its own
``system:node:<name>`` certificate) next to a simulated spare that takes the replacements.
The agent runs in the real node as on a host: its Debian package installed in the node's
root, nodeagent.service ordered after the kubelet. Pods run the locally built busybox image;
what the kubelet did to them is read from the API and from the node's journal.

Every node is stopped in the fixture's teardown, which fails the test if the node left
anything on the host (cgroups, its CNI bridge and its pods' veths, its slot) or if a kernel
tunable changed. (Other real nodes may run on the host at the same time: each checks its own.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack import milestones as ms
from hack.aemm import Aemm, rfc3339
from hack.cloudfakes import AzureEvent, AzureScheduledEventsFake
from hack.deb import install_agent
from hack.k8sversion import kubelet_version
from hack.localcluster.procs import free_ports
from hack.nspawn import realtime
from hack.realnode import TEST_IMAGE, NodeOptions, RealNode
from hack.realnode import host as realhost
from nodeagent.cloud import aws
from nodeagent.departure.leftovers import EVENT_REASON as LEFTOVER_DELETED
from nodeagent.drain.podfilter import find_condition
from nodeagent.fence import marker
from nodeagent.kube.client import JSON, Kube, node_path, pods_path
from nodeagent.rejection.controller import POD_REJECTED, STATE_WIPED
from nodeagent.report import conditions
from nodeagent.report.conditions import READY, ReadyReason
from tests.test_system import DEADLINE as AGENT_DEADLINE
from tests.test_system import config as system_config

# A real node boots in seconds, but the first test may build the agent's package, and the
# SIGTERM scenario waits out init's final kill: more than the default per-test timeout.
pytestmark = pytest.mark.timeout(900)

DEADLINE = 20.0
# The agent's reporting after a drain's deadline (departure.FINISH_GRACE).
FINISH = 3.0
# systemd-shutdown's wait between its final SIGTERM and SIGKILL (DefaultTimeoutStopSec).
FINAL_KILL = 90.0
# Shutdown beyond the drain: reporting, closing the lock, stopping the kubelet and runtime.
MARGIN = 20.0
# Exits at once on SIGTERM (the shell runs the trap between one-second sleeps).
POLITE = "trap 'exit 0' TERM; while true; do sleep 1; done"
# Ignores SIGTERM: only the kubelet's SIGKILL at the end of the grace period stops it.
STUBBORN = "trap '' TERM; while true; do sleep 1; done"


def container(script: str, **extra: Any) -> JSON:
    return {
        "name": "app",
        "image": TEST_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        **extra,
    }


# No service account token: the local control plane runs no root CA publisher, so the
# kubelet could not build the projected token volume.
NO_TOKEN = {"automountServiceAccountToken": False}


def agent_config(
    node: str, deadline: float = AGENT_DEADLINE, extra: str = "", warnings: str = 'cloud = "off"'
) -> str:
    """The system tests' agent config, on the kubeconfig install_agent writes. The cloud's
    warnings are off unless `warnings` says otherwise: no request to a real 169.254.169.254."""
    head = f'node = "{node}"\nkubeconfig = "/etc/nodeagent/kubeconfig"\n\n'
    return head + system_config(deadline, extra) + f"\n[warnings]\n{warnings}\n"


@dataclass
class Env:
    """A group: real nodes made on demand, a cordoned simulated spare, a namespace."""

    cluster: Any
    kube: Kube
    tmp: Path
    group: str
    spare: str
    nodes: list[RealNode] = field(default_factory=list)

    @property
    def ns(self) -> str:
        return self.group

    def real_node(
        self, suffix: str, agent: str | None = None, opts: NodeOptions | None = None
    ) -> RealNode:
        """A Ready real node in the group, with the agent installed when a config is given."""
        name = f"{self.group}-{suffix}"
        opts = opts or NodeOptions()
        opts = NodeOptions(**{**opts.__dict__, "labels": {ku.GROUP_LABEL: self.group}})
        node = RealNode.create(self.cluster, name, self.tmp / name, opts)
        self.nodes.append(node)
        if agent is not None:
            install_agent(node, Path(self.cluster.kubeconfig), agent)
        took = node.boot()
        print(f"{name}: boot to Ready {took:.1f}s")
        return node

    def open_spare(self) -> None:
        self.kube.merge_patch(node_path(self.spare), {"spec": {"unschedulable": False}})

    def deployment(self, name: str, replicas: int, script: str, grace: int) -> None:
        ku.deployment(
            self.kube,
            self.ns,
            name,
            self.group,
            replicas,
            containers=[container(script)],
            terminationGracePeriodSeconds=grace,
            **NO_TOKEN,
        )

    def daemonset(self, name: str) -> None:
        labels = {"app": name}
        spec = ku.pod_spec(self.group, containers=[container(POLITE)], **NO_TOKEN)
        spec["terminationGracePeriodSeconds"] = 2
        body = {
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        }
        self.kube.post(f"/apis/apps/v1/namespaces/{self.ns}/daemonsets", body)

    def pods(self, app: str) -> list[JSON]:
        query = {"labelSelector": f"app={app}"}
        return list(self.kube.request("GET", pods_path(self.ns), query=query)["items"])


@pytest.fixture
def env(cluster: Any, kube: Kube, tmp_path: Path) -> Iterator[Env]:
    group = ku.unique("real")
    spare = f"{group}-spare"
    cluster.add_node(spare, {ku.GROUP_LABEL: group})
    kube.merge_patch(node_path(spare), {"spec": {"unschedulable": True}})
    ku.namespace(kube, group)
    tunables = realhost.sysctls()
    e = Env(cluster, kube, tmp_path, group, spare)
    try:
        yield e
    finally:
        left = []
        for node in e.nodes:
            print(f"--- {node.name} journal\n{node.tail(150)}")  # shown when the test fails
            node.stop()  # raises if the node left anything behind
            left += node.leftovers()
        assert left == []
        assert realhost.sysctls() == tunables


class MinReady:
    """Samples, in the background, the fewest Ready and not-terminating pods of an app."""

    def __init__(self, env: Env, app: str) -> None:
        self.env, self.app = env, app
        self.low: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.env.pods(self.app)
            n = sum(1 for p in pods if ku.ready(p) and not p["metadata"].get("deletionTimestamp"))
            self.low = n if self.low is None else min(self.low, n)
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        assert self.low is not None
        return self.low


def kubelet_stopping(node: RealNode) -> float:
    """When systemd began stopping the kubelet (once per shutdown)."""
    (entry,) = [
        e for e in node.journal("-u", "kubelet.service") if e["MESSAGE"].startswith("Stopping")
    ]
    return realtime(entry)


def agent_line(node: RealNode, text: str) -> dict[str, str]:
    """The agent's last journal line holding `text`: for what is no milestone."""
    found = [e for e in node.journal("-u", "nodeagent.service") if text in e["MESSAGE"]]
    assert found, f"no {text!r} in the agent's journal"
    return found[-1]


def agent_milestone(node: RealNode, name: str, **fields: str) -> float:
    """When the agent wrote its last milestone `name` with `fields` (hack/milestones.py)."""
    found = ms.last(node.milestones(), name, **fields)
    assert found is not None, f"no milestone {name} {fields} in the agent's journal"
    return found.time


def agent_ready(node: RealNode) -> None:
    ku.wait_until(
        lambda: ms.first(node.milestones(), ms.LOCK_TAKEN), 30, "the agent to take its logind lock"
    )


def terminated_by_sigterm(pod: JSON) -> bool:
    """Deleted, terminal, and every container exited 0 (the trap ran)."""
    status = pod.get("status") or {}
    states = [c.get("state") or {} for c in status.get("containerStatuses") or []]
    return (
        bool(pod["metadata"].get("deletionTimestamp"))
        and status.get("phase") == "Succeeded"
        and bool(states)
        and all((s.get("terminated") or {}).get("exitCode") == 0 for s in states)
    )


def on_node(pods: list[JSON], node: str) -> list[JSON]:
    return [p for p in pods if p["spec"].get("nodeName") == node]


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    return ku.wait_until(check, timeout, what)


# -- the real node itself ------------------------------------------------------------------


def test_two_real_nodes_at_once_run_pods_and_leave_nothing_behind(env: Env) -> None:
    a = env.real_node("a")
    b = env.real_node("b")
    assert a.slot.bridge != b.slot.bridge and a.slot.subnet != b.slot.subnet
    assert a.slot.port != b.slot.port
    for node in (a, b):
        ku.bare_pod(
            env.kube,
            env.ns,
            f"hello-{node.name}",
            node.name,
            containers=[container(POLITE)],
            terminationGracePeriodSeconds=2,
            **NO_TOKEN,
        )
    pods = wait_for(
        lambda: (lambda r: r if len(r) == 2 else None)(
            [p for p in ku.pods_on(env.kube, a.name) + ku.pods_on(env.kube, b.name) if ku.ready(p)]
        ),
        60,
        "a Ready pod on each real node",
    )
    ips = {p["spec"]["nodeName"]: p["status"]["podIP"] for p in pods}
    assert ips[a.name].startswith(a.slot.subnet.rsplit(".", 1)[0] + "."), ips
    assert ips[b.name].startswith(b.slot.subnet.rsplit(".", 1)[0] + "."), ips
    # The node authenticated as itself, not as an admin.
    node = ku.node(env.kube, a.name)
    # The kubelet built for the run (NODEAGENT_KUBELET_VERSION, hack/matrix), stamped at build.
    assert node["status"]["nodeInfo"]["kubeletVersion"] == kubelet_version()
    # While they run they hold host resources; the fixture checks each is given back.
    assert a.leftovers() and b.leftovers()


def test_systemd_cgroup_driver_puts_pods_in_slices_and_a_poweroff_still_drains(env: Env) -> None:
    """The production nodes' driver: kubelet and containerd hand the pods' cgroups to the
    node's systemd, as transient slices (one per pod) and scopes (one per container) that
    conflict with shutdown.target. Behind logind's delay lock the drain still comes first."""
    opts = NodeOptions(cgroup_driver="systemd")
    node = env.real_node("a", agent=agent_config(f"{env.group}-a"), opts=opts)
    dump = node.run("containerd", "config", "dump").stdout
    assert "SystemdCgroup = true" in dump, dump
    (created,) = [m for m in node.messages("kubelet.service") if "Creating Container Manager" in m]
    assert '"CgroupDriver":"systemd"' in created, created
    env.deployment("web", 2, POLITE, grace=10)
    pods = ku.wait_running(env.kube, node.name, 2, timeout=90)
    ku.pdb(env.kube, env.ns, "web", {"app": "web"}, maxUnavailable=1)
    ku.wait_pdb_ready(env.kube, env.ns, "web")

    units = pod_units(node)
    for pod in pods:
        qos = pod["status"]["qosClass"].lower()
        uid = pod["metadata"]["uid"].replace("-", "_")
        assert f"kubepods-{qos}-pod{uid}.slice" in units, units
        for status in pod["status"]["containerStatuses"]:
            scope = f"cri-containerd-{status['containerID'].removeprefix('containerd://')}.scope"
            assert scope in units, units
    conflicts = node.run("systemctl", "show", "-P", "Conflicts", "kubepods.slice").stdout
    assert "shutdown.target" in conflicts.split(), conflicts

    env.open_spare()
    agent_ready(node)
    start = time.time()
    assert node.run("poweroff").returncode == 0
    assert node.wait_exit(DEADLINE + MARGIN) == 0
    drained = agent_milestone(node, ms.DRAIN_FINISHED, reason="poweroff", outcome="drained")
    assert start < drained < kubelet_stopping(node)
    # Each pod went by its eviction (its SIGTERM trap ran, exit 0), not by systemd's stop.
    assert all(terminated_by_sigterm(p) for p in on_node(env.pods("web"), node.name))
    assert len([p for p in on_node(env.pods("web"), env.spare) if ku.ready(p)]) == 2


def pod_units(node: RealNode) -> list[str]:
    """The node's systemd units under kubepods.slice: the pods' slices and scopes."""
    out = node.run("systemctl", "list-units", "--all", "--plain", "--no-legend",
                   "kubepods*", "cri-containerd-*")  # fmt: skip
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


# -- scenarios ------------------------------------------------------------------------------


def test_poweroff_evicts_real_pods_under_their_pdb_before_the_kubelet_stops(env: Env) -> None:
    """Scenario 1: the host form, the kubelet's graceful node shutdown off."""
    node = env.real_node("a", agent=agent_config(f"{env.group}-a"))
    env.deployment("web", 3, POLITE, grace=10)
    env.daemonset("logs")
    ku.wait_running(env.kube, node.name, 4, timeout=90)
    ku.pdb(env.kube, env.ns, "web", {"app": "web"}, maxUnavailable=1)
    ku.wait_pdb_ready(env.kube, env.ns, "web")
    env.open_spare()
    agent_ready(node)

    low = MinReady(env, "web")
    start = time.time()
    assert node.run("poweroff").returncode == 0
    assert node.wait_exit(DEADLINE + MARGIN) == 0
    assert low.stop() >= 2  # the PDB held throughout

    drained = agent_milestone(node, ms.DRAIN_FINISHED, reason="poweroff", outcome="drained")
    stopping = kubelet_stopping(node)
    assert start < drained < stopping
    print(f"poweroff to drained {drained - start:.1f}s, kubelet stopping {stopping - start:.1f}s")
    web = env.pods("web")
    # Each evicted pod ran its SIGTERM trap and exited 0: the kubelet reported it Succeeded.
    # Its final delete comes after the kubelet's cleanup, which the stopping kubelet may never
    # reach: the object can stay, terminal, bound to the node that is going away.
    left = on_node(web, node.name)
    print(f"{len(left)} of 3 evicted pods still in the API, terminal")
    assert all(terminated_by_sigterm(p) for p in left), left
    assert len([p for p in on_node(web, env.spare) if ku.ready(p)]) == 3
    # The DaemonSet pod was left to the runtime: still bound here, never deleted.
    (ds,) = on_node(env.pods("logs"), node.name)
    assert not ds["metadata"].get("deletionTimestamp")


def test_sigterm_ignoring_pods_get_their_grace_and_the_deadline_holds(env: Env) -> None:
    """Scenario 3: one pod's grace ends inside the drain's deadline, another's far beyond it."""
    deadline = 15.0
    node = env.real_node("a", agent=agent_config(f"{env.group}-a", deadline))
    env.deployment("stubborn", 1, STUBBORN, grace=6)
    env.deployment("slow", 1, STUBBORN, grace=300)
    ku.wait_running(env.kube, node.name, 2, timeout=90)
    env.open_spare()
    agent_ready(node)
    (stubborn,) = on_node(env.pods("stubborn"), node.name)
    gone = Gone(env, stubborn["metadata"]["name"])

    start = time.monotonic()
    wall = time.time()
    assert node.run("poweroff").returncode == 0
    assert node.wait_exit(deadline + FINISH + FINAL_KILL + MARGIN) == 0
    took = time.monotonic() - start
    print(f"poweroff took {took:.1f}s with a drain deadline of {deadline:.0f}s")

    # The grace period was honoured: the pod ignored SIGTERM and went only with SIGKILL.
    evicted, vanished = gone.result()
    assert vanished - evicted >= 6 - 0.5, (evicted, vanished)
    assert vanished - wall < deadline
    # The other pod's 300 s did not hold up the drain or the power-off: at shutdown its
    # eviction cut its grace to the time the drain had left (the real kubelet does not
    # shorten a kill already under way, so a longer grace would keep systemd waiting).
    ended = agent_milestone(node, ms.DRAIN_FINISHED, reason="poweroff")
    assert ended - wall < deadline + FINISH + 1
    assert ended < kubelet_stopping(node)

    def grace_cut() -> bool:
        events = env.kube.get(f"/api/v1/namespaces/{env.ns}/events")["items"]
        return any(
            e.get("reason") == "Evicted" and "grace cut from 300s" in e.get("message", "")
            for e in events
        )

    ku.wait_until(grace_cut, 10, "an Evicted Event saying the slow pod's grace was cut")
    outlived = "Waiting for process" in node.console()
    print(f"the slow pod's container outlived the kubelet: {outlived}")


class Gone:
    """When a pod was evicted (deletionTimestamp minus its grace) and when it vanished."""

    def __init__(self, env: Env, name: str) -> None:
        self.path = f"{pods_path(env.ns)}/{name}"
        self.kube = env.kube
        self.evicted: float | None = None
        self.vanished: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if not ku.exists(self.kube, self.path):
                self.vanished = time.time()
                return
            if self.evicted is None:
                meta = self.kube.get(self.path)["metadata"]
                if meta.get("deletionTimestamp"):
                    self.evicted = time.time()
            time.sleep(0.05)

    def result(self) -> tuple[float, float]:
        self._thread.join(130)
        assert self.evicted is not None and self.vanished is not None
        return self.evicted, self.vanished


def test_real_admission_rejection_is_reported_and_its_pod_dir_wiped(env: Env) -> None:
    """Scenario 4: the kubelet restarts with less allocatable CPU and rejects a running pod."""
    rejection = """
[rejection]
state_roots = ["/var/lib/kubelet/pods"]
state_paths = ["/var/lib/kubelet/pods/{uid}"]
"""
    node = env.real_node("a", agent=agent_config(f"{env.group}-a", extra=rejection))
    keep = ku.bare_pod(
        env.kube,
        env.ns,
        "keep",
        node.name,
        containers=[
            container(
                "echo state > /data/state; " + POLITE,
                resources={"requests": {"cpu": "1500m"}},
                volumeMounts=[{"name": "data", "mountPath": "/data"}],
            )
        ],
        volumes=[{"name": "data", "emptyDir": {}}],
        terminationGracePeriodSeconds=2,
        **NO_TOKEN,
    )
    uid = keep["metadata"]["uid"]
    ku.wait_running(env.kube, node.name, 1, timeout=90)
    pod_dir = node.path(f"var/lib/kubelet/pods/{uid}")
    assert (pod_dir / "volumes/kubernetes.io~empty-dir/data/state").exists()
    agent_ready(node)

    # The node loses power and comes back with all but one CPU reserved for the system:
    # 1500m no longer fits. The kubelet admits the pods bound to it again and rejects this
    # one, whose directory is still there. (After a kubelet restart alone it rejects the
    # pod too, but its containers still run: the kubelet stops them and the API shows the
    # pod Succeeded, exit 0, with no OutOfcpu left for the agent to recognise.)
    cpus = int(ku.node(env.kube, node.name)["status"]["capacity"]["cpu"])
    reserved = NodeOptions(labels=node.opts.labels, reserved_cpu=f"{cpus * 1000 - 1000}m")
    node.kill()
    node.reconfigure(reserved)
    node.boot()

    path = f"{pods_path(env.ns)}/keep"
    pod = wait_for(
        lambda: (lambda p: p if find_condition(p, STATE_WIPED) else None)(env.kube.get(path)),
        60,
        "StateWiped on the rejected pod",
    )
    assert pod["status"]["phase"] == "Failed" and pod["status"]["reason"] == "OutOfcpu", pod
    rejected = find_condition(pod, POD_REJECTED)
    assert rejected and rejected["status"] == "True" and rejected["reason"] == "OutOfcpu"
    wiped = find_condition(pod, STATE_WIPED)
    assert wiped and wiped["status"] == "True", wiped
    assert not pod_dir.exists()
    kubelet = node.messages("kubelet.service")
    assert any("Pod admission denied" in m and uid in m for m in kubelet)


def test_graceful_shutdown_on_races_the_drain(env: Env) -> None:
    """Scenario 2: the kubelet's graceful node shutdown on, beside the agent.

    Both hold a logind delay lock and both act on the same PrepareForShutdown: the kubelet
    kills every pod at once, PDB or not, while the agent evicts under the PDB. The agent
    sees the kubelet's lock beforehand and reports it.
    """
    opts = NodeOptions(shutdown_grace=20, shutdown_grace_critical=5)
    node = env.real_node("a", agent=agent_config(f"{env.group}-a"), opts=opts)
    env.deployment("web", 3, POLITE, grace=10)
    ku.wait_running(env.kube, node.name, 3, timeout=90)
    ku.pdb(env.kube, env.ns, "web", {"app": "web"}, maxUnavailable=1)
    ku.wait_pdb_ready(env.kube, env.ns, "web")
    env.open_spare()
    agent_ready(node)
    whos = ku.wait_until(
        lambda: (
            {row.split()[0] for row in inhibitors(node) if " delay " in f" {row} "}
            >= {"kubelet", "nodeagent"}
        ),
        30,
        "the kubelet's and the agent's delay locks",
    )
    assert whos
    # The agent says so where operators look (it looks at logind's locks every 30 s: the
    # kubelet may take its lock after the agent started).
    ku.wait_until(
        lambda: ready_reason(env.kube, node.name) == ReadyReason.KUBELET_GRACEFUL_SHUTDOWN,
        45,
        "NodeAgentReady to name the kubelet's graceful shutdown",
    )
    assert any("the kubelet holds a logind delay lock" in m for m in node.messages("nodeagent"))

    assert node.run("poweroff").returncode == 0
    assert node.wait_exit(DEADLINE + MARGIN) == 0

    # The race: the kubelet killed the pods the agent was evicting under their PDB.
    kills = [
        m
        for m in node.messages("kubelet.service")
        if "Shutdown manager killing pod" in m and f'pod="{env.ns}/web-' in m
    ]
    assert kills, node.messages("kubelet.service")[-50:]
    marked = [p for p in env.pods("web") if killed_by_kubelet(p)]
    print(f"the kubelet killed {len(kills)} of 3 pods, {len(marked)} marked in the API")


def test_beside_the_kubelets_graceful_shutdown_its_pods_are_taken_out_at_once(env: Env) -> None:
    """Scenario 5: the real kubelet's graceful shutdown kills pods whose budgets allow no
    eviction; the agent, having seen the kubelet's lock, deletes each at once past its PDB
    (an Event each), so none stays a ready endpoint while it dies and none is left Failed
    on the node: after the next boot the controller's pods are replaced and gone, with no
    leftover for the after-boot pass, and the bare pod went with its node's drain, as an
    eviction would have taken it.
    """
    opts = NodeOptions(shutdown_grace=20, shutdown_grace_critical=5)
    node = env.real_node("a", agent=agent_config(f"{env.group}-a"), opts=opts)
    # SIGTERM ignored, so the kubelet's SIGKILL ends them.
    env.deployment("web", 3, STUBBORN, grace=2)
    ku.bare_pod(
        env.kube,
        env.ns,
        "solo",
        node.name,
        containers=[container(STUBBORN)],
        terminationGracePeriodSeconds=2,
        **NO_TOKEN,
    )
    env.kube.merge_patch(pods_path(env.ns, "solo"), {"metadata": {"labels": {"app": "solo"}}})
    ku.wait_running(env.kube, node.name, 4, timeout=90)
    ku.pdb(env.kube, env.ns, "web", {"app": "web"}, maxUnavailable=0)
    ku.pdb(env.kube, env.ns, "solo", {"app": "solo"}, minAvailable=1)
    env.open_spare()
    agent_ready(node)
    wait_for(
        lambda: any(
            "PDBs are not guaranteed at shutdown" in m for m in node.messages("nodeagent.service")
        ),
        30,
        "the agent to see the kubelet's lock",
    )
    before = {p["metadata"]["uid"] for p in on_node(env.pods("web"), node.name)}
    before.add(env.kube.get(pods_path(env.ns, "solo"))["metadata"]["uid"])

    assert node.run("poweroff").returncode == 0
    assert node.wait_exit(DEADLINE + MARGIN) == 0
    kills = [m for m in node.messages("kubelet.service") if "Shutdown manager killing pod" in m]
    assert kills, node.messages("kubelet.service")[-50:]
    events = env.kube.get(f"/api/v1/namespaces/{env.ns}/events")["items"]
    refused = "its eviction refused (PDB"
    deleted = {
        e["involvedObject"]["uid"]
        for e in events
        if e["reason"] == "DeletedForKubeletShutdown" and refused in e["message"]
    }
    assert deleted == before, events
    # The ReplicaSet replaces them on the spare while the node is down.
    wait_for(lambda: len(ku.running(ku.pods_on(env.kube, env.spare))) >= 3, 60, "the replacements")

    took = node.boot()
    print(f"{node.name}: boot to Ready {took:.1f}s")
    wait_for(
        lambda: not before & {p["metadata"]["uid"] for p in env.pods("web")},
        60,
        "the deleted pods to be gone",
    )
    wait_for(lambda: not ku.exists(env.kube, pods_path(env.ns, "solo")), 60, "solo to be gone")
    events = env.kube.get(f"/api/v1/namespaces/{env.ns}/events")["items"]
    assert not [e for e in events if e["reason"] == LEFTOVER_DELETED], events


def test_spot_notice_drains_before_the_poweroff_and_the_lock_goes_at_once(env: Env) -> None:
    """Scenario 6: a Spot interruption notice, read by the agent from its .deb as the node's
    IMDS (amazon-ec2-metadata-mock on the host's loopback, which the node shares, IMDSv2
    required). The node is drained for the warning, with the warning in its marker, before
    the poweroff; at PrepareForShutdown the drain finds nothing left to evict, and the lock
    is released right after it."""
    (port,) = free_ports(1)
    imds = f'cloud = "aws"\nmetadata_url = "http://127.0.0.1:{port}"'
    node = env.real_node("a", agent=agent_config(f"{env.group}-a", warnings=imds))
    env.deployment("web", 2, POLITE, grace=10)
    ku.wait_running(env.kube, node.name, 2, timeout=90)
    ku.pdb(env.kube, env.ns, "web", {"app": "web"}, maxUnavailable=1)
    ku.wait_pdb_ready(env.kube, env.ns, "web")
    env.open_spare()
    agent_ready(node)

    at = float(int(time.time()) + 120)
    mock = Aemm(["spot", "-a", "terminate", "-t", rfc3339(at)], env.tmp / "aemm.log", port=port)
    try:
        annotations = wait_for(lambda: drained_for_warning(env.kube, node.name), 60,
                               "the drain for the warning recorded")  # fmt: skip
        assert annotations[marker.WARNING] == "aws interruption"
        assert annotations[marker.WARNING_ID] == "spot-itn-terminate"
        assert annotations[marker.WARNING_DEADLINE] == rfc3339(at)
        # Evicted: each ran its SIGTERM trap (an object may stay, terminal, on the node).
        assert all(terminated_by_sigterm(p) for p in on_node(env.pods("web"), node.name))

        assert node.run("poweroff").returncode == 0
        assert node.wait_exit(DEADLINE + MARGIN) == 0
    finally:
        mock.stop()
    assert len([p for p in on_node(env.pods("web"), env.spare) if ku.ready(p)]) == 2
    records = node.milestones()
    announced = ms.when(records, ms.SHUTDOWN_ANNOUNCED, source="logind")
    drained = ms.when(records, ms.DRAIN_FINISHED, reason="poweroff", outcome="drained")
    released = ms.when(records, ms.LOCK_RELEASED)
    assert announced is not None and drained is not None and released is not None, records
    assert announced <= drained <= released, (announced, drained, released)
    warned = agent_milestone(node, ms.DRAIN_FINISHED, reason="warning", outcome="drained")
    assert warned < announced
    held = released - announced
    print(f"PrepareForShutdown to the lock's release: {held:.2f}s")
    # Nothing was left for the shutdown's drain: no pod evicted after the warning's drain.
    events = env.kube.get(f"/api/v1/namespaces/{env.ns}/events")["items"]
    evicted = [e for e in events if e["reason"] == "Evicted"]
    assert len(evicted) == 2, evicted


def test_azure_events_canceled_and_approved_on_a_real_node(env: Env) -> None:
    """Scenario 7: Azure Scheduled Events (hack/cloudfakes.py, on the host's loopback the
    node shares) read by the agent from its .deb. A Reboot fifteen minutes ahead for this VM
    and another drains the node (the lead is 10 minutes by default: set to 20 here) and is
    never approved (that would start it for the other VM too); canceled (gone from the list,
    never Started), the node is given back with nothing left. Then a Preempt naming this VM
    alone drains it again and is approved only once the drain is on the Node."""
    fake = AzureScheduledEventsFake(vm_name=f"{env.group}-a")
    try:
        events = f'cloud = "azure"\nmetadata_url = "{fake.url}"\nmaintenance_lead = "20m"'
        node = env.real_node("a", agent=agent_config(f"{env.group}-a", warnings=events))
        env.deployment("web", 2, POLITE, grace=10)
        ku.wait_running(env.kube, node.name, 2, timeout=90)
        env.open_spare()
        agent_ready(node)

        # It names another VM too (an availability set's): drained for, never approved.
        fake.add(AzureEvent("reboot-1", "Reboot", [node.name, "vm-b"], time.time() + 900))
        annotations = wait_for(lambda: drained_for_warning(env.kube, node.name), 60,
                               "the drain for the Reboot recorded")  # fmt: skip
        assert annotations[marker.WARNING] == "azure maintenance"
        assert annotations[marker.WARNING_ID] == "reboot-1"
        fake.remove("reboot-1")  # canceled: it leaves the list without having started
        wait_for(lambda: not ku.node(env.kube, node.name)["spec"].get("unschedulable"), 30,
                 "the node given back")  # fmt: skip
        after = ku.node(env.kube, node.name)["metadata"]
        assert not set(marker.MARKER_KEYS) & set(after.get("annotations") or {})
        assert marker.EXCLUDE_LB_LABEL not in (after.get("labels") or {})
        assert fake.approvals == []  # an event naming others is never approved

        fake.add(AzureEvent("preempt-1", "Preempt", [node.name], time.time() + 120))
        wait_for(lambda: fake.approvals, 90, "the Preempt approved")
        annotations = ku.node(env.kube, node.name)["metadata"]["annotations"]
        assert annotations[marker.WARNING_ID] == "preempt-1"
        assert annotations[marker.DRAIN_RESULT] == "drained"
        assert [a.event_id for a in fake.approvals] == ["preempt-1"]
        # The approval left after the drain's result was written (the agent's own log order).
        drained = agent_milestone(node, ms.DRAIN_FINISHED, reason="warning", outcome="drained")
        approved = agent_line(node, "approved scheduled event preempt-1")
        assert drained <= realtime(approved)
    finally:
        fake.stop()


def test_rebalance_cordon_on_a_real_node_ends_with_its_lifetime(env: Env) -> None:
    """Scenario 8: an AWS rebalance recommendation (amazon-ec2-metadata-mock on the host's
    loopback, IMDSv2 required) read by the agent from its .deb, policy cordon, a 20 s
    lifetime. The node is cordoned with the warning in its marker and its pods keep
    running; once the lifetime is over it is given back though the endpoint still shows
    the recommendation (no CloudWarningOver: it never left), nothing is left on the Node,
    and the readings that follow do not cordon it again (NTH#321, #458)."""
    lifetime = 20.0
    (port,) = free_ports(1)
    imds = (
        f'cloud = "aws"\nmetadata_url = "http://127.0.0.1:{port}"\n'
        f'rebalance = "cordon"\nrebalance_lifetime = "{lifetime:.0f}s"'
    )
    node = env.real_node("a", agent=agent_config(f"{env.group}-a", warnings=imds))
    env.deployment("web", 2, POLITE, grace=10)
    pods = ku.wait_running(env.kube, node.name, 2, timeout=90)
    agent_ready(node)
    before = ku.node(env.kube, node.name)

    # Pinned (-r): the mock's notice time otherwise moves with every read. Its Spot notice
    # comes an hour later (-d), after the test.
    notice = float(int(time.time()))
    mock = Aemm(["spot", "-r", rfc3339(notice), "-d", "3600"], env.tmp / "aemm.log", port=port)
    try:
        fenced = wait_for(lambda: cordoned(env.kube, node.name), lifetime, "the rebalance cordon")
        annotations = fenced["metadata"]["annotations"]
        assert annotations[marker.CORDONED_BY] == marker.AGENT
        assert annotations[marker.DRAIN_REASON] == "warning"
        assert annotations[marker.WARNING] == "aws rebalance"
        assert annotations[marker.WARNING_ID] == "rebalance"
        assert marker.WARNING_DEADLINE not in annotations  # a recommendation states no time
        assert marker.DRAIN_RESULT not in annotations  # cordon only: nothing drained
        assert fenced["metadata"]["labels"][marker.EXCLUDE_LB_LABEL] == marker.AGENT
        assert serving(env, node) == uids(pods)

        wait_for(lambda: not cordoned(env.kube, node.name), lifetime + 30, "the cordon's end")
        # Undone for its lifetime, not early: the decision came after the notice's time
        # plus the lifetime (the agent's own log, on the host's clock).
        undone = agent_milestone(node, ms.UNCORDONED)
        assert undone >= notice + lifetime, (undone, notice)
        fenced_at = agent_milestone(node, ms.CORDONED, reason="warning") - notice
        print(f"notice to cordon {fenced_at:.1f}s, to uncordon {undone - notice:.1f}s")
        # The endpoint still shows it and the agent reads it again (every 10 s), then twice
        # more: the node stays given back.
        reads = mock.reads(aws.REBALANCE)
        wait_for(lambda: mock.reads(aws.REBALANCE) > reads, 30, "the recommendation read again")
        spots = mock.reads(aws.SPOT)
        wait_for(lambda: mock.reads(aws.SPOT) >= spots + 2, 30, "two more readings")
    finally:
        mock.stop()
    after = ku.node(env.kube, node.name)
    assert not after["spec"].get("unschedulable"), after["spec"]
    assert not set(marker.MARKER_KEYS) & set(after["metadata"].get("annotations") or {})
    assert marker.EXCLUDE_LB_LABEL not in (after["metadata"].get("labels") or {})
    drained_cond = conditions.find(after, conditions.DRAINED) or {}
    assert drained_cond.get("reason") == "NotDraining", drained_cond
    assert "Cloud warning over" in drained_cond.get("message", ""), drained_cond
    assert (conditions.find(after, READY) or {}).get("status") == "True"
    # The node lifecycle controller's unschedulable taint goes with the cordon.
    wait_for(lambda: taints(env.kube, node.name) == (before["spec"].get("taints") or []), 30,
             "the taints as they were")  # fmt: skip
    assert serving(env, node) == uids(pods)
    said = {e["reason"]: e["message"] for e in ku.node_events(env.kube, node.name)}
    assert "rebalance recommendation" in said["CloudWarning"], said
    assert said["Uncordoned"] == "Cloud warning over; uncordoned", said
    assert "CloudWarningOver" not in said, said
    reasons = [e["reason"] for e in ku.node_events(env.kube, node.name)]
    assert reasons.count("Cordoned") == 1 and reasons.count("Uncordoned") == 1, reasons
    events = env.kube.get(f"/api/v1/namespaces/{env.ns}/events")["items"]
    assert not [e for e in events if e["reason"] == "Evicted"], events


def cordoned(kube: Kube, name: str) -> JSON | None:
    node = ku.node(kube, name)
    return node if node["spec"].get("unschedulable") else None


def taints(kube: Kube, name: str) -> list[JSON]:
    return list(ku.node(kube, name)["spec"].get("taints") or [])


def uids(pods: list[JSON]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def serving(env: Env, node: RealNode) -> set[str]:
    """The UIDs of the node's pods that run and are not being deleted."""
    return uids(ku.running(ku.pods_on(env.kube, node.name)))


def drained_for_warning(kube: Kube, name: str) -> dict[str, str] | None:
    """The Node's annotations once the agent recorded a finished drain for a warning."""
    annotations = ku.node(kube, name)["metadata"].get("annotations") or {}
    reason, result = annotations.get(marker.DRAIN_REASON), annotations.get(marker.DRAIN_RESULT)
    return dict(annotations) if reason == "warning" and result == "drained" else None


def ready_reason(kube: Kube, name: str) -> str | None:
    node = ku.node(kube, name)
    for cond in node["status"].get("conditions") or []:
        if cond["type"] == READY:
            return str(cond.get("reason"))
    return None


def inhibitors(node: RealNode) -> list[str]:
    """logind's inhibitor locks, one `WHO UID USER PID COMM WHAT WHY MODE` row each."""
    out = node.run("systemd-inhibit", "--list", "--no-legend", "--no-pager")
    return [line for line in out.stdout.splitlines() if line.strip()]


def killed_by_kubelet(pod: JSON) -> bool:
    """Failed by the kubelet's node shutdown (DisruptionTarget/TerminationByKubelet)."""
    target = find_condition(pod, "DisruptionTarget") or {}
    return target.get("reason") == "TerminationByKubelet" and target.get("status") == "True"
