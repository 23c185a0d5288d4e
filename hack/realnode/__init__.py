"""A real node (kubelet + containerd in systemd-nspawn) beside the kubelet simulator."""

from hack.nspawn import EXIT_REBOOT

from .config import NodeOptions
from .images import PAUSE_IMAGE, TEST_IMAGE
from .node import NodeError, RealNode

__all__ = ["EXIT_REBOOT", "PAUSE_IMAGE", "TEST_IMAGE", "NodeError", "NodeOptions", "RealNode"]
