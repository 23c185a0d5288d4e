"""Starting and stopping detached component processes.

Each component runs in its own session (so its process group id is its pid) with output
to one log file. A process is named by (pid, start time) so that a recycled pid is never
signalled by mistake, also from another process that loaded the recorded state.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TERM_GRACE = 5.0
KILL_GRACE = 5.0


@dataclass(frozen=True)
class ProcRef:
    pid: int
    started: int  # start time in clock ticks after boot, /proc/<pid>/stat field 22

    def alive(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat[0] != "Z" and stat[1] == self.started

    def signal_group(self, sig: signal.Signals) -> None:
        if not self.alive():
            return
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def proc_ref(pid: int) -> ProcRef | None:
    """A reference to the live process `pid`, or None."""
    stat = _stat(pid)
    return ProcRef(pid, stat[1]) if stat is not None and stat[0] != "Z" else None


def spawn(
    args: Sequence[str], log_path: Path, *, cwd: Path, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], ProcRef]:
    """Start `args` detached (new session), appending stdout and stderr to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(args)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    stat = _stat(proc.pid)
    return proc, ProcRef(proc.pid, stat[1] if stat else 0)


def terminate(
    refs: Sequence[ProcRef],
    children: Sequence[subprocess.Popen[bytes]] = (),
    term_grace: float = TERM_GRACE,
) -> list[ProcRef]:
    """TERM every process group, KILL what is left after `term_grace`; return survivors.

    With term_grace=0 the processes get SIGKILL straight away (a crash).
    """
    left = list(refs)
    if term_grace > 0:
        for ref in refs:
            ref.signal_group(signal.SIGTERM)
        left = _wait_gone(refs, children, term_grace)
    for ref in left:
        ref.signal_group(signal.SIGKILL)
    return _wait_gone(left, children, KILL_GRACE)


def _wait_gone(
    refs: Sequence[ProcRef], children: Sequence[subprocess.Popen[bytes]], timeout: float
) -> list[ProcRef]:
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            child.poll()  # reap our own children so they do not linger as zombies
        left = [r for r in refs if r.alive()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


# Below the kernel's ephemeral range (32768-60999 by default): a port from that range can
# become the local port of some outgoing connection while its server is down, and the
# restarted server then cannot bind it again ("address already in use").
PORT_RANGE = (20000, 32767)


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports that were free a moment ago, outside the ephemeral range."""
    socks: list[socket.socket] = []
    try:
        for _ in range(1000):
            if len(socks) == count:
                return [int(s.getsockname()[1]) for s in socks]
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", random.randint(*PORT_RANGE)))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        raise OSError(f"no {count} free loopback ports in {PORT_RANGE}")
    finally:
        for sock in socks:
            sock.close()


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_bytes()[-20000:]
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])
