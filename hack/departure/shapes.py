"""Which node the departure leaves from: the shapes, and what each can run.

nspawn: the nspawn real node (hack/realnode: Debian 12, systemd 252, the host's cgroup v1).
vm: the VM node (hack/vmnode, hack/departure/vm.py: its own kernel under qemu, Debian 13,
systemd 257, cgroup v2, the systemd driver, the ACPI power button).
nspawn-trixie: Debian 13 in nspawn, which a host whose cgroup controllers are bound to v1
cannot run (shape_error says why, from the host's own hierarchy).
"""

from __future__ import annotations

from pathlib import Path

SHAPES = ("nspawn", "nspawn-trixie", "vm")
# What the vm shape runs: its leaving node is the one VM (rolling-reboot would need two), it
# has no DaemonSet image and no way to the metadata mock on the host's loopback.
VM_KINDS = ("poweroff", "reboot", "stop", "soft-reboot")
UNIFIED = (
    Path("/sys/fs/cgroup/cgroup.controllers"),
    Path("/sys/fs/cgroup/unified/cgroup.controllers"),
)
NEEDED = ("cpu", "memory", "pids")


def v2_controllers() -> set[str]:
    """The controllers the host's unified (cgroup v2) hierarchy has."""
    for path in UNIFIED:
        if path.exists():
            return set(path.read_text().split())
    return set()


def shape_error(shape: str, kinds: list[str], v2: set[str]) -> str | None:
    """Why `kinds` cannot run on `shape` (None: they can). `v2`: v2_controllers()."""
    if shape == "nspawn-trixie":
        missing = [c for c in NEEDED if c not in v2]
        why = (
            f"this host's v2 hierarchy lacks {', '.join(missing)} (bound to v1; it has "
            f"{', '.join(sorted(v2)) or 'nothing'})"
            if missing
            else "the trixie nspawn root is not built yet"
        )
        return (
            "the nspawn-trixie shape does not run on this host: systemd 257 refuses cgroup v1 "
            "(unless the kernel command line forces it), and on v2 the kubelet and runc need "
            f"{', '.join(NEEDED)}: {why}; Debian 13 runs as --shape vm"
        )
    if shape == "vm":
        other = [k for k in kinds if k not in VM_KINDS]
        if other:
            return f"kind {', '.join(other)} does not run on the vm shape ({', '.join(VM_KINDS)})"
    elif "soft-reboot" in kinds:
        return "kind soft-reboot needs systemd 254+ (the nspawn node has 252): use --shape vm"
    return None
