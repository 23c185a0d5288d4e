"""Local Kubernetes control plane and kubelet simulator for tests and demos."""

from .cluster import Cluster, ClusterError

__all__ = ["Cluster", "ClusterError"]
