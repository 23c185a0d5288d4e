"""What leaves and how: the kinds of departure, and the configurations a node leaves in
(the agent or not, the kubelet's graceful node shutdown or not). The benchmark's table is
kinds by configurations.

A new kind is a member of Kind here, its row in ways.WAYS (how it leaves, its release unless
the agent's drain for the shutdown tells it), and its name in bench/departure.py's KINDS and
help. A new configuration is an entry of CONFIGS.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hack.kubeutil import GROUP_LABEL
from hack.realnode import NodeOptions
from hack.realnode.config import CgroupDriver


class Kind(Enum):
    POWEROFF = "poweroff"
    EVACUATE = "evacuate"
    REBOOT = "reboot"  # systemctl reboot; the node comes back and takes pods again
    # systemctl soft-reboot (systemd 254+, the VM node): userspace restarted, same kernel.
    SOFT_REBOOT = "soft-reboot"
    ROLLING_REBOOT = "rolling-reboot"  # both nodes, one after the other, as an OS-update wave
    SIGTERM_IGNORING = "sigterm-ignoring"  # a poweroff with a pod that ignores SIGTERM
    STOP = "stop"  # systemctl stop nodeagent, then maintenance of the node's runtime
    # A poweroff with the agent in its DaemonSet form (hack/realnode/daemonset.py).
    DAEMONSET_POWEROFF = "daemonset-poweroff"
    # `systemctl start poweroff.target`: the job queued without logind, so no
    # PrepareForShutdown and no delay lock; the agent hears only its SIGTERM.
    POWEROFF_TARGET = "poweroff-target"
    # The cloud's Spot notice (amazon-ec2-metadata-mock on the host's loopback, the agent
    # reading it as its IMDS) two minutes ahead, then the poweroff at the notice's time.
    SPOT_INTERRUPTION = "spot-interruption"
    # Beside the other actors (hack/actors/, ways in actorways.py): another tool's uncordon
    # 2 s into the agent's drain for a poweroff, with a scale-up at that moment; the
    # autoscaler's scale-down, Karpenter's termination and kured's reboot, each draining
    # before the machine goes down; the Node deleted 1 s into a poweroff's drain.
    FOREIGN_UNCORDON = "foreign-uncordon"
    AUTOSCALER_SCALE_DOWN = "autoscaler-scale-down"
    KARPENTER_TERMINATION = "karpenter-termination"
    KURED_REBOOT = "kured-reboot"
    NODE_DELETED = "node-deleted"


@dataclass(frozen=True)
class GracefulShutdown:
    """The kubelet's graceful node shutdown: its whole time and the critical pods' share."""

    seconds: int
    critical_seconds: int


# The defaults that managed platforms turn on (kOps 30/10; GKE 30/15, its Spot pools' and
# nodes' default; EKS's Amazon Linux 2023 nodes from Kubernetes 1.34: 150/30).
GNS = {
    "gns": GracefulShutdown(30, 10),
    "gns-gke": GracefulShutdown(30, 15),
    "gns-eks": GracefulShutdown(150, 30),
}


@dataclass(frozen=True)
class Config:
    name: str
    agent: bool
    gns: GracefulShutdown | None = None
    # The time a shutdown has, as a late notice leaves it (GCP's 30 s from soft-off to
    # hard-off): logind's delay set to it (the agent's budget follows) and the node's power
    # cut when it is still up that long after the poweroff. None: logind's delay is the
    # agent's drop-in's, and nothing cuts the power.
    budget_s: int | None = None

    def node_options(self, group: str, driver: CgroupDriver = "cgroupfs") -> NodeOptions:
        gns = self.gns or GracefulShutdown(0, 0)
        return NodeOptions(
            labels={GROUP_LABEL: group},
            shutdown_grace=gns.seconds,
            shutdown_grace_critical=gns.critical_seconds,
            cgroup_driver=driver,
        )


CONFIGS = {
    c.name: c
    for c in (
        Config("none", agent=False),
        Config("nodeagent", agent=True),
        *(Config(name, agent=False, gns=gns) for name, gns in GNS.items()),
        *(Config(f"nodeagent+{name}", agent=True, gns=gns) for name, gns in GNS.items()),
        # What a node gets whose warning came late or was not heard: 30 s in all.
        Config("nodeagent-30s", agent=True, budget_s=30),
    )
}
