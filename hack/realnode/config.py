"""The per-node files of a real node, rendered from its options (pure functions).

Everything a node shares with others on the host is made distinct here: the kubelet's port,
its cgroup root and the CNI bridge and subnet, all derived from the node's name and slot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, get_args

import yaml

# The kubelet writes its node allocatable tree below this cgroup root in every v1 hierarchy,
# which in the container are the host's own: the name says whose it is.
CGROUP_PREFIX = "/nodeagent-realnode-"
BRIDGE_PREFIX = "nabr"
SUBNET = "10.250.{slot}.0/24"
SLOTS = 250
CA_PATH = "/etc/kubernetes/ca.crt"

# Who makes the pods' cgroups: the kubelet and runc directly (cgroupfs, the kubelet's own
# default), or the node's systemd as transient slices and scopes (systemd: kubeadm, EKS
# AL2023, AKS, Flatcar, kOps, k3s). Kubelet and runtime must agree; since 1.34 the kubelet
# takes containerd 2.x's answer (KEP-4033), and the node's containerd 1.6 has none to give.
CgroupDriver = Literal["cgroupfs", "systemd"]
CGROUP_DRIVERS: tuple[CgroupDriver, ...] = get_args(CgroupDriver)


@dataclass(frozen=True)
class NodeOptions:
    """What differs between real nodes of a test (or a person's) choosing."""

    labels: dict[str, str] = field(default_factory=dict)
    # The kubelet's graceful node shutdown: shutdownGracePeriod; 0 turns it off.
    shutdown_grace: int = 0
    shutdown_grace_critical: int = 0
    # kubelet systemReserved cpu (e.g. "500m"), shrinking allocatable; None reserves none.
    reserved_cpu: str | None = None
    max_pods: int = 30
    cgroup_driver: CgroupDriver = "cgroupfs"


@dataclass(frozen=True)
class NodeSlot:
    """The host resources a node holds while it runs: one slot, one port."""

    slot: int
    port: int

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.slot}"

    @property
    def subnet(self) -> str:
        return SUBNET.format(slot=self.slot)


def cgroup_root(name: str) -> str:
    return CGROUP_PREFIX + name


def kubelet_cgroup_root(name: str, opts: NodeOptions) -> str:
    """The kubelet's cgroupRoot, as the container sees its hierarchies.

    With cgroupfs the container's v1 controller hierarchies start at the host's (nspawn's
    cgroup there), so the kubelet is given a root of the node's own. With systemd, nspawn
    starts inside the node's root in every hierarchy (host.nspawn_cgroups): the kubelet
    keeps the default root and its slices their production names (kubepods.slice, ...).
    """
    return cgroup_root(name) if opts.cgroup_driver == "cgroupfs" else "/"


def kubelet_config(name: str, slot: NodeSlot, opts: NodeOptions) -> str:
    """KubeletConfiguration for a kubelet in systemd-nspawn on a cgroup v1 host."""
    config: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": slot.port,
        "readOnlyPort": 0,
        "healthzPort": 0,
        # The host is cgroup v1 (hybrid); 1.35 and later refuse v1 unless told.
        "failCgroupV1": False,
        "cgroupDriver": opts.cgroup_driver,
        "cgroupRoot": kubelet_cgroup_root(name, opts),
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        # Only holders of a certificate from the cluster's CA may call the kubelet's API.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": CA_PATH},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        # Its KUBE-FIREWALL rules would land in the host's network namespace.
        "makeIPTablesUtilChains": False,
        "shutdownGracePeriod": f"{opts.shutdown_grace}s",
        "shutdownGracePeriodCriticalPods": f"{opts.shutdown_grace_critical}s",
        # The test host's disk is whatever it is: evict only when it is really full, and
        # never garbage-collect the imported images (nothing could pull them back).
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": opts.max_pods,
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "10s",
    }
    if opts.reserved_cpu is not None:
        config["systemReserved"] = {"cpu": opts.reserved_cpu}
    return yaml.safe_dump(config, sort_keys=False)


def cni_config(slot: NodeSlot) -> str:
    """A bridge of the node's own in the host's network namespace (shared with the container).

    No gateway address and no masquerading: the bridge needs no IP on the host, no route and
    no ip_forward (a kernel-global setting the plugin would otherwise switch on).
    """
    conf = {
        "cniVersion": "0.4.0",
        "name": "realnode",
        "plugins": [
            {
                "type": "bridge",
                "bridge": slot.bridge,
                "isGateway": False,
                "ipMasq": False,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": slot.subnet}]]},
            }
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def env_file(name: str, opts: NodeOptions) -> str:
    labels = ",".join(f"{k}={v}" for k, v in sorted(opts.labels.items()))
    root = kubelet_cgroup_root(name, opts).rstrip("/")
    return f"NODE_NAME={name}\nNODE_LABELS={labels}\nCGROUP_ROOT={root}\n"


def containerd_config(opts: NodeOptions) -> str:
    """/etc/containerd/config.toml (config version 2, containerd 1.6): runc's cgroups made
    by systemd (as transient scopes in the kubelet's pod slices) or by runc itself."""
    systemd = "true" if opts.cgroup_driver == "systemd" else "false"
    return f"""version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.1"
  # Without CAP_SYS_RESOURCE in the container runc cannot lower oom_score_adj below the
  # container's own (-998 for the sandbox): clamp instead of failing.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = {systemd}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
"""
