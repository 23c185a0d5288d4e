"""What a real node touches on the host, and taking it back.

The container shares the host's network namespace and, on a cgroup v1 host, the host's
cgroup hierarchies. So a node holds: a slot (its CNI bridge and pod subnet), a cgroup root
in every v1 hierarchy, and nothing else: the kernel tunables the kubelet insists on are
shown to it inside the container only (see hack/realnode-root), and it makes no iptables
rules. :func:`leftovers` lists whatever of this is still on the host.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .config import SLOTS, CgroupDriver, NodeSlot, cgroup_root

CGROUP_FS = Path("/sys/fs/cgroup")
# Slots are the host's (its bridges and subnets), not one checkout's or one user's: the
# registry lives with them in /run, not in a cache another checkout may not share.
SLOT_DIR = Path("/run/nodeagent-realnode-slots")
# Tunables the kubelet would write (container_manager_linux.go): they must not change.
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)


class HostError(RuntimeError):
    """A host resource could not be taken or given back."""


def take_slot(name: str) -> int:
    """The first free slot, recorded as this node's (its own slot again if it has one)."""
    SLOT_DIR.mkdir(parents=True, exist_ok=True)
    own = slot_of(name)
    if own is not None:
        return own
    for slot in range(SLOTS):
        try:
            fd = os.open(SLOT_DIR / str(slot), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(name)
        return slot
    raise HostError(f"all {SLOTS} real-node slots are taken (see {SLOT_DIR})")


def slot_of(name: str) -> int | None:
    if not SLOT_DIR.is_dir():
        return None
    for entry in SLOT_DIR.iterdir():
        with contextlib.suppress(OSError):
            if entry.read_text() == name:
                return int(entry.name)
    return None


def release_slot(slot: int) -> None:
    (SLOT_DIR / str(slot)).unlink(missing_ok=True)


def bridge_exists(bridge: str) -> bool:
    return Path("/sys/class/net", bridge).exists()


def delete_bridge(bridge: str) -> None:
    if not bridge_exists(bridge):
        return
    out = subprocess.run(
        ["ip", "link", "del", bridge], capture_output=True, text=True, timeout=30, check=False
    )
    if out.returncode != 0 and bridge_exists(bridge):
        raise HostError(f"ip link del {bridge}: {out.stderr.strip()}")


def bridge_ports(bridge: str) -> list[str]:
    """The host ends of the pods' veth pairs on the node's bridge."""
    brif = Path("/sys/class/net", bridge, "brif")
    return sorted(p.name for p in brif.iterdir()) if brif.is_dir() else []


def wait_links_gone(names: list[str], timeout: float = 10.0) -> None:
    """The kernel removes a veth pair when its pod's network namespace goes, a little later."""
    end = time.monotonic() + timeout
    while any(Path("/sys/class/net", n).exists() for n in names) and time.monotonic() < end:
        time.sleep(0.1)


def cgroup_homes(name: str) -> list[Path]:
    """Where the node's cgroup root lands in each hierarchy, as seen from the host.

    The container's view of each v1 hierarchy starts at nspawn's own cgroup there, which
    is the caller's (nspawn is started from here), so the node's root is the caller's
    cgroup plus the node's name. In the named systemd hierarchy and the unified one nspawn
    is moved into that directory before it starts: its payload and supervisor cgroups,
    and the kubelet's root inside the payload, then all lie below it.
    """
    homes = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        mount = CGROUP_FS / (controllers.removeprefix("name=") or "unified")
        if mount.is_dir():
            homes.append(mount / path.lstrip("/") / cgroup_root(name).lstrip("/"))
    return sorted(homes)


def nspawn_cgroups(homes: list[Path], driver: CgroupDriver = "cgroupfs") -> list[Path]:
    """The homes nspawn itself is moved into (it creates its own cgroups there).

    With the systemd driver, every hierarchy's: the container's cgroup namespace then starts
    at the node's root in the v1 controllers too, so the node's systemd makes the kubelet's
    slices (kubepods.slice, ...) there under their own names, and two nodes do not share
    one. With cgroupfs the kubelet's cgroupRoot keeps the nodes apart instead.
    """
    if driver == "systemd":
        return list(homes)
    return [h for h in homes if h.relative_to(CGROUP_FS).parts[0] in ("systemd", "unified")]


def prepare_cgroup(home: Path) -> None:
    """Make `home` ready to take a process: a cpuset cgroup has no CPUs or memory nodes
    until given its parent's."""
    home.mkdir(parents=True, exist_ok=True)
    top = CGROUP_FS / home.relative_to(CGROUP_FS).parts[0]
    levels = [home, *home.parents[: len(home.parents) - len(top.parents) - 1]]
    for level in reversed(levels):  # from the hierarchy's top down
        for name in ("cpuset.cpus", "cpuset.mems"):
            own = level / name
            if own.exists() and not own.read_text().strip():
                own.write_text((level.parent / name).read_text())


def remove_cgroups(homes: list[Path], timeout: float = 15.0) -> None:
    """rmdir the node's cgroup trees, deepest first; retried while the last tasks exit."""
    end = time.monotonic() + timeout
    while True:
        busy = []
        for top in homes:
            if not top.is_dir():
                continue
            for path in sorted(_subdirs(top), key=lambda p: len(p.parts), reverse=True):
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    busy.append(f"{path}: {exc.strerror}")
        if not busy:
            return
        if time.monotonic() > end:
            raise HostError(f"cgroups still busy after {timeout:.0f}s: {busy[:3]}")
        time.sleep(0.2)


def _subdirs(top: Path) -> list[Path]:
    found = [top]
    for dirpath, dirnames, _ in os.walk(top):
        found += [Path(dirpath, d) for d in dirnames]
    return found


def sysctls() -> dict[str, str]:
    """The host's values of the tunables a kubelet or CNI plugin would change."""
    values = {}
    for key in SYSCTLS:
        with contextlib.suppress(OSError):
            values[key] = Path("/proc/sys", key).read_text().strip()
    return values


def leftovers(
    name: str, slot: NodeSlot | None, homes: list[Path], ports: Sequence[str] = ()
) -> list[str]:
    """What this node still holds on the host, one line each (empty once given back)."""
    found = [f"cgroup {p}" for p in homes if p.exists()]
    found += [f"link {n}" for n in ports if Path("/sys/class/net", n).exists()]
    # A kubelet without its own root would have made these.
    found += [
        f"cgroup {h}/{top}"
        for h in CGROUP_FS.iterdir()
        for top in ("kubepods", "kubepods.slice")
        if (h / top).exists()
    ]
    if slot is not None and bridge_exists(slot.bridge):
        found.append(f"bridge {slot.bridge}")
    if slot_of(name) is not None:
        found.append(f"slot {slot_of(name)}")
    return found
