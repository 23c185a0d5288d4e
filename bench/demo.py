"""The demo: a real node powers off under traffic, with nodeagent and then without.

    python -m bench.demo [--workdir DIR] [--timeline PATH]

Two real nodes (kubelet and containerd in systemd-nspawn), a Service of four pods spread over
them, a client sending ~50 requests/s and a few 20 s requests through a real kube-proxy
(hack/departure/scene.py). Node A powers off twice: first with the agent installed from its
.deb, then, on fresh nodes, without it. While each departure happens it prints what the
agent logs, the pods that go and the replacements that become Ready, and the requests so far;
then the totals side by side, and draws both departures on one timeline (requests and
failures per second, and when each thing happened: hack/departure/timeline.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the checkout is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hack import milestones, preflight
from hack.departure import timeline
from hack.departure.kinds import CONFIGS, Kind
from hack.departure.scene import Scene, SceneResult
from hack.departure.summary import summarize
from hack.kubeutil import WaitTimeout
from hack.localcluster.cluster import Cluster, ClusterError
from hack.nspawn import realtime

POLL_S = 0.5
TALLY_EVERY_S = 5.0
# The agent's journal lines worth a line of the demo each (INFO and up, not its heartbeat).
AGENT_SKIP = ("heartbeat", "loop reconcile failed", "waiting for")
BOLD, DIM, RED, GREEN, OFF = "\033[1m", "\033[2m", "\033[31m", "\033[32m", "\033[0m"


def say(text: str) -> None:
    print(text, flush=True)


@dataclass
class Narrator:
    """Prints one departure as it happens, from the agent's journal, the API and the
    client's results file; every source is polled, nothing waits without a deadline."""

    scene: Scene
    started: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _cursor: str = ""
    _ready: dict[str, str] = field(default_factory=dict)  # pod → node, Ready pods
    _read: int = 0  # bytes of the results file read so far
    _sent: int = 0
    _failed: int = 0
    _tally_at: float = 0.0
    _off: bool = False
    # The leaving node's pods and when a poll first saw each deleted (the agent's evictions).
    deleted: dict[str, float] = field(default_factory=dict)

    def start(self, started: float) -> None:
        self.started = started
        self._ready = placement(self.scene)
        self._tally_at = started + TALLY_EVERY_S
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            lines: list[tuple[float, str]] = []
            for poll in (self._agent, self._pods, self._node, self._requests, self._deleted):
                with contextlib.suppress(Exception):  # a missed poll is taken again
                    lines += poll()
            for at, text in sorted(lines):
                say(f"  {DIM}{at - self.started:+6.1f}s{OFF}  {text}")

    def _agent(self) -> list[tuple[float, str]]:
        if not self.scene.config.agent:
            return []
        args = ["-u", "nodeagent.service"]
        args += ["--after-cursor", self._cursor] if self._cursor else ["--since", "-10s"]
        out = []
        for entry in self.scene.leaving.journal(*args):
            self._cursor = entry.get("__CURSOR", self._cursor)
            message = entry["MESSAGE"]
            if realtime(entry) < self.started or any(s in message for s in AGENT_SKIP):
                continue
            if entry.get("SYSLOG_IDENTIFIER") == "systemd":
                out.append((realtime(entry), f"systemd {message}"))
                continue
            text = message.split(": ", 1)[1] if message.startswith(("INFO", "WARN")) else message
            out.append((realtime(entry), f"{BOLD}agent{OFF}  {text}"))
        return out

    def _node(self) -> list[tuple[float, str]]:
        if self._off or self.scene.leaving.running():
            return []
        self._off = True
        left = [n for n, node in self._ready.items() if node == self.scene.leaving.name]
        text = f"{BOLD}node{OFF}   {self.scene.leaving.name} is off"
        if left:
            text += f"; {len(left)} of its pods still Ready in the API: kube-proxy sends to them"
        return [(time.time(), text)]

    def _pods(self) -> list[tuple[float, str]]:
        now = time.time()
        ready = placement(self.scene)
        out = []
        for name, node in ready.items():
            if name not in self._ready:
                out.append((now, f"{GREEN}pod{OFF}    {name} Ready on {node}"))
        for name, node in self._ready.items():
            if name not in ready:
                out.append((now, f"pod    {name} on {node} no longer serves"))
        self._ready = ready
        return out

    def _requests(self) -> list[tuple[float, str]]:
        path = self.scene.workdir / "results" / "steady.jsonl"
        with path.open("rb") as f:
            f.seek(self._read)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._read += len(whole)
        for line in whole.splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                self._sent += 1
                self._failed += not row["ok"]
        now = time.time()
        if now < self._tally_at:
            return []
        self._tally_at = now + TALLY_EVERY_S
        colour = RED if self._failed else GREEN
        return [(now, f"{colour}client{OFF} {self._sent} requests so far, {self._failed} failed")]

    def _deleted(self) -> list[tuple[float, str]]:
        now = time.time()
        for pod in self.scene.pods():
            on_leaving = pod["spec"].get("nodeName") == self.scene.leaving.name
            if on_leaving and pod["metadata"].get("deletionTimestamp"):
                self.deleted.setdefault(pod["metadata"]["name"], now)
        return []


def placement(scene: Scene) -> dict[str, str]:
    """The service's Ready pods and their nodes."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in scene.ready_pods()}


def departure(cluster: Cluster, root: Path, config: str) -> tuple[dict[str, Any], timeline.Panel]:
    group = f"demo-{secrets.token_hex(2)}"
    agent = CONFIGS[config].agent
    say(f"\n{BOLD}== node {group}-a powers off, {'with' if agent else 'without'} nodeagent{OFF}")
    say(f"{DIM}booting two real nodes, the service and the client ...{OFF}")
    with Scene.up(cluster, root / group, group, CONFIGS[config], dnd=False) as scene:
        pods = placement(scene)
        say(f"Service {scene.service_ip}:80 → {len(pods)} pods: " + ", ".join(
            f"{n} on {node}" for n, node in sorted(pods.items())))  # fmt: skip
        say("client: 50 requests/s through kube-proxy, and 20 s requests in flight")
        narrator = Narrator(scene)

        def started(at: float) -> None:
            say(f"  {DIM}{0:+6.1f}s{OFF}  {BOLD}systemctl poweroff{OFF} on {scene.leaving.name}")
            narrator.start(at)

        try:
            result = scene.depart(Kind.POWEROFF, on_start=started)
        finally:
            narrator.stop()
        title = "with nodeagent" if agent else "without nodeagent"
        panel = timeline_panel(scene, result, narrator.deleted, title)
    cell = summarize(result)
    say(_verdict(cell))
    return cell, panel


def timeline_panel(scene: Scene, result: SceneResult, deleted: dict[str, float], title: str
                   ) -> timeline.Panel:  # fmt: skip
    """The departure on the timeline, with the agent's milestones read from the node's journal
    (off by now); without them (not readable) the picture lacks only their markers."""
    records: list[milestones.Record] = []
    if scene.config.agent:
        with contextlib.suppress(Exception):
            records = milestones.from_journal(scene.leaving.journal("-u", "nodeagent.service"))
    return timeline.departure_panel(title, result, records, deleted, scene.config.agent)


def _verdict(cell: dict[str, Any]) -> str:
    colour = RED if cell["failed"] or cell["long_cut"] else GREEN
    return (
        f"{colour}{cell['sent']} requests, {cell['failed']} failed "
        f"(longest outage {cell['longest_failure_s']} s); "
        f"{cell['long_completed']} long requests completed, {cell['long_cut']} cut{OFF}"
    )


@contextlib.contextmanager
def control_plane(root: Path) -> Iterator[Cluster]:
    say(f"{DIM}starting etcd, kube-apiserver, controller-manager and scheduler ...{OFF}")
    cluster = Cluster.start(root / "cluster")
    try:
        yield cluster
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    preflight.require("bench/demo.py", argv)
    parser = argparse.ArgumentParser(prog="hack/demo", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep the work files (journals) here")
    parser.add_argument(
        "--timeline", type=Path, help="the picture (SVG; PNG beside it; default: in the workdir)"
    )
    args = parser.parse_args(argv)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="nodeagent-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        with control_plane(root) as cluster:
            runs = [departure(cluster, root, config) for config in ("nodeagent", "none")]
    except (ClusterError, RuntimeError, TimeoutError, WaitTimeout) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    say(f"\n{BOLD}== the same poweroff, the same traffic{OFF}")
    for (cell, _), name in zip(runs, ("with nodeagent", "without"), strict=True):
        say(f"{name:>15}: {_verdict(cell)}")
    picture = args.timeline or root / "timeline.svg"
    timeline.dump([panel for _, panel in runs], picture.with_suffix(".json"))
    written = timeline.draw([panel for _, panel in runs], picture)
    say(f"timeline: {', '.join(map(str, written))}")
    say(f"{DIM}journals and client results: {root}{OFF}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
