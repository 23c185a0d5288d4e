"""`nodeagent run` as a real child process, with its config, log and metrics port."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hack import milestones as ms
from hack.kubeutil import NODEAGENT, wait_until

# The host has no logind for the agent to lock, and SIGTERM in a test is a plain
# kill: nothing here may drain by accident, and no request may reach a real cloud's
# metadata endpoint (a test that wants warnings points the agent at its own mock).
BASE_CONFIG: dict[str, dict[str, Any]] = {
    "shutdown": {"use_logind": False, "unknown": "none", "stop": "none"},
    "warnings": {"cloud": "off"},
    "uncordon": {"settle": "0s"},
    "drain": {"deadline": "60s"},
    "reporting": {"heartbeat_interval": "60s"},
}


# The log as JSON lines: the agent's milestones as data (AgentProcess.milestones).
JSON_LOG: dict[str, dict[str, Any]] = {"": {"log_format": "json"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toml(config: dict[str, dict[str, Any]]) -> str:
    """A config file from {section: {key: value}} (strings, bools, ints, string lists);
    section "" holds the top-level keys."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    out = [f"{k} = {value(v)}" for k, v in config.get("", {}).items()]  # top-level keys
    for section, keys in config.items():
        if section:
            out.append(f"[{section}]")
            out += [f"{k} = {value(v)}" for k, v in keys.items()]
    return "\n".join(out) + "\n"


def merged(*configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for cfg in configs:
        for section, keys in cfg.items():
            out.setdefault(section, {}).update(keys)
    return out


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    log: Path
    port: int

    @classmethod
    def start(
        cls,
        workdir: Path,
        kubeconfig: str | Path | None,
        node: str,
        config: dict[str, dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
        *,
        name_node: bool = True,
    ) -> AgentProcess:
        """Start `nodeagent run`; without a kubeconfig (None) or with `name_node` False the
        agent finds its credentials and node name by itself."""
        port = free_port()
        cfg = merged(BASE_CONFIG, {"reporting": {"metrics_address": f"127.0.0.1:{port}"}})
        cfg = merged(cfg, config or {})
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"{node}.toml"
        path.write_text(toml(cfg))
        log = workdir / f"{node}.log"
        # One agent per node, and each test agent is a node of its own.
        lock = {"NODEAGENT_LOCK_FILE": str(workdir / f"{node}.lock")}
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
        env = inherited | lock | (env or {})
        args = [*NODEAGENT, "run", "-v", "--config", str(path)]
        args += ["--node", node] if name_node else []
        args += ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []
        with log.open("ab") as fh:
            proc = subprocess.Popen(
                args,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
            )
        agent = cls(proc, log, port)
        wait_until(lambda: agent.healthz()[0] in (200, 503), 20, "the agent's HTTP server")
        return agent

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError:
            return 0, ""

    def healthz(self) -> tuple[int, str]:
        return self.get("/healthz")

    def metric(self, name: str, **labels: str) -> float:
        """One sample from /metrics (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "")
        m = re.search(rf"^{pattern} (\S+)$", self.get("/metrics")[1], re.M)
        return float(m.group(1)) if m else 0.0

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def milestones(self) -> list[ms.Record]:
        """The milestones of its log so far: an agent started with JSON_LOG has them."""
        return ms.from_lines(self.output().splitlines())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)
