"""A real local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
plus the kubelet simulator, all on loopback, for tests, benchmarks and demos.

    cluster = Cluster.start(tmp_path)          # ~10 s with built binaries
    cluster.add_node("node-a")
    ...                                        # cluster.kubeconfig is an admin kubeconfig
    cluster.stop()

State (ports, pids) lives in WORKDIR/state.json, so Cluster.load(WORKDIR).stop() works from
another process; logs are in WORKDIR/logs/<component>.log. The components' command lines are
components.py's; hack/cluster's command line is cli.py's. The API client is the product's
(nodeagent.kube.client).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hack.kubeutil import wait_until
from nodeagent.kube.client import ApiError, Kube

from . import pki
from .components import (
    APISERVER,
    ATTACHER,
    COMPONENTS,
    CSI_CONTROLLER,
    CSI_PROCS,
    ETCD,
    KCM,
    PORTS,
    SCHEDULER,
    SIM,
    STOP_PHASES,
    command,
    scheduler_config,
)
from .kubeconfig import write_kubeconfig, write_rotating_kubeconfig
from .kubelet_sim import SIM_LABEL
from .podstatus import DEFAULT_CAPACITY
from .procs import TERM_GRACE, ProcRef, free_ports, log_tail, proc_ref, spawn, terminate

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "build-control-plane.sh"
STATE_FILE = "state.json"

BUILD_TIMEOUT = 3600.0
READY_TIMEOUT = {ETCD: 30.0, APISERVER: 90.0, KCM: 60.0, SCHEDULER: 60.0, SIM: 60.0}
CSI_READY_TIMEOUT = 30.0


class ClusterError(RuntimeError):
    """The local cluster could not be started, reached or stopped."""


def default_workdir() -> Path:
    env = os.environ.get("NODEAGENT_CLUSTER_DIR")
    return Path(env) if env else Path.home() / ".cache" / "nodeagent" / "cluster"


def find_binaries() -> Path:
    """Directory with the control-plane binaries: $NODEAGENT_CP_BIN_DIR, else build/cache."""
    env = os.environ.get("NODEAGENT_CP_BIN_DIR")
    if env:
        return Path(env)
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"{BUILD_SCRIPT} took over {BUILD_TIMEOUT:.0f}s") from exc
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ClusterError(f"{BUILD_SCRIPT} failed with exit code {proc.returncode}")
    return Path(lines[-1])


def _probe(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return int(resp.status) == 200
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@dataclass
class Cluster:
    """Handle on one local cluster living in `workdir`."""

    workdir: Path
    bin_dir: Path
    ports: dict[str, int]
    procs: dict[str, ProcRef] = field(default_factory=dict)
    apiserver_extra_args: list[str] = field(default_factory=list)
    sim_extra_args: list[str] = field(default_factory=list)
    _children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _kube: Kube | None = field(default=None, repr=False)

    # ---- paths -------------------------------------------------------------------------

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def kubeconfig(self) -> Path:
        """Admin (system:masters) kubeconfig."""
        return self.workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['etcd']}"

    def log_path(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    @property
    def kube(self) -> Kube:
        """The product's client (nodeagent.kube.client) with admin rights, made on first
        use."""
        if self._kube is None:
            self._kube = Kube.from_kubeconfig(str(self.kubeconfig))
        return self._kube

    # ---- lifecycle ---------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        workdir: Path,
        kubeconfig: Path | None = None,
        *,
        bin_dir: Path | None = None,
        apiserver_extra_args: Sequence[str] = (),
        sim_extra_args: Sequence[str] = (),
    ) -> Cluster:
        """Start etcd, the control plane and the kubelet simulator; return when all are ready.

        `apiserver_extra_args` are appended to kube-apiserver's flags (and kept for
        start_apiserver()), e.g. ["--watch-cache=false"] so that watches and lists at a
        compacted resourceVersion reach etcd and get 410 Gone. `sim_extra_args` go to the
        kubelet simulator, e.g. the kubelet's own Lease and status cadence for a fleet of
        nodes (["--lease-interval=10", "--status-interval=300"]).
        """
        workdir = Path(workdir).expanduser().absolute()
        if stray_processes(workdir):
            raise ClusterError(f"a cluster is (partly) running in {workdir}: stop it first")
        bins = bin_dir or find_binaries()
        ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        cluster = cls(
            workdir,
            bins,
            ports,
            apiserver_extra_args=list(apiserver_extra_args),
            sim_extra_args=list(sim_extra_args),
        )
        try:
            cluster._prepare()
            cluster._launch(ETCD)
            cluster._launch(APISERVER)
            for name in (KCM, SCHEDULER, SIM):
                cluster._spawn(name)
            for name in (KCM, SCHEDULER, SIM):
                cluster._wait_ready(name)
        except BaseException:
            with contextlib.suppress(ClusterError):
                cluster.stop()
            raise
        if kubeconfig is not None:
            cluster.export_kubeconfig(kubeconfig)
        return cluster

    @classmethod
    def load(cls, workdir: Path) -> Cluster:
        """The cluster recorded in WORKDIR/state.json (maybe stopped)."""
        workdir = Path(workdir).expanduser().absolute()
        try:
            state = json.loads((workdir / STATE_FILE).read_text())
        except (FileNotFoundError, ValueError) as exc:
            raise ClusterError(f"no cluster state in {workdir}") from exc
        procs = {n: ProcRef(int(p["pid"]), int(p["started"])) for n, p in state["procs"].items()}
        extra = [str(a) for a in state.get("apiserver_extra_args") or []]
        sim = [str(a) for a in state.get("sim_extra_args") or []]
        return cls(workdir, Path(state["bin_dir"]), dict(state["ports"]), procs, extra, sim)

    def running(self) -> bool:
        """True when every component is alive."""
        return all(n in self.procs and self.procs[n].alive() for n in COMPONENTS)

    def ready(self) -> bool:
        return self.running() and self._apiserver_ready()

    def stop(self) -> None:
        """Stop every component (TERM, then KILL) and any stray process of this workdir."""
        children = list(self._children.values())
        left: list[ProcRef] = []
        for phase in STOP_PHASES:  # clients first, etcd last: each exits promptly
            left += terminate([self.procs[n] for n in phase if n in self.procs], children)
        left += terminate(stray_processes(self.workdir))
        self.procs.clear()
        self._children.clear()
        self._kube = None
        self._save()
        if left:
            raise ClusterError(f"processes survived SIGKILL: {[r.pid for r in left]}")

    def stop_apiserver(self, *, crash: bool = False) -> None:
        """Stop kube-apiserver only (fault injection): SIGTERM, or SIGKILL with `crash`.

        start_apiserver() brings it back on the same port.
        """
        ref = self.procs.pop(APISERVER, None)
        child = self._children.pop(APISERVER, None)
        if ref is not None:
            terminate([ref], [child] if child else [], term_grace=0.0 if crash else TERM_GRACE)
        self._save()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port with the same certificates."""
        if APISERVER in self.procs and self.procs[APISERVER].alive():
            return
        self._launch(APISERVER)

    def start_attacher(self, csi_dir: Path, driver: str) -> None:
        """Start the CSI controller side of `driver` and the external-attacher beside the
        control plane; `csi_dir` holds csi-mock and csi-attacher (hack/csi/build.sh).

        The attacher runs as admin: a test harness, not a deployment. A second call with
        both running does nothing; after stop_attacher() it starts them again (the mock's
        volumes live in its memory and start afresh).
        """
        if self.attacher_running():
            return
        self.stop_attacher()
        sock = self.csi_socket
        sock.unlink(missing_ok=True)
        mock = [str(csi_dir / "csi-mock"), f"-driver-name={driver}", f"-endpoint={sock}"]
        self._spawn_extra(CSI_CONTROLLER, mock)
        self._wait_extra(CSI_CONTROLLER, sock.exists)
        attacher = [
            str(csi_dir / "csi-attacher"),
            f"--csi-address=unix://{sock}",
            f"--kubeconfig={self.kubeconfig}",
            "--leader-election=false",
            "--timeout=15s",
            "--retry-interval-max=5s",
            "--v=4",
        ]
        self._spawn_extra(ATTACHER, attacher)

    def stop_attacher(self) -> None:
        """Stop the external-attacher and the CSI controller (fault injection: a volume
        that cannot detach any more)."""
        for name in CSI_PROCS:
            ref = self.procs.pop(name, None)
            child = self._children.pop(name, None)
            if ref is not None:
                terminate([ref], [child] if child else [])
        self._save()

    def attacher_running(self) -> bool:
        return all(n in self.procs and self.procs[n].alive() for n in CSI_PROCS)

    @property
    def csi_socket(self) -> Path:
        return self.workdir / "csi" / "controller.sock"

    def _spawn_extra(self, name: str, args: list[str]) -> None:
        child, ref = spawn(args, self.log_path(name), cwd=REPO)
        self._children[name] = child
        self.procs[name] = ref
        self._save()

    def _wait_extra(self, name: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + CSI_READY_TIMEOUT
        while not check():
            child = self._children[name]
            if child.poll() is not None:
                self._fail(name, f"exited with code {child.returncode}")
            if time.monotonic() > deadline:
                self._fail(name, f"not ready after {CSI_READY_TIMEOUT:.0f}s")
            time.sleep(0.05)

    def export_kubeconfig(self, path: Path) -> Path:
        """Copy the admin kubeconfig to `path`."""
        path = Path(path).expanduser().absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.kubeconfig, path)
        path.chmod(0o600)
        return path

    # ---- helpers for tests -------------------------------------------------------------

    def mint_kubeconfig(self, user: str, groups: list[str], path: Path) -> Path:
        """A client-certificate kubeconfig for `user` in `groups` (no rights unless bound)."""
        ca = pki.ensure_ca(self.pki_dir)
        pair = pki.ensure_pair(
            ca, pki.user_pair(self.pki_dir, user, groups), pki.subject(user, groups)
        )
        return write_kubeconfig(Path(path), self.server, ca, user, pair)

    def mint_node_kubeconfig(self, node: str, path: Path) -> Path:
        """The kubelet's own identity for `node` (CN=system:node:<node>, O=system:nodes): with
        no RBAC binding, the Node authorizer and NodeRestriction confine it to that node."""
        return self.mint_kubeconfig(f"system:node:{node}", ["system:nodes"], path)

    def rotate_kubelet_certificate(self, node: str, pki_dir: Path, not_after: datetime) -> Path:
        """Issue `node`'s kubelet a client certificate valid until `not_after` and make it
        current as the kubelet does: a new kubelet-client-<timestamp>.pem, then the
        kubelet-client-current.pem symlink moved onto it (rename, so never missing)."""
        ca = pki.ensure_ca(self.pki_dir)
        stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H-%M-%S-%f")
        pem = pki.issue_until(
            ca,
            pki_dir / f"kubelet-client-{stamp}.pem",
            pki.subject(f"system:node:{node}", ["system:nodes"]),
            not_after,
        )
        current = pki_dir / "kubelet-client-current.pem"
        link = pki_dir / f".kubelet-client-current.pem.{stamp}"
        link.symlink_to(pem.name)
        link.replace(current)
        return current

    def kubelet_kubeconfig(self, node: str, path: Path, pki_dir: Path) -> Path:
        """A kubeconfig like kubeadm's kubelet.conf for `node`, reading its certificate from
        `pki_dir`/kubelet-client-current.pem (see rotate_kubelet_certificate)."""
        ca = pki.ensure_ca(self.pki_dir)
        pem = pki_dir / "kubelet-client-current.pem"
        return write_rotating_kubeconfig(Path(path), self.server, ca, "default-auth", pem)

    def add_node(
        self, name: str, labels: dict[str, str] | None = None, *, timeout: float = 30.0
    ) -> None:
        """Create a simulated Node and wait until it is Ready and schedulable."""
        meta = {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                SIM_LABEL: "true",
                **(labels or {}),
            },
        }
        status = {"capacity": DEFAULT_CAPACITY, "allocatable": DEFAULT_CAPACITY}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": status}
        try:
            self.kube.post("/api/v1/nodes", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        wait_until(lambda: self._node_schedulable(name), timeout, f"node {name} to become Ready")

    def _node_schedulable(self, name: str) -> bool:
        node = self.kube.get(f"/api/v1/nodes/{name}")
        conditions = (node.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        taints = (node.get("spec") or {}).get("taints") or []
        not_ready = any(t.get("key", "").startswith("node.kubernetes.io/not-ready") for t in taints)
        return ready and not not_ready

    def compact_etcd(self) -> int:
        """Compact etcd up to its current revision (old resourceVersions then get 410 Gone)."""
        head = self._etcd_call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        revision = int(head["header"]["revision"])
        self._etcd_call("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def _etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            result: dict[str, Any] = json.loads(resp.read())
        return result

    # ---- start-up internals ------------------------------------------------------------

    def _prepare(self) -> None:
        for sub in ("logs", "certs", "etcd"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)  # always a fresh cluster
        ca = pki.ensure_ca(self.pki_dir)
        pki.ensure_service_account_keys(self.pki_dir)
        pki.ensure_pair(ca, self._pair("apiserver"), "/CN=kube-apiserver", pki.SERVER_SANS)
        identities = {
            "admin": ("admin", ["system:masters"]),
            "controller-manager": ("system:kube-controller-manager", []),
            "scheduler": ("system:kube-scheduler", []),
        }
        for stem, (user, groups) in identities.items():
            pair = pki.ensure_pair(ca, self._pair(stem), pki.subject(user, groups))
            write_kubeconfig(self.workdir / f"{stem}.kubeconfig", self.server, ca, user, pair)
        self._write_scheduler_config()
        self._save()

    def _pair(self, stem: str) -> pki.KeyPair:
        return pki.KeyPair(self.pki_dir / f"{stem}.crt", self.pki_dir / f"{stem}.key")

    def _write_scheduler_config(self) -> None:
        (self.workdir / "scheduler.yaml").write_text(scheduler_config(self))

    @property
    def sim_ready_file(self) -> Path:
        """Written by the kubelet simulator once it runs."""
        return self.workdir / "kubelet-sim.ready"

    def _spawn(self, name: str) -> None:
        env = None
        if name == SIM:
            self.sim_ready_file.unlink(missing_ok=True)
            pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
            env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        child, ref = spawn(command(self, name), self.log_path(name), cwd=REPO, env=env)
        self._children[name] = child
        self.procs[name] = ref
        self._save()

    def _launch(self, name: str) -> None:
        self._spawn(name)
        self._wait_ready(name)

    def _wait_ready(self, name: str) -> None:
        checks: dict[str, Callable[[], bool]] = {
            ETCD: lambda: _probe(f"{self.etcd_url}/health"),
            APISERVER: self._apiserver_ready,
            KCM: lambda: _probe(self._healthz("controller-manager"), _insecure()),
            SCHEDULER: lambda: _probe(self._healthz("scheduler"), _insecure()),
            SIM: self.sim_ready_file.exists,
        }
        timeout = READY_TIMEOUT[name]
        deadline = time.monotonic() + timeout
        while not checks[name]():
            child = self._children.get(name)
            if child is not None and child.poll() is not None:
                self._fail(name, f"exited with code {child.returncode}")
            if time.monotonic() > deadline:
                self._fail(name, f"not ready after {timeout:.0f}s")
            time.sleep(0.05)

    def _healthz(self, port: str) -> str:
        return f"https://127.0.0.1:{self.ports[port]}/healthz"

    def _fail(self, name: str, what: str) -> None:
        tail = log_tail(self.log_path(name))
        raise ClusterError(f"{name} {what}; last lines of {self.log_path(name)}:\n{tail}")

    def _admin_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

    def _apiserver_ready(self) -> bool:
        return _probe(f"{self.server}/readyz", self._admin_context())

    def _save(self) -> None:
        state = {
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "procs": {n: {"pid": r.pid, "started": r.started} for n, r in self.procs.items()},
            "apiserver_extra_args": self.apiserver_extra_args,
            "sim_extra_args": self.sim_extra_args,
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
        }
        tmp = self.workdir / f".{STATE_FILE}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.workdir / STATE_FILE)


def stray_processes(workdir: Path) -> list[ProcRef]:
    """Processes (other than this one) whose command line points into `workdir`."""
    marker = str(Path(workdir).absolute()).encode() + b"/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        names = (*COMPONENTS, *CSI_PROCS, "kubelet_sim")
        if marker in cmdline and any(c.encode() in cmdline for c in names):
            ref = proc_ref(int(entry.name))
            if ref is not None:
                found.append(ref)
    return [r for r in found if r.alive()]
