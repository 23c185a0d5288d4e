"""One agent per node: a lock on a file under /var/lib/nodeagent decides which runs.

Two agents on one node (a DaemonSet's surge rollout starts the new pod before the old
one stops; the host form and the DaemonSet installed together) must not take two
logind delay locks and run two drains. The first to lock the file runs; the other
waits, saying who holds it, and takes over once the holder exits (the kernel drops the
lock with the holder's last descriptor, even after SIGKILL). The file lives on the host,
so the lock holds across containers and the host alike.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Holder:
    """Who holds the lock, as written into the file for the next agent to report."""

    form: str  # host | pod
    name: str  # the pod's or the host's name
    pid: int  # in the holder's own PID namespace
    since: float  # wall clock

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        return f"{self.form} agent {self.name} (pid {self.pid}) since {started}"


class NodeLockError(OSError):
    """The lock file cannot be opened at all (missing directory, no permission)."""


class NodeLock:
    def __init__(self, path: str, form: str) -> None:
        self.path = Path(path)
        self.me = Holder(form, socket.gethostname(), os.getpid(), time.time())
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> Holder | None:
        """Take the lock if free; else return its holder (best effort: as it wrote itself)."""
        if self._fd is not None:
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise NodeLockError(f"cannot open the node lock {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            return holder or Holder("unknown", "unknown", 0, 0.0)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(self.me)).encode() + b"\n", 0)
        self._fd = fd
        return None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _read_holder(fd: int) -> Holder | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"null")
        return Holder(str(data["form"]), str(data["name"]), int(data["pid"]), float(data["since"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None
