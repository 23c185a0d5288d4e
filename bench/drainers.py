"""The three drainers the bench compares, each run as its own process under its own name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from hack.auditlog import DRAINERS
from hack.drainphases import own_phases
from hack.localcluster.cluster import Cluster

REPO = Path(__file__).resolve().parent.parent
DEADLINE = 300


class Drainer(Enum):
    FLOOR = "floor"
    FLOOR_EVENTS = "floor+events"  # the floor plus one Event per evicted pod
    NODEAGENT = "nodeagent"
    KUBECTL = "kubectl"


def turn(drainers: Sequence[Drainer], round_no: int) -> list[Drainer]:
    """The order of one round: each round starts with the next drainer, so that none always
    runs first on a shared machine; kubectl, the slow reference, runs last and only once."""
    quick = [d for d in drainers if d is not Drainer.KUBECTL]
    k = round_no % len(quick)
    slow = [Drainer.KUBECTL] if round_no == 0 and Drainer.KUBECTL in drainers else []
    return quick[k:] + quick[:k] + slow


@dataclass(frozen=True)
class Identity:
    user: str
    kubeconfig: Path
    output: Path | None  # where to keep the drain's stdout and stderr


class Identities:
    """A client certificate per drain (admin rights, audited group), so the audit log
    tells one drain's requests from every other's by user name alone."""

    def __init__(self, cluster: Cluster, directory: Path, keep: Path | None = None) -> None:
        self.cluster = cluster
        self.directory = directory
        self.keep = keep  # where each drain's output goes, if anywhere

    def mint(self, drainer: Drainer, node: str) -> Identity:
        stem = drainer.value.replace("+", "-")  # openssl's -subj reads "+" as an RDN separator
        user = f"bench:{stem}:{node}"
        path = self.directory / f"{stem}-{node}.kubeconfig"
        self.cluster.mint_kubeconfig(user, ["system:masters", DRAINERS], path)
        output = self.keep / f"{stem}-{node}.log" if self.keep else None
        return Identity(user, path, output)


@dataclass(frozen=True)
class Drain:
    """One timed drain: wall-clock start and end (the audit log's clock) of its process."""

    drainer: Drainer
    node: str
    namespace: str  # where the node's evicted pods live, and no other node's
    user: str
    started: float
    ended: float
    returncode: int
    said: str  # the drainer's first line of output: its summary, or why it failed
    cpu: float  # the process's CPU seconds, user and system
    # nodeagent's own account of its time, phase by phase (its summary's "phases:" line)
    phases: tuple[tuple[str, float], ...] = ()

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def failed(self) -> bool:
        return self.returncode != 0


def command(drainer: Drainer, node: str, kubeconfig: Path, kubectl: Path) -> list[str]:
    kc = str(kubeconfig)
    if drainer in (Drainer.FLOOR, Drainer.FLOOR_EVENTS):
        events = ["--events"] if drainer is Drainer.FLOOR_EVENTS else []
        return [sys.executable, "-m", "bench.floor", "--node", node, "--kubeconfig", kc, *events]
    if drainer is Drainer.NODEAGENT:
        return [
            *(sys.executable, "-m", "nodeagent", "drain", "--node", node),
            *("--kubeconfig", kc, "--deadline", f"{DEADLINE}s"),
        ]
    return [
        *(str(kubectl), "--kubeconfig", kc, "drain", node),
        *("--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={DEADLINE}s"),
    ]


def run_drain(drainer: Drainer, node: str, namespace: str, who: Identity, kubectl: Path) -> Drain:
    """Run one drain to its end. A failed drain is a figure too (reported, not raised)."""
    cmd = command(drainer, node, who.kubeconfig, kubectl)
    with tempfile.TemporaryFile("w+") as output:
        started = time.time()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
        killer = threading.Timer(DEADLINE + 60, os.kill, (proc.pid, signal.SIGKILL))
        killer.daemon = True
        killer.start()
        try:
            # wait4, not wait: the process's own CPU time, which a fleet of drains
            # sharing the machine's cores is made of.
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        finally:
            killer.cancel()
        ended = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        text = output.read()
    if who.output:
        who.output.write_text(f"$ {' '.join(cmd)}\n{text}")
    said = next(iter(text.strip().splitlines()), "")
    cpu = usage.ru_utime + usage.ru_stime
    return Drain(
        drainer,
        node,
        namespace,
        who.user,
        started,
        ended,
        proc.returncode,
        said,
        cpu,
        own_phases(text),
    )
