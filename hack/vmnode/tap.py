"""A VM's second NIC on a tap device inside a network namespace the harness made.

qemu stays in the host's network namespace, where its user-mode network reaches the API
server on the host's loopback; its second NIC is a tap that lives in another namespace (the
benchmark's client namespace, hack/realnode/traffic.py), so the client reaches the VM's pods
and nothing is added to the host's links, routes or sysctls.

A tap belongs to the namespace of the thread that opens /dev/net/tun and attaches to it:
:func:`open_tap` enters the namespace on the calling thread only, opens the tap by name and
comes back, and qemu is handed the file descriptor (``-netdev tap,fd=N``).
"""

from __future__ import annotations

import fcntl
import os
import struct

from hack.realnode.nsrelay import _setns

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFNAMSIZ = 16
NETNS_DIR = "/run/netns"


def ifreq(name: str, flags: int) -> bytes:
    """struct ifreq for TUNSETIFF: the name (NUL-padded) and the flags, 40 bytes."""
    raw = name.encode()
    if not raw or len(raw) >= IFNAMSIZ:
        raise ValueError(f"interface name {name!r}: 1 to {IFNAMSIZ - 1} bytes")
    return struct.pack(f"{IFNAMSIZ}sH22x", raw, flags)


def open_tap(netns: str, name: str) -> int:
    """A file descriptor attached to the tap `name` in `netns` (inheritable, for qemu)."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"{NETNS_DIR}/{netns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR)
            try:
                fcntl.ioctl(fd, TUNSETIFF, ifreq(name, IFF_TAP | IFF_NO_PI))
            except OSError:
                os.close(fd)
                raise
        finally:
            _setns(home)
    finally:
        os.close(home)
        os.close(target)
    os.set_inheritable(fd, True)
    return fd
