"""The resident agents of a fleet: one `nodeagent run` per simulated node, supervised.

Each agent runs as its node, with the kubelet's identity (the host form's default
credentials), and the shipped defaults but for what a shared host needs: no logind (this
machine has one session manager for all of them), SIGTERM not a departure (the evacuate
taint is the departure here), and a lock file, journal and metrics port of its own. Each
runs with the environment the shipped unit sets (systemd/nodeagent.service's Environment=),
which changes what the agent costs (MALLOC_ARENA_MAX).
An agent that exits is started again, as systemd's Restart= would, and counted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from hack.agentproc import free_port, toml
from hack.localcluster.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "nodeagent.service"
SUPERVISE_EVERY = 0.5
STOP_GRACE = 10.0


def config(workdir: Path, node: str, port: int) -> str:
    return toml(
        {
            "": {"node": node, "lock_file": str(workdir / f"{node}.lock")},
            "shutdown": {"use_logind": False, "stop": "none", "unknown": "none"},
            "warnings": {"cloud": "off"},
            "rejection": {"journal_dir": str(workdir / f"{node}.journal")},
            "reporting": {"metrics_address": f"127.0.0.1:{port}"},
        }
    )


def unit_environment(unit: Path = UNIT) -> dict[str, str]:
    """The variables a unit's Environment= lines set (space-separated NAME=VALUE pairs)."""
    env: dict[str, str] = {}
    for line in unit.read_text().splitlines():
        key, _, value = line.strip().partition("=")
        if key == "Environment":
            for pair in value.split():
                name, _, setting = pair.partition("=")
                env[name] = setting
    return env


@dataclass
class Resident:
    node: str
    kubeconfig: Path
    config: Path
    log: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0  # wall clock of the last start
    exits: list[int] = field(default_factory=list)  # exit codes, one per restart

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
        env |= unit_environment()
        cmd = [sys.executable, "-m", "nodeagent", "run", "--config", str(self.config)]
        cmd += ["--kubeconfig", str(self.kubeconfig)]
        with self.log.open("ab") as out:
            self.started = time.time()
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def cpu_seconds(self) -> float:
        """User and system CPU of the running process (0 when it is gone)."""
        try:
            times = psutil.Process(self.proc.pid).cpu_times() if self.proc else None
        except psutil.Error:
            return 0.0
        return times.user + times.system if times else 0.0

    def rss_mb(self) -> float:
        try:
            return psutil.Process(self.proc.pid).memory_info().rss / 2**20 if self.proc else 0.0
        except psutil.Error:
            return 0.0


class Residents:
    """N agents for N nodes, started together and restarted when one exits."""

    def __init__(self, cluster: Cluster, workdir: Path, nodes: list[str]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.agents: list[Resident] = []
        for node in nodes:  # minted before the start storm: openssl is not what is timed
            kubeconfig = cluster.mint_node_kubeconfig(node, workdir / f"{node}.kubeconfig")
            port = free_port()
            path = workdir / f"{node}.toml"
            path.write_text(config(workdir, node, port))
            self.agents.append(Resident(node, kubeconfig, path, workdir / f"{node}.log", port))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def start(self) -> float:
        """Start every agent at once; the wall-clock time the first one started."""
        began = time.time()
        for agent in self.agents:
            agent.start()
        self._watcher = threading.Thread(target=self._supervise, name="supervise", daemon=True)
        self._watcher.start()
        return began

    @property
    def restarts(self) -> int:
        with self._lock:
            return sum(len(a.exits) for a in self.agents)

    def exit_codes(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(a.node, code) for a in self.agents for code in a.exits]

    def _supervise(self) -> None:
        while not self._stop.wait(SUPERVISE_EVERY):
            for agent in self.agents:
                with self._lock:
                    if self._stop.is_set():
                        return
                    code = agent.proc.poll() if agent.proc else None
                    if code is not None:
                        agent.exits.append(code)
                        agent.start()

    def stop(self) -> None:
        """SIGTERM (a plain stop: [shutdown] stop = "none"), then SIGKILL after a grace."""
        with self._lock:
            self._stop.set()
        procs = [a.proc for a in self.agents if a.proc and a.proc.poll() is None]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def loop_failures(self) -> int:
        """Lines where an agent's loop failed and restarted itself, all agents."""
        total = 0
        for agent in self.agents:
            text = agent.log.read_text(errors="replace") if agent.log.exists() else ""
            total += text.count("restarting in")
        return total
