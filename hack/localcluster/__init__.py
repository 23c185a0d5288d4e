"""Local Kubernetes control plane and kubelet simulator for tests and demos."""

from .cluster import Cluster, ClusterError
from .kubelet_sim import (
    BOOT_ID,
    READY_DELAY,
    REJECT,
    REJECT_MESSAGE,
    SIM_LABEL,
    TERMINATION_DELAY,
)

__all__ = [
    "BOOT_ID",
    "READY_DELAY",
    "REJECT",
    "REJECT_MESSAGE",
    "SIM_LABEL",
    "TERMINATION_DELAY",
    "Cluster",
    "ClusterError",
]
