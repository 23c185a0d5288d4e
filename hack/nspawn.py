"""The systemd-nspawn driver shared by the system tests' machines (tests/nspawn.py) and the
real nodes (hack/realnode/node.py): start a booting container with nspawn's output logged, find
its PID 1, run commands in it, wait for it to exit or kill it, read its journal (and an
entry's time).

A subclass says how its nspawn process is known (:meth:`Container.nspawn_pid`; a real node
may be driven from another process than the one that started it) and what "booted" means
to it (the ``ready`` callable of :meth:`Container.wait_booted`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

INNER_PATH = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
EXIT_POWEROFF = 0
EXIT_REBOOT = 133  # what systemd-nspawn exits with when the container rebooted


class Container:
    """One container booted from a private root at ``workdir/root``."""

    name: str
    workdir: Path
    boots: int
    # How a failure is raised: a subclass may narrow it to its own error type.
    error: type[RuntimeError] = RuntimeError
    run_timeout = 60.0
    # NAME=VALUE for the container's PID 1 and the commands run in it, which get none of this
    # process's environment: an emulated root's (hack/emulation.qemu_env).
    env: tuple[str, ...] = ()
    _child: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> Path:
        return self.workdir / "root"

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    # -- starting --------------------------------------------------------------------------

    def nspawn_args(self, *extra: str) -> list[str]:
        """The command line that boots the container; ``extra`` options go last."""
        return [
            "systemd-nspawn",
            "--boot",
            "--register=no",
            "--keep-unit",
            # No pty for a console: nspawn's own output goes to console-N.log, the node has
            # no /dev/console, and its PID 1's status lines go nowhere (its journal has them
            # all). With a pty PID 1 blocks for good in a status line once the pty's few KiB
            # are full: `passive` never reads it, and `read-only`'s reader once stopped a
            # second into a shutdown; the node then never powered off, as no real console
            # does to it (tests/test_nspawn_console.py).
            "--console=pipe",
            f"--machine={self.name}",
            "-D",
            str(self.root),
            *(f"--setenv={e}" for e in self.env),
            *extra,
        ]

    def spawn(self, argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` (an nspawn command line, maybe wrapped) as this container's next
        boot, nspawn's output in ``workdir/console-N.log``."""
        if self.running():
            raise self.error(f"container {self.name} is already running")
        self.boots += 1
        with (self.workdir / f"console-{self.boots}.log").open("wb") as console:
            self._child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
                **popen,
            )
        return self._child

    def wait_booted(self, timeout: float, ready: Callable[[], bool], what: str) -> None:
        """Until ``ready()``; raises if nspawn exits first or ``timeout`` passes."""
        end = time.monotonic() + timeout
        while not ready():
            if not self.running():
                raise self.error(f"{self.name} stopped while booting:\n{self.console()}")
            if time.monotonic() > end:
                raise self.error(f"{self.name}: {what} after {timeout:.0f}s:\n{self.diagnose()}")
            time.sleep(0.1)

    # -- running ---------------------------------------------------------------------------

    def nspawn_pid(self) -> int | None:
        """The nspawn process, while it runs."""
        if self._child is None or self._child.poll() is not None:
            return None
        return self._child.pid

    def running(self) -> bool:
        return self.nspawn_pid() is not None

    def leader(self) -> int | None:
        """The container's PID 1 as seen from the host (the nspawn process's only child)."""
        pid = self.nspawn_pid()
        if pid is None:
            return None
        children = Path(f"/proc/{pid}/task/{pid}/children")
        with contextlib.suppress(OSError):
            pids = children.read_text().split()
            if pids:
                return int(pids[0])
        return None

    def run(self, *cmd: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command inside the container; its output and exit code come back."""
        leader = self.leader()
        if leader is None:
            raise self.error(f"container {self.name} is not running")
        return subprocess.run(
            [
                "env",
                "-i",
                INNER_PATH,
                *self.env,
                "nsenter",
                "--target",
                str(leader),
                "--all",
                "--",
                *cmd,
            ],
            capture_output=True,
            text=True,
            timeout=self.run_timeout if timeout is None else timeout,
            check=False,
        )

    def wait_exit(self, timeout: float) -> int:
        """Wait for nspawn to exit: EXIT_POWEROFF or EXIT_REBOOT (0 when this process did
        not start it and cannot read its status)."""
        if self._child is not None:
            return self._child.wait(timeout=timeout)
        end = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired("systemd-nspawn", timeout)
            time.sleep(0.1)
        return 0

    def kill(self) -> None:
        """Stop the container at once: SIGKILL to its PID 1 ends the whole PID namespace."""
        if not self.running():
            return
        leader = self.leader()
        if leader is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(leader, signal.SIGKILL)
        try:
            self.wait_exit(15)
        except subprocess.TimeoutExpired:
            pid = self.nspawn_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.wait_exit(15)

    # -- what happened inside --------------------------------------------------------------

    def console(self) -> str:
        logs = sorted(self.workdir.glob("console-*.log"))
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in logs)

    def diagnose(self) -> str:
        """What a boot that timed out shows: the console unless a subclass knows better."""
        return self.console()

    def journal(self, *args: str) -> list[dict[str, str]]:
        """Journal entries (JSON fields) from every boot of this container so far."""
        out = subprocess.run(
            ["journalctl", "-D", str(self.path("var/log/journal")), "-o", "json", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        entries = []
        for line in out.stdout.splitlines():
            entry = json.loads(line)
            if isinstance(entry.get("MESSAGE"), str):
                entries.append(entry)
        return entries

    def messages(self, unit: str) -> list[str]:
        return [e["MESSAGE"] for e in self.journal("-u", unit)]

    def journal_text(self, *args: str) -> str:
        out = subprocess.run(
            ["journalctl", "-D", str(self.path("var/log/journal")), "-o", "short-unix", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return out.stdout


def realtime(entry: dict[str, str]) -> float:
    """A journal entry's wall-clock time in seconds."""
    return int(entry["__REALTIME_TIMESTAMP"]) / 1e6
