"""amazon-ec2-metadata-mock (AEMM) served on loopback: the EC2 instance metadata service as
aws-node-termination-handler's own tests run it (built by hack/build-aemm.sh).

Two traps its notes name: only the first two client addresses get events unless
``--mock-ip-count -1``; the Spot notice's time moves with every request unless pinned
with ``spot --time``.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from hack.agentproc import free_port
from hack.kubeutil import wait_until

REPO = Path(__file__).resolve().parent.parent


def binary() -> str:
    """The mock's path, built (and cached) on first use."""
    out = subprocess.run(
        [str(REPO / "hack" / "build-aemm.sh")], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class Aemm:
    """One mock process; `args` are its command and flags (e.g. ["spot", "-t", ...]);
    `port`: the port of an earlier mock, to be that endpoint with other answers."""

    def __init__(
        self, args: list[str], log: Path, imdsv2: bool = True, port: int | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        flags = ["-n", "127.0.0.1", "-p", str(self.port), "-x", "-1"]
        self.log = log
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [binary(), *args, *flags, *(["-I"] if imdsv2 else [])],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._answers, 15, "the metadata mock to answer")

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the metadata mock exited with {self.proc.returncode}")
        req = urllib.request.Request(
            f"{self.url}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
        )
        try:
            with urllib.request.urlopen(req, timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def reads(self, path: str) -> int:
        """How many GETs of `path` the log holds: the mock logs every request it takes, so
        a test can wait for the agent's next readings instead of sleeping."""
        return self.log.read_text(errors="replace").count(f"GET {path} ")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
