"""Storage-safe departure on real nodes, through a real attach/detach path.

The control plane runs the persistent-volume binder and the attach/detach controller, and
beside it the CSI external-attacher with the controller side of Kubernetes' own mock CSI
driver (CSIDriver.spec.attachRequired: true); every real node runs the mock as its node
plugin (hack/csi, hack/realnode/csi.py). A StatefulSet of one replica holds a ReadWriteOnce
claim on a static volume; node A runs it, node B is the spare.

The times printed are benchmark figures, not assertions: the order of what happened is.
"""

from __future__ import annotations

import calendar
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack import milestones as ms
from hack.nspawn import realtime
from hack.realnode import NodeOptions, RealNode, stateful
from hack.realnode import csi as realcsi
from hack.realnode.stateful import DRIVER, VA_PATH
from nodeagent.drain.detach import attachment_name
from nodeagent.kube.client import JSON, Kube, node_path, pods_path
from nodeagent.report import conditions
from tests import test_realnode
from tests.test_realnode import (
    NO_TOKEN,
    POLITE,
    Env,
    agent_config,
    agent_line,
    agent_milestone,
    agent_ready,
    container,
    install_agent,
)

realnode_env = test_realnode.env  # the real nodes' fixture, under a name of its own here

pytestmark = pytest.mark.timeout(900)

EVACUATE_TAINT = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}
# Shutdown beyond the drain and the detach wait: reporting, stopping the kubelet.
MARGIN = 30.0


@pytest.fixture(scope="module")
def attach_path(cluster: Any, kube: Kube) -> Iterator[Path]:
    """The attacher and the mock driver's controller side, and the CSIDriver object."""
    csi_dir = realcsi.build()
    cluster.start_attacher(csi_dir, DRIVER)
    if not ku.exists(kube, f"{stateful.CSIDRIVERS}/{DRIVER}"):
        kube.post(stateful.CSIDRIVERS, stateful.csidriver())
    try:
        yield csi_dir
    finally:
        cluster.stop_attacher()


@pytest.fixture
def env(realnode_env: Env, cluster: Any) -> Iterator[Env]:
    """The real nodes' group (a spare, a namespace; every node stopped and checked after).

    Before its nodes stop, the StatefulSet goes and its volume detaches from the nodes that
    still run: the mock driver has three volumes only, and one left attached to a Node that
    is gone stays attached for the attach/detach controller for minutes.
    """
    yield realnode_env
    release_volume(realnode_env, cluster)


def release_volume(env: Env, cluster: Any) -> None:
    path = f"/apis/apps/v1/namespaces/{env.ns}/statefulsets/db"
    if not ku.exists(env.kube, path) or not cluster.attacher_running():
        return
    env.kube.delete(path)
    running = [n.name for n in env.nodes if n.running()]
    ku.wait_until(
        lambda: not [va for name in running for va in attachments(env.kube, name)],
        60,
        "the volume detached from the running nodes",
    )


def storage_node(env: Env, csi_dir: Path, suffix: str, agent: bool) -> RealNode:
    """A Ready real node of the group with the CSI node plugin (and the agent)."""
    name = f"{env.group}-{suffix}"
    opts = NodeOptions(labels={ku.GROUP_LABEL: env.group})
    node = RealNode.create(env.cluster, name, env.tmp / name, opts, realcsi.binds(csi_dir))
    env.nodes.append(node)
    realcsi.install_plugin(node.root, DRIVER)
    if agent:
        install_agent(node, Path(env.cluster.kubeconfig), agent_config(name))
    print(f"{name}: boot to Ready {node.boot():.1f}s")
    ku.wait_until(lambda: plugin_registered(env.kube, name), 60, f"{DRIVER} on {name}")
    return node


def plugin_registered(kube: Kube, node: str) -> bool:
    try:
        obj = kube.get(f"/apis/storage.k8s.io/v1/csinodes/{node}")
    except Exception:  # not there yet
        return False
    return any(d["name"] == DRIVER for d in obj["spec"].get("drivers") or [])


def cordon(kube: Kube, node: str, on: bool) -> None:
    kube.merge_patch(node_path(node), {"spec": {"unschedulable": on}})


def stateful_app(env: Env, handle: str) -> str:
    """A static volume with a bound claim, and a StatefulSet of one replica using it.

    `handle`: one of the mock driver's own volumes, "1" to "3" (they live in its memory).
    """
    pv = f"{env.group}-{handle}"
    env.kube.post("/api/v1/persistentvolumes", stateful.persistent_volume(pv, env.ns, handle))
    env.kube.post(f"/api/v1/namespaces/{env.ns}/persistentvolumeclaims", stateful.claim(env.ns, pv))
    app = container(f"date >> /data/log; {POLITE}")
    spec = ku.pod_spec(env.group, containers=[app], terminationGracePeriodSeconds=5, **NO_TOKEN)
    env.kube.post(
        f"/apis/apps/v1/namespaces/{env.ns}/statefulsets",
        stateful.statefulset(env.ns, "db", {"app": "db"}, spec),
    )
    return stateful.volume_id(handle)


def running_on(kube: Kube, ns: str, node: str) -> JSON | None:
    pods = kube.request("GET", pods_path(ns), query={"labelSelector": "app=db"})["items"]
    for pod in pods:
        gone = pod["metadata"].get("deletionTimestamp")
        if pod["spec"].get("nodeName") == node and ku.ready(pod) and not gone:
            return dict(pod)
    return None


def attachments(kube: Kube, node: str) -> list[JSON]:
    return stateful.on_node(kube.get(VA_PATH)["items"], node)


def attached(kube: Kube, node: str) -> bool:
    return any((va.get("status") or {}).get("attached") for va in attachments(kube, node))


def multi_attach_events(kube: Kube, ns: str) -> list[str]:
    return stateful.multi_attach(kube.get(f"/api/v1/namespaces/{ns}/events")["items"])


@dataclass
class Timeline:
    """When, in wall-clock seconds, what the API shows happened (sampled every 50 ms)."""

    kube: Kube
    ns: str
    a: str
    b: str
    b_running: float | None = None
    drained: float | None = None  # NodeAgentDrained turned True on A
    waiting: str = ""  # NodeAgentDrained's message while it waited for the detach
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Timeline:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            try:
                if self.b_running is None and running_on(self.kube, self.ns, self.b):
                    self.b_running = now
                cond = conditions.find(ku.node(self.kube, self.a), conditions.DRAINED) or {}
                if self.drained is None and cond.get("status") == "True":
                    self.drained = now
                if cond.get("reason") == conditions.WAITING_FOR_DETACH:
                    self.waiting = self.waiting or str(cond.get("message"))
            except Exception:  # a missed sample is taken again
                pass
            time.sleep(0.05)


def start_app_on_a(env: Env, a: RealNode, b: RealNode, handle: str) -> str:
    cordon(env.kube, b.name, True)
    volume = stateful_app(env, handle)
    ku.wait_until(lambda: running_on(env.kube, env.ns, a.name), 120, "db-0 Running on A")
    ku.wait_until(lambda: attached(env.kube, a.name), 30, "the volume attached to A")
    node = ku.node(env.kube, a.name)
    assert volume in (node["status"].get("volumesInUse") or [])
    cordon(env.kube, b.name, False)
    return volume


def attacher_logged(cluster: Any, va: str, message: str) -> float:
    """When (wall clock) the external-attacher logged `message` for the attachment `va`."""
    log = Path(cluster.log_path("csi-attacher")).read_text(errors="replace")
    lines = [ln for ln in log.splitlines() if f'"{message}"' in ln and va in ln]
    assert lines, f"the attacher never logged {message!r} for {va}"
    stamp = lines[-1].split()[1]  # klog: I1125 06:44:30.082507 ...
    day = time.strftime("%Y-%m-%d", time.gmtime())
    whole, frac = stamp.split(".")
    return calendar.timegm(time.strptime(f"{day} {whole}", "%Y-%m-%d %H:%M:%S")) + float(
        f"0.{frac}"
    )


def drained_condition(kube: Kube, node: str) -> JSON:
    cond = conditions.find(ku.node(kube, node), conditions.DRAINED)
    assert cond is not None
    return cond


def test_poweroff_releases_the_lock_only_after_the_volume_is_detached(
    env: Env, attach_path: Path
) -> None:
    a = storage_node(env, attach_path, "a", agent=True)
    b = storage_node(env, attach_path, "b", agent=False)
    volume = start_app_on_a(env, a, b, "1")
    agent_ready(a)

    with Timeline(env.kube, env.ns, a.name, b.name) as timeline:
        start = time.time()
        assert a.run("poweroff").returncode == 0
        assert a.wait_exit(120) == 0
        ku.wait_until(lambda: timeline.b_running, 60, "db-0 Running on B")

    released = agent_milestone(a, ms.LOCK_RELEASED)
    waited = agent_line(a, "detach wait")["MESSAGE"]
    detached = attacher_logged(env.cluster, attachment_name(volume, a.name) or "", "Detached")
    assert timeline.b_running is not None
    multi = multi_attach_events(env.kube, env.ns)
    print(
        f"poweroff to: detached from A {detached - start:.2f}s, lock released "
        f"{released - start:.2f}s, db-0 Running on B {timeline.b_running - start:.1f}s "
        f"({timeline.b_running - released:+.1f}s after the release); Multi-Attach events: "
        f"{len(multi)}; agent: {waited}"
    )
    assert detached < released
    assert "detached" in waited and volume in waited
    cond = drained_condition(env.kube, a.name)
    assert cond["status"] == "True" and "detached" in cond["message"], cond


def test_evacuate_reports_drained_only_after_the_volume_is_detached(
    env: Env, attach_path: Path
) -> None:
    a = storage_node(env, attach_path, "a", agent=True)
    b = storage_node(env, attach_path, "b", agent=False)
    volume = start_app_on_a(env, a, b, "2")
    agent_ready(a)

    with Timeline(env.kube, env.ns, a.name, b.name) as timeline:
        start = time.time()
        taints = ku.node(env.kube, a.name)["spec"].get("taints") or []
        env.kube.merge_patch(node_path(a.name), {"spec": {"taints": [*taints, EVACUATE_TAINT]}})
        ku.wait_until(lambda: timeline.drained, 90, "NodeAgentDrained True on A")
        ku.wait_until(lambda: timeline.b_running, 60, "db-0 Running on B")

    assert timeline.drained is not None and timeline.b_running is not None
    waited = agent_line(a, "detach wait")
    detached = attacher_logged(env.cluster, attachment_name(volume, a.name) or "", "Detached")
    multi = multi_attach_events(env.kube, env.ns)
    print(
        f"taint to: detached from A {detached - start:.2f}s, wait ended "
        f"{realtime(waited) - start:.2f}s, NodeAgentDrained True {timeline.drained - start:.1f}s"
        f", db-0 Running on B {timeline.b_running - start:.1f}s; Multi-Attach events: "
        f"{len(multi)}; agent: {waited['MESSAGE']}"
    )
    # Both against the attacher's own stamp: the journal stamps a line when journald reads
    # it, which on a loaded machine can come after the condition the agent wrote next.
    assert detached < realtime(waited) and detached < timeline.drained
    cond = drained_condition(env.kube, a.name)
    assert "detached" in cond["message"] and volume in waited["MESSAGE"]


def test_nodeagent_drain_returns_only_after_the_volume_is_detached(
    env: Env, attach_path: Path
) -> None:
    a = storage_node(env, attach_path, "a", agent=False)
    b = storage_node(env, attach_path, "b", agent=False)
    volume = start_app_on_a(env, a, b, "2")
    start = time.time()
    res = ku.run_agent(
        "drain", "--node", a.name, "--kubeconfig", str(env.cluster.kubeconfig), "--deadline", "60s"
    )
    returned = time.time()
    assert res.returncode == 0, res.stderr
    detached = attacher_logged(env.cluster, attachment_name(volume, a.name) or "", "Detached")
    (line,) = [ln for ln in res.stdout.splitlines() if "volumes:" in ln]
    print(f"nodeagent drain: detached {detached - start:.2f}s, returned {returned - start:.2f}s")
    print(res.stdout)
    assert detached < returned
    assert "1 volume(s) detached" in line and volume in line


def test_a_volume_that_cannot_detach_holds_the_departure_only_until_the_deadline(
    env: Env, attach_path: Path, cluster: Any
) -> None:
    a = storage_node(env, attach_path, "a", agent=True)
    b = storage_node(env, attach_path, "b", agent=False)
    volume = start_app_on_a(env, a, b, "3")
    agent_ready(a)
    cluster.stop_attacher()  # nothing can detach the volume from A any more
    try:
        with Timeline(env.kube, env.ns, a.name, b.name) as timeline:
            start = time.time()
            assert a.run("poweroff").returncode == 0
            assert a.wait_exit(120) == 0
            took = time.time() - start
        released = agent_milestone(a, ms.LOCK_RELEASED)
        waited = agent_line(a, "detach wait")["MESSAGE"]
        print(f"poweroff took {took:.1f}s, lock released {released - start:.1f}s; {waited}")
        print(f"while it waited, NodeAgentDrained said: {timeline.waiting}")
        assert volume in timeline.waiting
        assert "still attached" in waited and volume in waited
        cond = drained_condition(env.kube, a.name)
        assert cond["reason"] == conditions.VOLUMES_ATTACHED and volume in cond["message"], cond
        assert attachments(env.kube, a.name)  # it really is still attached
        events = [e for e in ku.node_events(env.kube, a.name) if e["reason"] == "VolumesAttached"]
        assert events and volume in events[-1]["message"]
    finally:
        cluster.start_attacher(attach_path, DRIVER)
