"""The DaemonSet's pod as a container runtime would run it: the image built by
hack/build-image, its root unpacked, run by systemd-nspawn with the command, arguments,
environment, mounts, read-only root and capabilities of the chart's rendered DaemonSet
(read from the manifest, never re-typed), host paths mapped into the test's directory.
The kubelet's part is played here: the ServiceAccount token bound to the pod, the
cluster CA and KUBERNETES_SERVICE_HOST, so the agent uses its in-cluster credentials
against the local control plane. The system bus is a real dbus-daemon with
python-dbusmock's logind, bind-mounted at /run/dbus as the manifest's hostPath is.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.test_chart as chart
from hack import kubeutil as ku
from hack import milestones as ms
from hack.aemm import Aemm, rfc3339
from hack.agentproc import free_port
from hack.chart import kubectl, note_cluster_scoped, objects, privileged_namespace, render
from hack.deb import hack
from nodeagent.fence.marker import (
    DRAIN_REASON,
    DRAIN_RESULT,
    WARNING,
    WARNING_DEADLINE,
    WARNING_ID,
)
from nodeagent.kube.client import JSON, Kube, pods_path
from tests.test_daemonset_agent import mock_logind, preparing
from tests.test_image import unpack
from tests.test_shutdown_dbus import (
    Bus,
    cordoned,
    drained,
    emit_prepare,
    node_with_a_pod,
    our_inhibitors,
    wait_for,
)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def archives() -> list[Path]:
    return hack("build-image", 1800)


@pytest.fixture(scope="module")
def image_root(archives: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    oci = archives[0]
    work = tmp_path_factory.mktemp("image")
    rootfs = work / "rootfs"
    unpack(oci, work, rootfs)
    return rootfs


@dataclass
class Rendered:
    """The chart's DaemonSet and ConfigMap for one release."""

    namespace: str
    daemonset: JSON
    configmap: JSON

    @property
    def pod_spec(self) -> JSON:
        return dict(self.daemonset["spec"]["template"]["spec"])

    @property
    def container(self) -> JSON:
        (container,) = self.pod_spec["containers"]
        return dict(container)


def render_applied(
    cluster: Any, kube: Kube, values: list[str], cluster_scoped: list[JSON] | None = None
) -> Rendered:
    """A rendering (with a port of its own: nspawn shares the host's network with every
    other test); everything but the DaemonSet applied for real (its controller would
    start a pod on every test node), the pods below stand in for it."""
    ns = privileged_namespace(kube, ku.unique("podimg"))
    docs = objects(render(ns, ns, [f"metrics.port={free_port()}", *values]))
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    rest = [d for d in docs if d["kind"] != "DaemonSet"]
    if cluster_scoped is not None:
        note_cluster_scoped(rest, cluster_scoped)
    done = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(rest))
    assert done.returncode == 0, done.stderr
    return Rendered(ns, ds, cm)


@pytest.fixture(scope="module")
def rendered(cluster: Any, kube: Kube) -> Rendered:
    return render_applied(cluster, kube, [])


class PodRun:
    """One agent pod: its host directories, its nspawn process, its log."""

    def __init__(
        self,
        rendered: Rendered,
        rootfs: Path,
        host: Path,
        name: str,
        node: str,
        cluster: Any,
        kube: Kube,
        bus: Bus,
    ) -> None:
        self.rendered, self.rootfs, self.host, self.name, self.node = (
            rendered, rootfs, host, name, node,
        )  # fmt: skip
        self.log = host / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._cluster, self._kube, self._bus = cluster, kube, bus

    def host_path(self, path: str) -> Path:
        """Where the pod's hostPath `path` lives in the test (shared by all its pods): the
        system bus's directory is the test bus's."""
        if path == "/run/dbus":
            return Path(self._bus.address.removeprefix("unix:path=")).parent
        return self.host / "node" / path.lstrip("/")

    def binds(self) -> list[str]:
        spec, container = self.rendered.pod_spec, self.rendered.container
        volumes = {v["name"]: v for v in spec["volumes"]}
        args = []
        for mount in container["volumeMounts"]:
            source = self.volume_source(volumes[mount["name"]])
            flag = "--bind-ro" if mount.get("readOnly") else "--bind"
            args.append(f"{flag}={source}:{mount['mountPath']}")
        if self.rendered.pod_spec.get("automountServiceAccountToken", True):
            args.append(f"--bind-ro={self.service_account_dir()}:{SA_DIR}")
        # A runtime makes the mount points in the container's own layer; the root here is
        # mounted read-only as the manifest asks, so they are made beforehand.
        for arg in args:
            source, target = arg.split("=", 1)[1].rsplit(":", 1)
            point = self.rootfs / target.lstrip("/")
            if Path(source).is_file():
                point.parent.mkdir(parents=True, exist_ok=True)
                point.touch()
            else:
                point.mkdir(parents=True, exist_ok=True)
        return args

    def volume_source(self, volume: JSON) -> Path:
        if "hostPath" in volume:
            path = self.host_path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") in ("Directory", "DirectoryOrCreate"):
                path.mkdir(parents=True, exist_ok=True)
            if volume["hostPath"].get("type") == "File":
                assert path.is_file(), f"the node has no {volume['hostPath']['path']}"
            return path
        if "configMap" in volume:
            path = self.host / self.name / "config"
            path.mkdir(parents=True, exist_ok=True)
            for key, value in self.rendered.configmap["data"].items():
                (path / key).write_text(value)
            return path
        if "emptyDir" in volume:
            path = self.host / self.name / "empty"
            path.mkdir(parents=True, exist_ok=True)
            return path
        raise AssertionError(f"volume kind the test does not map: {volume}")

    def service_account_dir(self) -> Path:
        """What the kubelet mounts: a token bound to this pod, the CA, the namespace."""
        ns = self.rendered.namespace
        spec = self.rendered.pod_spec | {"nodeName": self.node}
        meta = {"name": self.name, "namespace": ns}
        pod = self._kube.post(pods_path(ns), {"apiVersion": "v1", "kind": "Pod",
                                             "metadata": meta, "spec": spec})  # fmt: skip
        ref = {"kind": "Pod", "apiVersion": "v1", "name": self.name,
               "uid": pod["metadata"]["uid"]}  # fmt: skip
        sa = spec["serviceAccountName"]
        token = self._kube.post(
            f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
            {"spec": {"boundObjectRef": ref, "expirationSeconds": 3600}},
        )["status"]["token"]
        admin = yaml.safe_load(Path(self._cluster.kubeconfig).read_text())
        ca = base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"])
        path = self.host / self.name / "serviceaccount"
        path.mkdir(parents=True, exist_ok=True)
        (path / "token").write_text(token)
        (path / "ca.crt").write_bytes(ca)
        (path / "namespace").write_text(ns)
        return path

    def env(self) -> list[str]:
        out = []
        for item in self.rendered.container["env"]:
            if "value" in item:
                out.append(f"{item['name']}={item['value']}")
            else:
                field_path = item["valueFrom"]["fieldRef"]["fieldPath"]
                assert field_path == "spec.nodeName", item
                out.append(f"{item['name']}={self.node}")
        server = self._cluster.server.removeprefix("https://")
        host, port = server.rsplit(":", 1)
        out += [f"KUBERNETES_SERVICE_HOST={host}", f"KUBERNETES_SERVICE_PORT={port}"]
        return [f"--setenv={e}" for e in out]

    def security(self) -> list[str]:
        ctx = self.rendered.container["securityContext"]
        args = ["--read-only"] if ctx.get("readOnlyRootFilesystem") else []
        caps = ctx.get("capabilities") or {}
        if "ALL" in caps.get("drop", []):
            args.append("--drop-capability=all")
        if caps.get("add"):
            args.append("--capability=" + ",".join(f"CAP_{c}" for c in caps["add"]))
        return args

    def start(self) -> PodRun:
        container = self.rendered.container
        bus_socket = Path(self._bus.address.removeprefix("unix:path="))
        socket = bus_socket.parent / "system_bus_socket"  # the manifest's address
        if not socket.is_symlink():
            socket.symlink_to(bus_socket.name)
        cmd = [
            "systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
            "--directory", str(self.rootfs),
            f"--machine={self.name}", "--kill-signal=SIGTERM", "--resolv-conf=off",
            "--timezone=off", "--link-journal=no", "--console=pipe",
            *self.security(), *self.binds(), *self.env(),
            "--", *container["command"], *container["args"],
        ]  # fmt: skip
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
            )
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the container's PID 1 (and with it the container), then nspawn: a
        killed nspawn would leave its container running."""
        if self.proc is None or self.proc.poll() is not None:
            return
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        for pid in children.read_text().split() if children.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def logind(tmp_path: Path) -> Iterator[Bus]:
    with mock_logind(tmp_path) as bus:
        yield bus


@pytest.fixture
def pods(
    rendered: Rendered, image_root: Path, cluster: Any, kube: Kube, logind: Bus, tmp_path: Path
) -> Iterator[Any]:
    """A factory of agent pods on one node; every pod is killed after the test."""
    started: list[PodRun] = []

    def start(name: str, node: str) -> PodRun:
        pod = PodRun(rendered, image_root, tmp_path, name, node, cluster, kube, logind)
        started.append(pod.start())
        return pod

    try:
        yield start
    finally:
        for pod in started:
            pod.kill()


def drain_result(kube: Kube, node: str) -> str:
    return str((ku.node(kube, node)["metadata"].get("annotations") or {}).get(DRAIN_RESULT, ""))


def grace(rendered: Rendered) -> float:
    return float(rendered.pod_spec["terminationGracePeriodSeconds"])


def holds_the_lock(logind: Bus, pod: PodRun) -> None:
    wait_for(lambda: len(our_inhibitors(logind)) == 1, 60)


def test_prepare_for_shutdown_drains_and_releases_the_lock(
    pods: Any, logind: Bus, cluster: Any, kube: Kube
) -> None:
    node = node_with_a_pod(cluster, kube, "imgprep")
    pod = pods(ku.unique("agent"), node)
    holds_the_lock(logind, pod)
    started = time.monotonic()
    preparing(logind, True)
    emit_prepare(logind, True, "reboot")
    wait_for(lambda: not our_inhibitors(logind), 120)
    released = time.monotonic() - started
    assert cordoned(kube, node) and drained(kube, node), pod.output()
    assert drain_result(kube, node) == "drained", pod.output()
    print(f"image: PrepareForShutdown(true) to lock release {released:.2f}s")


def test_sigterm_without_a_shutdown_exits_and_touches_nothing(
    pods: Any, logind: Bus, cluster: Any, kube: Kube, rendered: Rendered
) -> None:
    node = node_with_a_pod(cluster, kube, "imgterm")
    pod = pods(ku.unique("agent"), node)
    holds_the_lock(logind, pod)
    started = time.monotonic()
    code = pod.stop(timeout=grace(rendered))
    took = time.monotonic() - started
    assert code == 0, pod.output()
    assert not cordoned(kube, node) and not drained(kube, node), pod.output()
    assert drain_result(kube, node) == "", pod.output()
    print(f"image: SIGTERM without a shutdown, exit after {took:.2f}s (grace {grace(rendered)}s)")


def test_sigterm_while_preparing_for_shutdown_finishes_the_drain(
    pods: Any, logind: Bus, cluster: Any, kube: Kube, rendered: Rendered
) -> None:
    node = node_with_a_pod(cluster, kube, "imgprep2")
    pod = pods(ku.unique("agent"), node)
    holds_the_lock(logind, pod)
    preparing(logind, True)
    emit_prepare(logind, True, "poweroff")
    code = pod.stop(timeout=grace(rendered))
    assert code == 0, pod.output()
    assert cordoned(kube, node) and drained(kube, node), pod.output()
    assert drain_result(kube, node) == "drained", pod.output()


def test_a_surge_rollout_does_nothing_to_the_node(
    pods: Any, logind: Bus, cluster: Any, kube: Kube, rendered: Rendered
) -> None:
    """maxSurge 1, maxUnavailable 0: the new pod starts beside the old one on the same
    host paths, waits, and takes over when the old one is stopped. The node stays as it
    was; logind's delay lock changes hands."""
    node = node_with_a_pod(cluster, kube, "imgroll")
    before = ku.node(kube, node)["spec"]
    old = pods(ku.unique("old"), node)
    holds_the_lock(logind, old)
    new = pods(ku.unique("new"), node)

    def standing_by() -> ms.Record | None:
        return ms.first(ms.from_lines(new.output().splitlines()), ms.STANDING_BY, form="pod")

    ku.wait_until(standing_by, 60, "the new pod standing by")
    assert len(our_inhibitors(logind)) == 1
    assert old.stop(timeout=grace(rendered)) == 0, old.output()
    holds_the_lock(logind, new)  # the new pod's: the old one has exited
    assert ku.node(kube, node)["spec"] == before
    assert not drained(kube, node)


def test_the_chart_names_the_image_that_was_built(archives: list[Path]) -> None:
    """Chart appVersion = image tag: the default DaemonSet runs exactly this image."""
    with tarfile.open(archives[1]) as docker:
        handle = docker.extractfile("manifest.json")
        assert handle is not None
        (entry,) = json.load(handle)
    (ds,) = [d for d in objects(render("na", "ns", [])) if d["kind"] == "DaemonSet"]
    assert entry["RepoTags"] == [ds["spec"]["template"]["spec"]["containers"][0]["image"]]


cluster_scoped = chart.cluster_scoped  # a fixture

KUBELET_KUBECONFIG = "/var/lib/kubelet/kubeconfig"


def test_the_kubelet_identity_drains_too(
    image_root: Path,
    cluster: Any,
    kube: Kube,
    logind: Bus,
    tmp_path: Path,
    cluster_scoped: list[JSON],
) -> None:
    """identity=kubelet: the node's own kubelet credentials, read-only from the host
    paths the manifest names, and no ServiceAccount token at all."""
    rendered = render_applied(
        cluster,
        kube,
        ["identity=kubelet", f"kubeletIdentity.kubeconfig={KUBELET_KUBECONFIG}"],
        cluster_scoped,
    )
    assert rendered.pod_spec["automountServiceAccountToken"] is False
    node = node_with_a_pod(cluster, kube, "imgkubelet")
    pod = PodRun(rendered, image_root, tmp_path, ku.unique("agent"), node, cluster, kube, logind)
    cluster.mint_node_kubeconfig(node, pod.host_path(KUBELET_KUBECONFIG))
    try:
        pod.start()
        holds_the_lock(logind, pod)
        preparing(logind, True)
        emit_prepare(logind, True, "reboot")
        wait_for(lambda: not our_inhibitors(logind), 120)
        assert cordoned(kube, node) and drained(kube, node), pod.output()
        assert drain_result(kube, node) == "drained", pod.output()
    finally:
        pod.kill()


def test_a_spot_notice_drains_the_node_on_the_host_network(
    image_root: Path,
    cluster: Any,
    kube: Kube,
    logind: Bus,
    tmp_path: Path,
    cluster_scoped: list[JSON],
) -> None:
    """The cloud's early warning in the DaemonSet form, the chart rendered as on AWS:
    `config.warnings` names the cloud and the metadata URL (the test's
    amazon-ec2-metadata-mock on loopback, IMDSv2 required), `hostNetwork: true` as the
    chart says IMDSv2 needs (nspawn shares the host's network, which is what the manifest
    asks for). The pod reads a Spot notice and drains the node for the warning, its
    marker naming it; the shutdown that follows finds the node drained."""
    port = free_port()
    rendered = render_applied(
        cluster,
        kube,
        [
            "hostNetwork=true",
            "updateStrategy.rollingUpdate.maxSurge=0",
            "updateStrategy.rollingUpdate.maxUnavailable=1",
            "config.warnings.cloud=aws",
            f"config.warnings.metadata_url=http://127.0.0.1:{port}",
        ],
        cluster_scoped,
    )
    assert rendered.pod_spec["hostNetwork"] is True
    node = node_with_a_pod(cluster, kube, "imgspot")
    pod = PodRun(rendered, image_root, tmp_path, ku.unique("agent"), node, cluster, kube, logind)
    mock: Aemm | None = None
    try:
        pod.start()
        holds_the_lock(logind, pod)
        at = float(int(time.time()) + 120)
        mock = Aemm(["spot", "-a", "stop", "-t", rfc3339(at)], tmp_path / "aemm.log", port=port)
        ku.wait_until(lambda: drain_result(kube, node) == "drained", 60, "the warning's drain")
        annotations = ku.node(kube, node)["metadata"]["annotations"]
        assert annotations[DRAIN_REASON] == "warning", pod.output()
        assert annotations[WARNING] == "aws interruption"
        assert annotations[WARNING_ID] == "spot-itn-stop"
        assert annotations[WARNING_DEADLINE] == rfc3339(at)
        assert cordoned(kube, node) and drained(kube, node), pod.output()

        started = time.monotonic()
        preparing(logind, True)
        emit_prepare(logind, True, "poweroff")
        wait_for(lambda: not our_inhibitors(logind), 60)
        print(f"image: spot notice drained; PrepareForShutdown to lock release "
              f"{time.monotonic() - started:.2f}s")  # fmt: skip
        records = ms.from_lines(pod.output().splitlines())
        heard = ms.first(records, ms.WARNING_HEARD, cloud="aws", kind="interruption")
        assert heard is not None and heard.fields["event_id"] == "spot-itn-stop", pod.output()
    finally:
        pod.kill()
        if mock is not None:
            mock.stop()
