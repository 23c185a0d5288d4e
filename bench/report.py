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
from hack import auditlog

Out = Callable[[str], None]
STARTUP_RUNS = 5


def load_line(label: str) -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average ({label}): {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _by_drainer(drains: list[Drain]) -> dict[Drainer, list[Drain]]:
    out: dict[Drainer, list[Drain]] = {}
    for d in drains:
        out.setdefault(d.drainer, []).append(d)
    return out


def scenario(name: str, drains: list[Drain], evicted: int, log: Path, out: Out) -> None:
    """Median times (with the overhead over the floor), each drain's phases, and the API
    cost per evicted pod."""
    runs = _by_drainer(drains)
    took = {k: statistics.median(d.seconds for d in v) for k, v in runs.items()}
    floor, agent = took.get(Drainer.FLOOR), took.get(Drainer.NODEAGENT)
    overhead = agent - floor if floor is not None and agent is not None else None
    rounds = max(len(v) for v in runs.values())
    out(f"\n{name}" + (f" (median of {rounds} rounds)" if rounds > 1 else ""))
    out(
        f"  floor {_seconds(floor)} / nodeagent {_seconds(agent)} / "
        f"kubectl {_seconds(took.get(Drainer.KUBECTL))} / "
        f"overhead = nodeagent - floor {_seconds(overhead)}"
    )
    with_events = took.get(Drainer.FLOOR_EVENTS)
    if with_events is not None and floor is not None:
        out(
            f"  floor+events {_seconds(with_events)}: one Event per pod costs the floor "
            f"{_seconds(with_events - floor)}"
        )
    if rounds > 1:
        each = "; ".join(
            f"{k.value} " + " ".join(f"{d.seconds:.2f}" for d in v) for k, v in runs.items()
        )
        out(f"  each drain (s): {each}")
        _paired(runs, out)
    cpu = "; ".join(f"{k.value} " + " ".join(f"{d.cpu:.2f}" for d in v) for k, v in runs.items())
    out(f"  CPU of each drain's process (s): {cpu}")
    logged = auditlog.read(log)
    ordered = [d for v in runs.values() for d in v]
    _phases([(_label(d, runs), d) for d in ordered], logged, out)
    _own_phases(runs, took, out)
    _cost(runs, audit.by_user(logged), evicted, out)


def paired_overhead(runs: dict[Drainer, list[Drain]]) -> list[float]:
    """nodeagent's time minus the floor's, round by round. Rounds interleave the drainers,
    so each pair shared the machine's state of the moment: on shared cores the median of
    these differences is steadier than the difference of the two medians."""
    floors, agents = runs.get(Drainer.FLOOR, []), runs.get(Drainer.NODEAGENT, [])
    return [a.seconds - f.seconds for f, a in zip(floors, agents, strict=False)]


def _paired(runs: dict[Drainer, list[Drain]], out: Out) -> None:
    diffs = paired_overhead(runs)
    if len(diffs) < 2:
        return
    each = " ".join(f"{d:+.2f}" for d in diffs)
    out(f"  overhead paired by round: median {statistics.median(diffs):+.2f}s (each: {each})")


def _label(d: Drain, runs: dict[Drainer, list[Drain]]) -> str:
    mine = runs[d.drainer]
    return d.drainer.value if len(mine) == 1 else f"{d.drainer.value} #{mine.index(d) + 1}"


def _phases(rows: list[tuple[str, Drain]], requests: list[auditlog.Call], out: Out) -> None:
    """Each drain's time from its process start to its first request, its first eviction,
    its last eviction, the deletion of its last pod, its last request after that, and its
    exit (request times from the audit log)."""
    out(
        f"  {'phases (s)':24} {'to 1st req':>10} {'to 1st evict':>12} {'evicting':>9} "
        f"{'to all gone':>11} {'then reqs':>9} {'to exit':>8}"
    )
    mine = audit.by_user(requests)
    for label, d in rows:
        gone = auditlog.last_pod_gone(requests, d.namespace, d.started, d.ended)
        p = audit.phases(mine.get(d.user, []), gone, d.started, d.ended)
        if p is None:
            out(f"  {label:24} (no eviction or pod deletion in the audit log)")
            continue
        out(
            f"  {label:24} {p.to_first_request:10.2f} {p.to_first_eviction:12.2f} "
            f"{p.evicting:9.2f} {p.to_gone:11.2f} {p.gone_to_last_request:9.2f} {p.to_exit:8.2f}"
        )


def _own_phases(runs: dict[Drainer, list[Drain]], took: dict[Drainer, float], out: Out) -> None:
    """nodeagent's account of its own time (the phases its summary names), median and each
    drain, beside its process's wall time and the floor's and kubectl's totals."""
    drains = [d for d in runs.get(Drainer.NODEAGENT, []) if d.phases]
    if not drains:
        return
    names = list(dict.fromkeys(name for d in drains for name, _ in d.phases))
    out("  nodeagent's own phases (s; its summary's phases line: median, then each drain)")
    for name in names:
        each = [dict(d.phases).get(name, 0.0) for d in drains]
        runs_text = " ".join(f"{v:5.2f}" for v in each) if len(each) > 1 else ""
        out(f"    {name:22} {statistics.median(each):6.2f}   {runs_text}")
    sums = [sum(v for _, v in d.phases) for d in drains]
    out(f"    {'(sum of phases)':22} {statistics.median(sums):6.2f}")
    out(
        f"    {'(process, wall)':22} {statistics.median(d.seconds for d in drains):6.2f}   "
        f"floor {_seconds(took.get(Drainer.FLOOR))}, kubectl {_seconds(took.get(Drainer.KUBECTL))}"
    )


def _cost(
    runs: dict[Drainer, list[Drain]],
    requests: dict[str, list[auditlog.Call]],
    evicted: int,
    out: Out,
) -> None:
    """Requests per evicted pod by verb and resource (mean over a drainer's drains), with the
    count of one drain (the mean, rounded) in parentheses."""
    mine = {k: [r for d in v for r in requests.get(d.user, [])] for k, v in runs.items()}
    per = {k: audit.cost(v) for k, v in mine.items()}
    rows = sorted({key for counts in per.values() for key in counts})
    header = "".join(f"{k.value:>14}" for k in runs)
    out(f"  {'requests per evicted pod (per drain)':44}{header}")
    for verb, resource in rows:
        means = [per[k][(verb, resource)] / len(runs[k]) for k in runs]
        cells = "".join(f"{f'{n / evicted:.2f} ({n:.0f})':>14}" for n in means)
        out(f"    {verb:8} {resource:32}{cells}")
    each = {k: [audit.summarize(requests.get(d.user, []), d.namespace) for d in v]
            for k, v in runs.items()}  # fmt: skip
    sums = {k: _total(v) for k, v in each.items()}
    out(
        f"  goal: at most 1 write per pod beyond the eviction, and no polling read ({evicted} pods)"
    )
    lines = {
        "writes beyond eviction, per pod": [
            f"{sums[k].other_writes / len(runs[k]) / evicted:.2f}" for k in runs
        ],
        "  of which into the pods' namespace, per pod": [
            f"{sums[k].pod_writes / len(runs[k]) / evicted:.2f}" for k in runs
        ],
        "  of which elsewhere (the Node), per drain": [
            f"{(sums[k].other_writes - sums[k].pod_writes) / len(runs[k]):.0f}" for k in runs
        ],
        "reads (get/list), per drain": [f"{sums[k].reads / len(runs[k]):.0f}" for k in runs],
        "429 answers, per drain": [f"{sums[k].throttled / len(runs[k]):.0f}" for k in runs],
    }
    for label, values in lines.items():
        out(f"    {label:40}" + "".join(f"{value:>14}" for value in values))


def _total(sums: list[audit.Summary]) -> audit.Summary:
    return audit.Summary(
        evictions=sum(s.evictions for s in sums),
        other_writes=sum(s.other_writes for s in sums),
        pod_writes=sum(s.pod_writes for s in sums),
        reads=sum(s.reads for s in sums),
        throttled=sum(s.throttled for s in sums),
    )


def failures(drains: list[Drain], out: Out) -> int:
    """List the drains that failed (their times are in the figures above); 1 if any did."""
    failed = [d for d in drains if d.failed]
    if failed:
        out(f"\n{len(failed)} drains FAILED (their times are counted above):")
    for d in failed:
        out(
            f"  {d.drainer.value} on {d.node}: exit {d.returncode} after {d.seconds:.2f}s: {d.said}"
        )
    return 1 if failed else 0


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
