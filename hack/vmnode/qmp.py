"""The two JSON sockets of a qemu VM: QMP (the machine: power button, status) and the QEMU
guest agent (commands run inside the guest and their output).

Both speak one JSON object a line: ``{"execute": CMD, "arguments": {...}}`` answered by
``{"return": ...}`` or ``{"error": {...}}``. QMP also sends asynchronous events (skipped
here) and wants ``qmp_capabilities`` first; the guest agent may hold stale answers from an
earlier client, so a ``guest-sync`` with a fresh id comes first.
"""

from __future__ import annotations

import base64
import json
import random
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class QmpError(RuntimeError):
    """A socket could not be reached, or a command failed."""


class JsonSocket:
    def __init__(self, path: Path, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError as exc:
            self.sock.close()
            raise QmpError(f"{path}: {exc}") from exc
        self.buf = b""

    def send(self, execute: str, arguments: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"execute": execute}
        if arguments:
            msg["arguments"] = arguments
        self.sock.sendall(json.dumps(msg).encode() + b"\n")

    def read(self) -> dict[str, Any]:
        while b"\n" not in self.buf:
            try:
                data = self.sock.recv(65536)
            except OSError as exc:
                raise QmpError(f"reading: {exc}") from exc
            if not data:
                raise QmpError("the socket closed")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        text = line.strip().lstrip(b"\xff")  # guest-sync-delimited's marker byte
        return json.loads(text) if text else self.read()

    def answer(self) -> Any:
        """The next reply that is not an event."""
        while True:
            msg = self.read()
            if "event" in msg:
                continue
            if "error" in msg:
                raise QmpError(f"{msg['error'].get('class')}: {msg['error'].get('desc')}")
            return msg.get("return")

    def close(self) -> None:
        self.sock.close()


def qmp(path: Path, execute: str, arguments: dict[str, Any] | None = None) -> Any:
    """One QMP command on a fresh connection (qemu serves one QMP client at a time)."""
    conn = JsonSocket(path, timeout=10)
    try:
        conn.read()  # the greeting
        conn.send("qmp_capabilities")
        conn.answer()
        conn.send(execute, arguments)
        return conn.answer()
    finally:
        conn.close()


@dataclass(frozen=True)
class Exec:
    returncode: int
    stdout: str
    stderr: str


def guest_ping(path: Path, timeout: float = 3.0) -> bool:
    """Whether the guest agent answers (it starts late in the boot)."""
    try:
        conn = _guest(path, timeout)
    except (QmpError, ValueError):
        return False
    conn.close()
    return True


def _guest(path: Path, timeout: float) -> JsonSocket:
    conn = JsonSocket(path, timeout)
    token = random.randrange(1 << 30)
    conn.send("guest-sync", {"id": token})
    try:
        while conn.answer() != token:  # answers left from an earlier client
            pass
    except BaseException:
        conn.close()
        raise
    return conn


def guest_clock_offset(path: Path) -> tuple[float, float]:
    """The guest's clock minus the host's, in seconds, and the round trip that bounds it.

    The guest's clock starts from the emulated RTC's whole seconds at each boot and drifts
    under TCG, so its journal's stamps differ from the host's clock by up to a second or
    more: a comparison across the two clocks needs this first."""
    conn = _guest(path, 10)
    try:
        before = time.time()
        conn.send("guest-get-time")
        guest = int(conn.answer()) / 1e9
        after = time.time()
    finally:
        conn.close()
    return guest - (before + after) / 2, after - before


def guest_exec(path: Path, argv: list[str], timeout: float) -> Exec:
    """Run ``argv`` in the guest (no shell) and wait for it; its output comes back."""
    conn = _guest(path, 10)
    try:
        conn.send("guest-exec", {"path": argv[0], "arg": argv[1:], "capture-output": True})
        pid = conn.answer()["pid"]
        end = time.monotonic() + timeout
        while True:
            conn.send("guest-exec-status", {"pid": pid})
            status = conn.answer()
            if status.get("exited"):
                return Exec(
                    int(status.get("exitcode", -1)),
                    _text(status.get("out-data")),
                    _text(status.get("err-data")),
                )
            if time.monotonic() > end:
                raise QmpError(f"{argv} still running in the guest after {timeout:.0f}s")
            time.sleep(0.2)
    finally:
        conn.close()


def _text(data: str | None) -> str:
    return base64.b64decode(data).decode(errors="replace") if data else ""
