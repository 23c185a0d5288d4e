"""One agent per node: the node claim, an flock on a file under /var/lib/nodeagent.

Two agents on one node (a DaemonSet's surge rollout starts the new pod before the old
one stops; the host form and the DaemonSet installed together) must not take two
logind delay inhibitors and run two drains. The first to flock the file (the claim file,
``lock_file`` in the configuration) runs; the other waits, saying who holds the claim,
and takes over once the holder exits (the kernel drops the flock with the holder's last
descriptor, even after SIGKILL). The file lives on the host, so the claim holds across
containers and the host alike. Nothing deletes the file, not even the package's purge
(packaging/debian/postrm): an agent that opened a deleted file would hold a claim no
other agent sees.
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
class Claimant:
    """Who holds the claim, as written into the file for the next agent to report."""

    form: str  # host | pod
    name: str  # the pod's or the host's name
    pid: int  # in the holder's own PID namespace
    since: float  # wall clock

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        return f"{self.form} agent {self.name} (pid {self.pid}) since {started}"


class AgentClaimError(OSError):
    """The claim file cannot be opened at all (missing directory, no permission)."""


class AgentClaim:
    """This agent's claim on the node: held from :meth:`try_acquire` to :meth:`release`."""

    def __init__(self, path: str, form: str) -> None:
        self.path = Path(path)
        self.me = Claimant(form, socket.gethostname(), os.getpid(), time.time())
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> Claimant | None:
        """Take the claim if free; else return its holder (best effort: as it wrote itself)."""
        if self._fd is not None:
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise AgentClaimError(
                f"cannot open the node claim file {self.path}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            return holder or Claimant("unknown", "unknown", 0, 0.0)
        if not names_file(self.path, fd):
            os.close(fd)  # unlinked under its flock (a purge): claim the new one next time
            return Claimant("unknown", "a removed claim file", 0, 0.0)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(self.me)).encode() + b"\n", 0)
        self._fd = fd
        return None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def names_file(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd` (not unlinked or replaced)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)


def _read_holder(fd: int) -> Claimant | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"null")
        return Claimant(
            str(data["form"]), str(data["name"]), int(data["pid"]), float(data["since"])
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None
