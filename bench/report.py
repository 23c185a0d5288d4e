"""What the bench prints: times, where they went, and what each drain asked of the API."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import audit
from bench.drainers import REPO, Drain, Drainer
from bench.fleet import FleetRun, Shape

Out = Callable[[str], None]
STARTUP_RUNS = 5


def load_line(label: str) -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average ({label}): {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def scenario(name: str, drains: list[Drain], evicted: int, log: Path, out: Out) -> None:
    """Times (with the overhead over the floor), phases, and the API cost per evicted pod."""
    took = {d.drainer: d.seconds for d in drains}
    floor, agent = took.get(Drainer.FLOOR), took.get(Drainer.NODEAGENT)
    overhead = agent - floor if floor is not None and agent is not None else None
    out(f"\n{name}")
    out(
        f"  floor {_seconds(floor)} / nodeagent {_seconds(agent)} / "
        f"kubectl {_seconds(took.get(Drainer.KUBECTL))} / "
        f"overhead = nodeagent - floor {_seconds(overhead)}"
    )
    requests = audit.by_user(audit.read(log))
    _phases([(d.drainer.value, d) for d in drains], requests, out)
    _cost(drains, requests, evicted, out)


def _phases(
    rows: list[tuple[str, Drain]], requests: dict[str, list[audit.Request]], out: Out
) -> None:
    """Each drain's time from its process start to its first request, its first eviction,
    its last eviction, its last request and its exit (request times from the audit log)."""
    out(
        f"  {'phases (s)':18} {'to 1st req':>10} {'to 1st evict':>12} {'evicting':>9} "
        f"{'to last req':>11} {'to exit':>8}"
    )
    for label, d in rows:
        p = audit.phases(requests.get(d.user, []), d.started, d.ended)
        if p is None:
            out(f"  {label:18} (no eviction in the audit log)")
            continue
        out(
            f"  {label:18} {p.to_first_request:10.2f} {p.to_first_eviction:12.2f} "
            f"{p.evicting:9.2f} {p.to_last_request:11.2f} {p.to_exit:8.2f}"
        )


def _cost(
    drains: list[Drain], requests: dict[str, list[audit.Request]], evicted: int, out: Out
) -> None:
    per = {d.drainer: audit.cost(requests.get(d.user, [])) for d in drains}
    rows = sorted({key for counts in per.values() for key in counts})
    header = "".join(f"{d.drainer.value:>12}" for d in drains)
    out(f"  {'requests per evicted pod (' + str(evicted) + ')':44}{header}")
    for verb, resource in rows:
        cells = "".join(f"{per[d.drainer][(verb, resource)] / evicted:12.2f}" for d in drains)
        out(f"    {verb:8} {resource:32}{cells}")
    sums = [audit.summarize(requests.get(d.user, [])) for d in drains]
    out("  goal: at most 1 write per pod beyond the eviction, and no polling read")
    lines = {
        "writes beyond eviction, per pod": [f"{s.other_writes / evicted:.2f}" for s in sums],
        "reads (get/list), whole drain": [str(s.reads) for s in sums],
        "429 answers, whole drain": [str(s.throttled) for s in sums],
    }
    for label, values in lines.items():
        out(f"    {label:40}" + "".join(f"{value:>12}" for value in values))


def fleet(shape: Shape, runs: list[FleetRun], log: Path, out: Out) -> None:
    out(f"\nfleet: {shape.nodes} nodes x {shape.pods_per_node} pods, drained at once")
    slowest = {r.drainer: r.slowest for r in runs}
    requests = audit.by_user(audit.read(log))
    for r in runs:
        times = sorted(d.seconds for d in r.drains)
        sums = [audit.summarize(requests.get(d.user, [])) for d in r.drains]
        out(
            f"  {r.drainer.value:10} slowest {times[-1]:.2f}s, median "
            f"{statistics.median(times):.2f}s, fastest {times[0]:.2f}s; "
            f"429 answers {sum(s.throttled for s in sums)}, "
            f"writes beyond eviction {sum(s.other_writes for s in sums)}"
        )
    ends = []
    for r in runs:
        ranked = sorted(r.drains, key=lambda d: d.seconds)
        ends += [
            (f"{r.drainer.value} fastest", ranked[0]),
            (f"{r.drainer.value} slowest", ranked[-1]),
        ]
    _phases(ends, requests, out)
    agent, floor = slowest.get(Drainer.NODEAGENT), slowest.get(Drainer.FLOOR)
    if agent is not None and floor is not None:
        out(f"  slowest nodeagent / slowest floor = {agent / floor:.2f} (goal <= 1.2)")


def startup(out: Out) -> None:
    """Median wall time of each drainer's process up to the point where it would call the
    API: the floor's `--help`, and nodeagent's drain up to reading a kubeconfig that is
    not one (it exits 2 there, after importing what a drain imports first)."""
    with tempfile.TemporaryDirectory() as tmp:
        bogus = Path(tmp) / "empty.kubeconfig"
        bogus.write_text("{}\n")
        drain = ["-m", "nodeagent", "drain", "--node", "x", "--kubeconfig", str(bogus)]
        commands = {
            "python -c pass": ["-c", "pass"],
            "python -m bench.floor --help": ["-m", "bench.floor", "--help"],
            "nodeagent drain, to the config": drain,
        }
        out(f"\nstart-up: median wall time of {STARTUP_RUNS} runs of {sys.executable} ...")
        for label, args in commands.items():
            runs = [_wall([sys.executable, *args]) for _ in range(STARTUP_RUNS)]
            out(f"  {label:32} {statistics.median(runs) * 1000:6.0f} ms")
        out("  heaviest imports of that nodeagent drain (-X importtime, cumulative):")
        for name, micros in heaviest_imports(drain):
            out(f"    {name:40} {micros / 1000:6.0f} ms")


def _wall(cmd: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO, capture_output=True, check=False)
    return time.monotonic() - start


def heaviest_imports(args: list[str], top: int = 8) -> list[tuple[str, int]]:
    """The top-level imports (`import time:` lines at depth 0) by cumulative microseconds,
    with their total first."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    found = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or not parts[1].strip().isdigit():
            continue
        if not parts[2].startswith("  "):  # depth 0: " name" (one space after the bar)
            found.append((parts[2].strip(), int(parts[1])))
    ranked = sorted(found, key=lambda f: -f[1])[:top]
    return [("(all imports)", sum(m for _, m in found)), *ranked]
