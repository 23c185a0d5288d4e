"""One departure under traffic on real nodes: the scene the benchmark and its test share.

Two real nodes (hack/realnode), ``leaving`` and ``staying``; the service (objects.py) as a
Deployment spread over both, a do-not-disrupt pod on the leaving node, a PDB and a
ClusterIP Service; a client namespace whose real kube-proxy runs as the staying node
(hack/realnode/traffic.py). :meth:`Scene.depart` sends steady traffic and long requests
through the Service while the leaving node departs the way its kind's row in ways.WAYS
says, and returns every request's result (a :class:`SceneResult`). With the `vm` shape the
leaving node is a VM node (hack/departure/vm.py) whose pods the client reaches over a tap
in its namespace; the staying node is an nspawn node still.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hack import kubeutil as ku
from hack import milestones as ms
from hack.deb import install_agent
from hack.departure.kinds import Config, Kind
from hack.localcluster.cluster import Cluster
from hack.localcluster.procs import free_ports
from hack.realnode import RealNode, stateful
from hack.realnode import csi as realcsi
from hack.realnode import daemonset as agent_daemonset
from hack.realnode.config import CgroupDriver
from hack.realnode.paths import REPO
from hack.realnode.traffic import ClientNet
from hack.realnode.workload import PORT, import_into
from nodeagent.kube.client import ApiError

from .common import DEPARTURE_CAP_S, POLL_S, READY_TIMEOUT
from .objects import APP, DND, LONG_S, REPLICAS, deployment, pod_spec, prefer, spread
from .trackers import EndpointTracker, NodeWatch, StatefulTracker
from .vm import VM_EXIT_CAP_S, VM_READY_S, VmLeaving
from .ways import WAYS, agent_times, released
from .witness import Witnessed

# The leaving node: an nspawn node, or a VM node (the `vm` shape, hack/departure/vm.py).
Node = RealNode | VmLeaving

RATE = 50.0
WARMUP_S = 5.0
# After the node is off and kube-proxy no longer routes to it: traffic goes on this long.
TAIL_S = 3.0
# After the departure, how long the stateful pod's replacement may take to be Ready.
STATEFUL_WAIT_S = 60.0


def agent_config(node: str, extra: str = "", metadata_port: int | None = None) -> str:
    """The README's configuration: its defaults, the node's name and a kubeconfig. The
    cloud's warnings are off (no request ever goes to a real 169.254.169.254) unless
    `metadata_port` is given: then AWS's, read from the mock on the host's loopback, which
    the node shares (hack/nspawn.py)."""
    warnings = (
        f'cloud = "aws"\nmetadata_url = "http://127.0.0.1:{metadata_port}"'
        if metadata_port is not None
        else 'cloud = "off"'
    )
    head = f'node = "{node}"\nkubeconfig = "/etc/nodeagent/kubeconfig"\n'
    return f"{head}{extra}\n[warnings]\n{warnings}\n"


def shorten_budget(node: Node, seconds: int) -> None:
    """logind's delay cut to `seconds`: an administrator's file of the same name as the
    package's drop-in (systemd/logind-nodeagent.conf), in /etc, overrides it."""
    path = node.path("etc/systemd/logind.conf.d/zz-nodeagent.conf")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[Login]\nInhibitDelayMaxSec={seconds}\n")


@dataclass
class SceneResult:
    """What the client saw and when things happened (wall clock)."""

    kind: str
    config: str
    started: float
    released: float | None
    off: float | None
    steady: list[dict[str, Any]]
    long: list[dict[str, Any]]
    endpoints: list[tuple[float, list[str]]]  # what kube-proxy programmed, when it changed
    leaving_ips: list[str]
    leaving_pods: list[str]
    notes: list[str] = field(default_factory=list)
    # The stateful pod's move (with storage): its old pod gone from the API, its
    # replacement Ready, and the attach/detach controller's Multi-Attach errors.
    stateful_deleted: float | None = None
    stateful_ready: float | None = None
    multi_attach_events: int | None = None
    cgroup_driver: CgroupDriver = "cgroupfs"
    shape: str = "nspawn"
    # The agent's milestones: when it heard the cloud's warning, when that drain ended, when
    # the poweroff was asked for, and logind's PrepareForShutdown to the lock's release.
    warning_heard: float | None = None
    warning_drained: float | None = None
    poweroff_at: float | None = None
    lock_held_s: float | None = None
    # Who did what to the departing Node (trackers.NodeWatch.figures, witness.py).
    witnessed: Witnessed = field(default_factory=Witnessed)


@dataclass
class Scene:
    cluster: Cluster
    workdir: Path
    group: str
    config: Config
    leaving: Node
    staying: RealNode
    client: ClientNet
    service_ip: str = ""
    evacuated: float | None = None
    returned: float | None = None  # a reboot's node back, Ready and uncordoned
    stopped: float | None = None  # `systemctl stop nodeagent` returned
    dnd: bool = True  # a do-not-disrupt pod serving a long request on the leaving node
    csi_dir: Path | None = None  # with storage: a StatefulSet on the real CSI attach path
    volume: str = "1"  # the mock driver's volume it uses
    daemonset: bool = False  # the agent runs as the chart's DaemonSet, not from its .deb
    cgroup_driver: CgroupDriver = "cgroupfs"  # the nodes' kubelet and containerd
    # The leaving node's agent reads AWS's warnings from amazon-ec2-metadata-mock on this
    # loopback port (started by the spot-interruption kind); None: its warnings are off.
    metadata_port: int | None = None
    poweroff_at: float | None = None  # when the leaving node's poweroff was asked for
    shape: str = "nspawn"  # the leaving node's (shapes.py); the staying node is nspawn's
    # The chart's cluster-scoped objects, deleted on exit (its namespace goes with it).
    rbac: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ns(self) -> str:
        return self.group

    @property
    def agent_ns(self) -> str:
        return f"{self.group}-agent"

    @property
    def ready_timeout(self) -> float:
        """How long pods and nodes may take to be Ready: longer on a VM under TCG."""
        return VM_READY_S if self.shape == "vm" else READY_TIMEOUT

    @property
    def exit_cap(self) -> float:
        """How long a node may take to go down once told: on the VM the agent's drain under
        TCG took 94 s of logind's 128 s, and the shutdown after it takes a few seconds more."""
        return VM_EXIT_CAP_S if self.shape == "vm" else DEPARTURE_CAP_S

    @classmethod
    @contextlib.contextmanager
    def up(
        cls,
        cluster: Cluster,
        workdir: Path,
        group: str,
        config: Config,
        agent_extra: str = "",
        dnd: bool = True,
        csi_dir: Path | None = None,
        volume: str = "1",
        daemonset: bool = False,
        cgroup_driver: CgroupDriver = "cgroupfs",
        metadata_port: int | None = None,
        shape: str = "nspawn",
    ) -> Iterator[Scene]:
        """Nodes, workload and client, all Ready; everything stopped and checked on exit.
        Without `dnd`, no do-not-disrupt pod (whose ceiling makes the departure 60 s longer).
        With `csi_dir` (hack/realnode/csi.py's build, its attacher running beside the
        control plane), every node runs the CSI node plugin and a StatefulSet of one
        replica holds a ReadWriteOnce volume on the leaving node: the mock driver's
        `volume` ("1" to "3"; the attach/detach controller keeps one attached to a node
        that powered off for minutes, so consecutive scenes take turns). With `daemonset`,
        an agent config runs the agent as the chart's DaemonSet. `cgroup_driver` is the
        nodes' (hack/realnode NodeOptions). With `metadata_port`, the leaving node's agent
        from the .deb reads AWS's warnings there (the kind spot-interruption serves them);
        every other agent's warnings are off. With `shape` vm the leaving node is a VM node
        (hack/departure/vm.py: cgroup v2 and the systemd driver whatever `cgroup_driver`
        says, which is then the staying node's) reached by the client over a tap."""
        nodes: list[Node] = []
        client: ClientNet | None = None
        daemonset = daemonset and config.agent
        if shape == "vm" and (daemonset or metadata_port is not None):
            raise ValueError("the vm shape runs neither the DaemonSet nor the metadata mock")
        archive = agent_daemonset.image_archive() if daemonset else None
        rbac: list[dict[str, Any]] = []
        leaving, staying = f"{group}-a", f"{group}-b"

        def nspawn(name: str, port: int | None) -> RealNode:
            # Only the leaving node's agent reads the mock (`port`): it cannot tell the
            # nodes apart (both ask from the host's loopback), and the notice is not the
            # staying node's.
            binds = realcsi.binds(csi_dir) if csi_dir else []
            opts = config.node_options(group, cgroup_driver)
            node = RealNode.create(cluster, name, workdir / name, opts, binds)
            nodes.append(node)
            if csi_dir:
                realcsi.install_plugin(node.root, stateful.DRIVER)
            if config.agent and not daemonset:
                agent = agent_config(name, agent_extra, port)
                install_agent(node, cluster.kubeconfig, agent)
            if config.budget_s is not None:
                shorten_budget(node, config.budget_s)
            node.boot()
            import_into(node)
            if archive is not None:
                agent_daemonset.import_image(node, archive)
            return node

        try:
            if shape == "vm":
                # The client first: the VM's second NIC is a tap in its namespace.
                nspawn(staying, None)
                client = ClientNet.start(cluster, workdir / "client", as_node=staying)
                text = agent_config(leaving, agent_extra) if config.agent else None
                vm = VmLeaving.create(cluster, leaving, workdir / leaving, config, group,
                                      client, csi_dir, text)  # fmt: skip
                nodes.insert(0, vm)
                if config.budget_s is not None:
                    shorten_budget(vm, config.budget_s)
                vm.boot()
            else:
                nspawn(leaving, metadata_port)
                nspawn(staying, None)
                client = ClientNet.start(cluster, workdir / "client", as_node=staying)
            stay = nodes[1]
            assert isinstance(stay, RealNode)
            scene = cls(
                cluster, workdir, group, config, nodes[0], stay, client, dnd=dnd,
                csi_dir=csi_dir, volume=volume, daemonset=daemonset, rbac=rbac,
                cgroup_driver="systemd" if shape == "vm" else cgroup_driver,
                metadata_port=metadata_port, shape=shape,
            )  # fmt: skip
            scene._deploy()
            yield scene
        finally:
            errors = []
            if csi_dir is not None:
                _release_volume(cluster, group, nodes)
            if client is not None:
                try:
                    client.stop()
                except Exception as exc:
                    errors.append(str(exc))
            for node in nodes:
                _keep_journal(node, workdir / f"{node.name}.journal")
                if daemonset and isinstance(node, RealNode):
                    _keep_pod_logs(node, f"{group}-agent", workdir / f"{node.name}.agent.log")
                try:
                    node.stop()
                except Exception as exc:
                    errors.append(str(exc))
            for ns in (group, f"{group}-agent") if daemonset else (group,):
                with contextlib.suppress(ApiError):
                    cluster.kube.delete(f"/api/v1/namespaces/{ns}")
            try:
                agent_daemonset.remove_cluster_scoped(cluster, rbac)
            except Exception as exc:
                errors.append(str(exc))
            if errors and sys.exc_info()[0] is None:
                raise RuntimeError("; ".join(errors))

    def _deploy(self) -> None:
        kube, ns = self.cluster.kube, self.ns
        kube.post("/api/v1/namespaces", {"metadata": {"name": ns}})
        if self.daemonset:  # started first: it comes up while the workload does
            self._apply_daemonset()
        main = pod_spec(self.group, topologySpreadConstraints=spread("main"))
        dnd = pod_spec(self.group, affinity=prefer(self.leaving.name))
        apps = f"/apis/apps/v1/namespaces/{ns}/deployments"
        kube.post(apps, deployment(ns, APP, "main", REPLICAS, main))
        if self.dnd:
            kube.post(apps, deployment(ns, f"{APP}-dnd", "dnd", 1, dnd, {DND: "true"}))
        kube.post(
            f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            {
                "metadata": {"name": APP, "namespace": ns},
                "spec": {"selector": {"matchLabels": {"app": APP}}, "maxUnavailable": 1},
            },
        )
        svc = kube.post(
            f"/api/v1/namespaces/{ns}/services",
            {
                "metadata": {"name": APP, "namespace": ns},
                "spec": {
                    "selector": {"app": APP},
                    "ports": [{"name": "http", "port": 80, "targetPort": PORT}],
                },
            },
        )
        self.service_ip = svc["spec"]["clusterIP"]
        if self.csi_dir:
            self._stateful()
        pods = REPLICAS + int(self.dnd)
        ku.wait_until(
            lambda: len(self.ready_pods()) == pods, self.ready_timeout, "pods Ready", step=POLL_S
        )
        for node in (self.leaving, self.staying):
            if isinstance(node, RealNode):  # a VM's tap is in the namespace from its start
                self.client.attach(node.slot)
        self.client.route_services(self.staying.slot)
        self.client.wait_endpoints(ns, APP, pods, 60)
        dnd_node = [p for p in self.ready_pods() if p["metadata"]["labels"]["tier"] == "dnd"]
        if self.dnd and dnd_node[0]["spec"]["nodeName"] != self.leaving.name:
            raise RuntimeError("the do-not-disrupt pod was not scheduled on the leaving node")
        if self.daemonset:
            self._wait_daemonset()
        elif self.config.agent:
            for node in (self.leaving, self.staying):
                ku.wait_until(
                    functools.partial(agent_ready, node),
                    60 if isinstance(node, RealNode) else self.ready_timeout,
                    f"the agent on {node.name}",
                    step=POLL_S,
                )

    def _stateful(self) -> None:
        """The CSIDriver, a static volume and its claim, and the StatefulSet `db` on the
        leaving node with the volume attached there (the replacement goes to the other)."""
        kube, ns = self.cluster.kube, self.ns
        for name in (self.leaving.name, self.staying.name):
            ku.wait_until(
                functools.partial(self._plugin, name), 60, f"the CSI plugin on {name}", step=POLL_S
            )
        with contextlib.suppress(ApiError):  # there already: one per cluster
            kube.post(stateful.CSIDRIVERS, stateful.csidriver())
        pv = f"{self.group}-db"
        kube.post("/api/v1/persistentvolumes", stateful.persistent_volume(pv, ns, self.volume))
        kube.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", stateful.claim(ns, pv))
        spec = pod_spec(self.group, affinity=prefer(self.leaving.name))
        body = stateful.statefulset(ns, "db", {"app": "db"}, spec)
        kube.post(f"/apis/apps/v1/namespaces/{ns}/statefulsets", body)
        db = ku.wait_until(self.stateful_pod, self.ready_timeout, "db-0 Ready", step=POLL_S)
        if db["spec"]["nodeName"] != self.leaving.name:
            raise RuntimeError("the stateful pod was not scheduled on the leaving node")

        def attached() -> bool:
            vas = stateful.on_node(kube.get(stateful.VA_PATH)["items"], self.leaving.name)
            return any((va.get("status") or {}).get("attached") for va in vas)

        ku.wait_until(attached, 60, "the volume attached to the leaving node", step=POLL_S)

    def _plugin(self, node: str) -> bool:
        with contextlib.suppress(ApiError):
            obj = self.cluster.kube.get(f"/apis/storage.k8s.io/v1/csinodes/{node}")
            return any(d["name"] == stateful.DRIVER for d in obj["spec"].get("drivers") or [])
        return False

    def stateful_pod(self) -> dict[str, Any] | None:
        """db-0 when Ready and not terminating."""
        with contextlib.suppress(ApiError):
            pod = self.cluster.kube.get(f"/api/v1/namespaces/{self.ns}/pods/db-0")
            conds = (pod.get("status") or {}).get("conditions") or []
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
            if ready and not pod["metadata"].get("deletionTimestamp"):
                return dict(pod)
        return None

    def _apply_daemonset(self) -> None:
        """The chart's DaemonSet on each node, the kubelet identity, the chart's own config
        otherwise (as `helm install` with those values would). One release per node: the
        real nodes share the host's network namespace (hack/nspawn.py), so two host-network
        agents on the chart's one metrics port would clash, and the one left without its
        /healthz be restarted by its liveness probe, mid-drain if need be."""
        labels = {"pod-security.kubernetes.io/enforce": "privileged"}  # host network, bus
        body = {"metadata": {"name": self.agent_ns, "labels": labels}}
        self.cluster.kube.post("/api/v1/namespaces", body)
        nodes = (self.leaving, self.staying)
        for node, port in zip(nodes, free_ports(len(nodes)), strict=True):
            selector = {"kubernetes.io/hostname": node.name}
            values = agent_daemonset.values(selector, metrics_port=port)
            release = f"{self.agent_ns}-{node.name.rsplit('-', 1)[-1]}"
            agent_daemonset.apply(self.cluster, self.agent_ns, values, self.rbac, release, True)

    def _wait_daemonset(self) -> None:
        """Each node's agent pod Ready and holding its logind delay lock (its milestone
        lock-taken goes to the pod's log, not the node's journal: logind's list is read)."""
        nodes = (self._nspawn_leaving(), self.staying)

        def ready() -> bool:
            pods = agent_daemonset.ready_agents(self.cluster.kube, self.agent_ns)
            return {p["spec"].get("nodeName") for p in pods} >= {n.name for n in nodes}

        ku.wait_until(ready, READY_TIMEOUT, "the agent pods Ready", step=POLL_S)
        for node in nodes:
            lock = functools.partial(agent_daemonset.agent_locks, node)
            ku.wait_until(lock, 60, f"the agent's logind delay lock on {node.name}", step=POLL_S)
            if pod_milestone(node, self.agent_ns, ms.METRICS_FAILED):
                raise RuntimeError(f"the agent on {node.name} has no metrics port (see its log)")

    def pods(self) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{self.ns}/pods"
        return list(self.cluster.kube.get(path, labelSelector=f"app={APP}")["items"])

    def ready_pods(self) -> list[dict[str, Any]]:
        def ready(p: dict[str, Any]) -> bool:
            conds = (p.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

        return [p for p in self.pods() if ready(p) and not p["metadata"].get("deletionTimestamp")]

    # ---- the departure -------------------------------------------------------------------

    def loadgen(self, *args: str, out: Path) -> subprocess.Popen[bytes]:
        cmd = self.client.command(sys.executable, "-m", "hack.departure.loadgen", *args)
        with out.open("wb") as f:
            return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)

    def depart(
        self, kind: Kind, on_start: Callable[[float], None] = lambda _t: None
    ) -> SceneResult:
        """Traffic, then the departure of `kind`; `on_start` hears its wall-clock start."""
        url = f"http://{self.service_ip}/"
        out = self.workdir / "results"
        out.mkdir(exist_ok=True)
        way = WAYS[kind]
        if way.prepare is not None:
            way.prepare(self)
        tracker = EndpointTracker(self.client, self.ns)
        witness = NodeWatch(self.cluster.kube, self.leaving.name)
        moved = StatefulTracker(self) if self.csi_dir else None
        procs: list[subprocess.Popen[bytes]] = []
        notes: list[str] = []
        try:
            procs.append(self.loadgen("steady", "--url", url, "--rate", str(RATE),
                                      out=out / "steady.jsonl"))  # fmt: skip
            time.sleep(WARMUP_S)
            nodes: list[Node] = [self.leaving, self.staying] if way.both_nodes else [self.leaving]
            names = {n.name for n in nodes}
            leaving = [p for p in self.ready_pods() if p["spec"]["nodeName"] in names]
            ips = [p["status"]["podIP"] for p in leaving]
            slow = f"/slow?s={LONG_S}"
            longs = [f"http://{ip}:{PORT}{slow}" for ip in ips] + [url + slow[1:]] * 4
            procs.append(self.loadgen("long", *[a for u in longs for a in ("--url", u)],
                                      out=out / "long.jsonl"))  # fmt: skip
            time.sleep(1.0)  # the long requests are in flight when the departure starts
            if isinstance(self.leaving, VmLeaving):
                self.leaving.sync_clock()  # its journal's times, on the host's clock
            witness.begin()
            started = time.time()
            on_start(started)
            off_at = way.leave(self, nodes, notes)
            # A notice's poweroff may come minutes in: the cap counts from it.
            begun = self.poweroff_at if way.cap_from_poweroff else None
            _until_unrouted(tracker, ips, (begun or started) + DEPARTURE_CAP_S, notes)
            time.sleep(TAIL_S)
            if moved is not None and moved.deleted is not None:
                with contextlib.suppress(ku.WaitTimeout):
                    ku.wait_until(
                        lambda: moved.ready, STATEFUL_WAIT_S, "db-0 Ready again", step=POLL_S
                    )
            procs[0].terminate()
            procs[0].wait(30)
            procs[1].wait(LONG_S + 130)
        finally:
            tracker.stop()
            witness.stop()
            if moved is not None:
                moved.stop()
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
        deleted, ready, multi = moved.figures() if moved is not None else (None, None, None)
        keep = self.workdir / "witnessed.json"
        seen = witness.figures(self.cluster.kube, started, self.returned, keep)
        return SceneResult(
            kind.value,
            self.config.name,
            started,
            released(self, kind, off_at),
            off_at,
            _jsonl(out / "steady.jsonl"),
            _jsonl(out / "long.jsonl"),
            tracker.changes,
            ips,
            [p["metadata"]["name"] for p in leaving],
            notes,
            stateful_deleted=deleted,
            stateful_ready=ready,
            multi_attach_events=multi,
            cgroup_driver=self.cgroup_driver,
            shape=self.shape,
            **self._agent_times(),
            witnessed=seen,
        )

    def _nspawn_leaving(self) -> RealNode:
        """The leaving node where only an nspawn node can be (the DaemonSet form)."""
        if not isinstance(self.leaving, RealNode):
            raise ValueError(f"the {self.shape} shape runs no DaemonSet agent")
        return self.leaving

    def agent_milestones(self) -> list[ms.Record]:
        """The leaving node's agent's milestones, in time order: from its journal (the
        .deb form) or from its pods' JSON logs (the DaemonSet form)."""
        if not self.daemonset:
            return self.leaving.milestones()
        logs = agent_daemonset.pod_logs(self._nspawn_leaving(), self.agent_ns)
        lines = [ln for log in logs for ln in log.read_text(errors="replace").splitlines()]
        return sorted(ms.from_lines(lines), key=lambda r: r.time)

    def _agent_times(self) -> dict[str, float | None]:
        """The agent's own times (ways.agent_times) where it runs from its .deb."""
        times: dict[str, float | None] = {"poweroff_at": self.poweroff_at}
        if self.config.agent and not self.daemonset:
            times.update(agent_times(self.agent_milestones()))
        return times


def _release_volume(cluster: Cluster, ns: str, nodes: list[Node]) -> None:
    """The StatefulSet deleted and its volume detached from the nodes still running
    (bounded), so that the next scene can attach it; one left on a node that is off stays
    attached for the attach/detach controller's 6 minutes."""
    kube = cluster.kube
    running = [n.name for n in nodes if n.running()]

    def detached() -> bool:
        vas = kube.get(stateful.VA_PATH)["items"]
        return not [va for name in running for va in stateful.on_node(vas, name)]

    # Best effort (the scenes take turns with the volumes): an API error, a request that
    # timed out or a wait that ran out leaves things as they are.
    with contextlib.suppress(ApiError, TimeoutError, ku.WaitTimeout):
        kube.delete(f"/apis/apps/v1/namespaces/{ns}/statefulsets/db")
        ku.wait_until(detached, 60, "the volume detached from the running nodes", step=POLL_S)
    with contextlib.suppress(ApiError):
        kube.delete(f"/api/v1/persistentvolumes/{ns}-db")


def _keep_journal(node: Node, path: Path) -> None:
    """The node's journal (every boot), kept beside the results: its root goes with it."""
    if isinstance(node, VmLeaving):
        node.save_journal(path)
        return
    out = subprocess.run(
        ["journalctl", "-D", str(node.path("var/log/journal")), "-o", "short-iso-precise"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    path.write_text(out.stdout)


def _keep_pod_logs(node: RealNode, ns: str, path: Path) -> None:
    """The agent pods' logs (the DaemonSet form), kept as the node's journal is."""
    logs = agent_daemonset.pod_logs(node, ns)
    path.write_text("".join(f"--- {log}\n{log.read_text(errors='replace')}" for log in logs))


def _until_unrouted(tracker: EndpointTracker, ips: list[str], end: float, notes: list[str]) -> None:
    """Until kube-proxy no longer routes to `ips` (the departed node's pods), or `end`."""
    while set(ips) & {e.split(":")[0] for e in tracker.current()}:
        if time.time() > end:
            notes.append(
                f"kube-proxy still routes to the departed node's pods after "
                f"{DEPARTURE_CAP_S:.0f}s: the traffic stopped there"
            )
            return
        time.sleep(0.5)


def pod_milestone(node: RealNode, ns: str, name: str) -> bool:
    """Whether an agent pod's log (a JSON line each, behind the kubelet's prefix) holds
    the milestone `name`."""
    logs = agent_daemonset.pod_logs(node, ns)
    return any(
        ms.first(ms.from_lines(log.read_text(errors="replace").splitlines()), name) is not None
        for log in logs
    )


def agent_ready(node: Node) -> bool:
    return ms.first(node.milestones(), ms.LOCK_TAKEN) is not None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows
