"""The per-node files of a real node, rendered from its options (pure functions).

Everything a node shares with others on the host is made distinct here: the kubelet's port,
its cgroup root and the CNI bridge and subnet, all derived from the node's name and slot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import yaml

# The kubelet writes its node allocatable tree below this cgroup root in every v1 hierarchy,
# which in the container are the host's own: the name says whose it is.
CGROUP_PREFIX = "/nodeagent-realnode-"
BRIDGE_PREFIX = "nabr"
SUBNET = "10.250.{slot}.0/24"
SLOTS = 250
CA_PATH = "/etc/kubernetes/ca.crt"


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


def kubelet_config(name: str, slot: NodeSlot, opts: NodeOptions) -> str:
    """KubeletConfiguration for a kubelet in systemd-nspawn on a cgroup v1 host."""
    config: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": slot.port,
        "readOnlyPort": 0,
        "healthzPort": 0,
        # The host is cgroup v1 (hybrid); 1.35 refuses v1 unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root(name),
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
    return f"NODE_NAME={name}\nNODE_LABELS={labels}\nCGROUP_ROOT={cgroup_root(name)}\n"
