"""The local control plane's processes and their command lines (hack/localcluster/cluster.py
starts them): etcd, kube-apiserver (as kubeadm runs it: Node and RBAC authorization,
NodeRestriction), kube-controller-manager with the controllers the harness needs, the
scheduler, the kubelet simulator, and the CSI attach path started on demand."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cluster import Cluster

ETCD, APISERVER, KCM, SCHEDULER, SIM = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet-sim",
)
COMPONENTS = (ETCD, APISERVER, KCM, SCHEDULER, SIM)
# The CSI attach path, started on demand (start_attacher): the driver's controller side
# (Kubernetes' mock CSI driver) and the external-attacher that calls it (hack/csi/build.sh).
ATTACHER, CSI_CONTROLLER = "csi-attacher", "csi-mock"
CSI_PROCS = (ATTACHER, CSI_CONTROLLER)
STOP_PHASES = ((ATTACHER,), (CSI_CONTROLLER, SIM, SCHEDULER, KCM), (APISERVER,), (ETCD,))
PORTS = ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler")
CONTROLLERS = (
    "disruption-controller",
    "node-lifecycle-controller",
    # Claims bind to (static) volumes; volumes attach and detach through VolumeAttachments.
    "persistentvolume-binder-controller",
    "persistentvolume-attach-detach-controller",
    # Runs the NoExecute taint manager; it must share a process with the node lifecycle
    # controller, which taints Nodes not-ready/unreachable (kubeadm's default set has both).
    "taint-eviction-controller",
    # What Services route on: kube-proxy (hack/realnode/traffic.py) reads EndpointSlices.
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "daemonset-controller",
    "statefulset-controller",
    "job-controller",
    "replicationcontroller-controller",
    "serviceaccount-controller",
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
)
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


def scheduler_config(c: Cluster) -> str:
    config = (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "clientConnection:\n"
        f"  kubeconfig: {c.workdir / 'scheduler.kubeconfig'}\n"
        "  qps: 200\n"
        "  burst: 400\n"
        "leaderElection:\n"
        "  leaderElect: false\n"
    )
    return config


def etcd(c: Cluster) -> list[str]:
    client, peer = c.etcd_url, f"http://127.0.0.1:{c.ports['etcd-peer']}"
    return [
        str(c.bin_dir / "etcd"),
        "--name=local",
        f"--data-dir={c.workdir / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=local={peer}",
        "--unsafe-no-fsync=true",
        # As kubeadm runs etcd (cmd/kubeadm/app/phases/etcd/local.go): the API server's
        # watch cache learns the current revision every 5 s, so a quiet resource's
        # watchers still get their bookmark every minute (etcd's default: 10 minutes).
        "--experimental-watch-progress-notify-interval=5s",
        "--enable-grpc-gateway=true",
        "--log-level=warn",
    ]


def apiserver(c: Cluster) -> list[str]:
    p = c.pki_dir
    return [
        str(c.bin_dir / "kube-apiserver"),
        f"--etcd-servers={c.etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={c.ports['apiserver']}",
        f"--cert-dir={c.workdir / 'certs' / 'apiserver'}",
        f"--tls-cert-file={p / 'apiserver.crt'}",
        f"--tls-private-key-file={p / 'apiserver.key'}",
        f"--client-ca-file={p / 'ca.crt'}",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--allow-privileged=true",
        # As kubeadm runs it: the Node authorizer and NodeRestriction confine a kubelet
        # identity to its own Node and pods; ServiceAccount and PodSecurity admission
        # stay on (PodSecurity is on by default).
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={p / 'sa.pub'}",
        f"--service-account-signing-key-file={p / 'sa.key'}",
        "--endpoint-reconciler-type=none",
        "--shutdown-watch-termination-grace-period=2s",  # else TERM waits on open watches
        "--max-requests-inflight=800",
        "--max-mutating-requests-inflight=400",
        *c.apiserver_extra_args,
    ]


def controller_manager(c: Cluster) -> list[str]:
    return [
        str(c.bin_dir / "kube-controller-manager"),
        f"--kubeconfig={c.workdir / 'controller-manager.kubeconfig'}",
        "--leader-elect=false",
        *_serving(c, "controller-manager"),
        f"--controllers={','.join(CONTROLLERS)}",
        "--use-service-account-credentials=true",
        "--node-monitor-period=2s",
        "--node-monitor-grace-period=40s",
        "--node-startup-grace-period=60s",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ]


def scheduler(c: Cluster) -> list[str]:
    return [
        str(c.bin_dir / "kube-scheduler"),
        f"--config={c.workdir / 'scheduler.yaml'}",
        *_serving(c, "scheduler"),
    ]


def _serving(c: Cluster, name: str) -> list[str]:
    """Where a controller serves its /healthz: loopback, its port, its own certificates."""
    return [
        "--bind-address=127.0.0.1",
        f"--secure-port={c.ports[name]}",
        f"--cert-dir={c.workdir / 'certs' / name}",
    ]


def simulator(c: Cluster) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hack.localcluster.kubelet_sim",
        f"--kubeconfig={c.kubeconfig}",
        f"--ready-file={c.sim_ready_file}",
        *c.sim_extra_args,
    ]


COMMANDS: dict[str, Callable[[Cluster], list[str]]] = {
    ETCD: etcd,
    APISERVER: apiserver,
    KCM: controller_manager,
    SCHEDULER: scheduler,
    SIM: simulator,
}


def command(c: Cluster, name: str) -> list[str]:
    """The command line of the component `name` of cluster `c`."""
    return COMMANDS[name](c)
