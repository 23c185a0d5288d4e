"""A real node as a qemu VM (Debian 13, its own kernel, cgroup v2, the systemd driver)."""

from .config import VmOptions
from .node import VmError, VmNode

__all__ = ["VmError", "VmNode", "VmOptions"]
