"""A real OCI registry on loopback: go-containerregistry's `crane registry serve` (built by
hack/build-crane.sh), plain HTTP, blobs on disk, what hack/release pushes to in the tests and
what a real node's containerd pulls from (the node shares the host's network namespace).

    with LoopbackRegistry.start(tmp / "registry") as registry:
        registry.host          # "127.0.0.1:PORT"
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from hack.agentproc import free_port
from hack.deb import hack
from hack.kubeutil import wait_until

START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


def crane_binary() -> str:
    """crane's path, built (and cached) on first use."""
    return str(hack("build-crane.sh", 600)[0])


def unanswered(url: str, timeout: float = 2.0) -> str:
    """Why `url` is not an OCI distribution API root, or "" when it is: 200, or 401 from one
    that asks for a login first (the distribution spec's end-1)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return ""
    except urllib.error.HTTPError as exc:
        return "" if exc.code == 401 else f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        return str(exc.reason)
    except OSError as exc:
        return str(exc)


@dataclass
class LoopbackRegistry:
    """One `crane registry serve` process and its blob directory."""

    workdir: Path
    port: int
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "registry.log"

    @classmethod
    def start(cls, workdir: Path) -> LoopbackRegistry:
        registry = cls(Path(workdir), free_port())
        blobs = registry.workdir / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        cmd = [crane_binary(), "registry", "serve", "--address", registry.host, "--disk"]
        with registry.log.open("ab") as log:
            registry.proc = subprocess.Popen(
                [*cmd, str(blobs)], stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_until(registry._up, START_TIMEOUT, f"the registry on {registry.host}")
        except BaseException:
            registry.stop()
            raise
        return registry

    def _up(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"the registry exited: {self.log.read_text(errors='replace')}")
        return not unanswered(f"http://{self.host}/v2/")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)

    def __enter__(self) -> LoopbackRegistry:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
