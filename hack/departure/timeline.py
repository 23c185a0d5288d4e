"""One departure as a picture: requests and failures per second through the Service over
time, one panel per run (with the agent, without it), and a line for each thing that
happened: PrepareForShutdown, the cordon, each eviction, the endpoints removed, the lock
released, the power off.

    panel = Panel.from_requests("with nodeagent", rows, origin, markers)
    draw([with_agent, without], Path("timeline.svg"))     # and timeline.png beside it
    python -m hack.departure.timeline timeline.json timeline.svg    # again, from the data

The input is plain data: the client's per-request rows (hack/departure/loadgen.py: `start`
on the wall clock and `ok`) or per-second counts, and markers as (name, unix time). The
markers' helpers below read them from what a departure leaves (the agent's journal lines,
kube-proxy's endpoint samples). matplotlib draws, with the Agg backend (no display); it is
the `demo` extra's, never the agent's dependency, and is imported only to draw.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hack import milestones as ms

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from hack.departure.scene import SceneResult

ASKED = "poweroff asked"
PREPARE = "PrepareForShutdown"
CORDON = "cordon"
EVICTION = "eviction"
ENDPOINTS = "endpoints removed"
RELEASED = "lock released"
OFF = "power off"
# One colour and dash per kind, so the legend names each kind once however many lines it has.
STYLE = {
    ASKED: ("#555555", ":"),
    PREPARE: ("#1f77b4", "--"),
    CORDON: ("#9467bd", "--"),
    EVICTION: ("#ff7f0e", "-"),
    ENDPOINTS: ("#2ca02c", "-."),
    RELEASED: ("#17becf", "--"),
    OFF: ("#000000", "-"),
}
OTHER = ("#7f7f7f", ":")
# The agent's milestones that mark a moment, the first after the departure began of each
# (read as data, hack/milestones.py: a reworded log line moves no marker).
FIRST_MILESTONES = (
    (PREPARE, ms.SHUTDOWN_ANNOUNCED),
    (CORDON, ms.CORDONED),
    (RELEASED, ms.LOCK_RELEASED),
)
SENT_COLOUR, FAILED_COLOUR = "#4c72b0", "#d62728"


@dataclass(frozen=True)
class Marker:
    name: str
    at: float  # unix time


@dataclass(frozen=True)
class Panel:
    """One run: requests started in each second from `origin + first` on, how many of
    them failed, and the markers. `origin` (t = 0) is when the departure began."""

    title: str
    origin: float
    first: int
    sent: tuple[int, ...]
    failed: tuple[int, ...]
    markers: tuple[Marker, ...] = field(default=())

    @classmethod
    def from_requests(
        cls,
        title: str,
        rows: Iterable[Mapping[str, Any]],
        origin: float,
        markers: Iterable[Marker] = (),
    ) -> Panel:
        first, sent, failed = per_second(rows, origin)
        return cls(title, origin, first, tuple(sent), tuple(failed), tuple(markers))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Panel:
        markers = tuple(Marker(m["name"], float(m["at"])) for m in data.get("markers", ()))
        return cls(data["title"], float(data["origin"]), int(data["first"]),
                   tuple(data["sent"]), tuple(data["failed"]), markers)  # fmt: skip


def per_second(
    rows: Iterable[Mapping[str, Any]], origin: float
) -> tuple[int, list[int], list[int]]:
    """Requests started in each whole second from `origin` (the first such second's offset,
    then counts, a second without requests a zero) and how many of those failed."""
    seen = [(math.floor(float(r["start"]) - origin), bool(r["ok"])) for r in rows]
    if not seen:
        return 0, [], []
    first = min(s for s, _ in seen)
    sent = [0] * (max(s for s, _ in seen) - first + 1)
    failed = list(sent)
    for second, ok in seen:
        sent[second - first] += 1
        failed[second - first] += not ok
    return first, sent, failed


def milestone_markers(records: Sequence[ms.Record], since: float) -> list[Marker]:
    """From the agent's milestones: the first shutdown announced, cordon and lock release at
    or after `since`, and each eviction, when the agent's request for it was answered."""
    found = [
        Marker(name, at)
        for name, milestone in FIRST_MILESTONES
        if (at := ms.when(sorted(records, key=lambda r: r.time), milestone, since)) is not None
    ]
    return found + [Marker(EVICTION, r.time) for r in records if r.matches(ms.EVICTED, since, {})]


def endpoints_removed(
    changes: Sequence[tuple[float, Sequence[str]]], ips: Collection[str], since: float
) -> Marker | None:
    """The first of kube-proxy's endpoint samples (when they changed, `ip:port` each) at or
    after `since` that routes to none of the departed pods' `ips`."""
    for at, endpoints in changes:
        if at >= since and not {e.rsplit(":", 1)[0] for e in endpoints} & set(ips):
            return Marker(ENDPOINTS, at)
    return None


def departure_panel(
    title: str,
    result: SceneResult,
    milestones: Sequence[ms.Record],
    deleted: Mapping[str, float],
    agent: bool,
) -> Panel:
    """A departure of hack/departure/scene.py on the timeline: its steady requests, the
    poweroff asked, the agent's `milestones` (each eviction among them), else each of the
    leaving node's pods `deleted` (name: when a poll first saw its deletion, up to its
    interval late), kube-proxy's endpoints without the departed pods, and the power off."""
    start = result.started
    markers = [Marker(ASKED, result.poweroff_at or start), *milestone_markers(milestones, start)]
    if not any(m.name == EVICTION for m in markers):  # no agent, or its journal unreadable
        deletion = EVICTION if agent else "pod deleted"
        markers += [Marker(deletion, at) for at in deleted.values()]
    removed = endpoints_removed(result.endpoints, result.leaving_ips, start)
    markers += [removed] if removed is not None else []
    markers += [Marker(OFF, result.off)] if result.off is not None else []
    return Panel.from_requests(title, result.steady, start, markers)


# ---- drawing ---------------------------------------------------------------------------------


def draw(panels: Sequence[Panel], svg: Path, png: bool = True) -> list[Path]:
    """The panels stacked on one time axis, written as `svg` (text kept as text, the ids
    stable) and, with `png`, as the PNG beside it. Returns the files written."""
    import matplotlib
    from matplotlib.figure import Figure

    # Text kept as text (searchable, smaller), ids the same from run to run.
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "nodeagent-timeline", "font.size": 9}
    ):
        fig = Figure(figsize=(11, 0.8 + 2.9 * len(panels)), layout="constrained")
        axes = fig.subplots(len(panels), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
        for index, (ax, panel) in enumerate(zip(axes, panels, strict=True)):
            _panel(ax, panel, index)
        # After every panel: a limit set while drawing the first would cut the others' peaks.
        top = max((n for p in panels for n in p.sent), default=1)
        axes[0].set_ylim(0, top * 1.08)
        axes[-1].set_xlabel("seconds from the poweroff")
        svg.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(svg, format="svg", metadata={"Date": None})
        written = [svg]
        if png:
            written.append(svg.with_suffix(".png"))
            fig.savefig(written[-1], format="png", dpi=110)
    return written


def _panel(ax: Axes, panel: Panel, index: int) -> None:
    x = [panel.first + k for k in range(len(panel.sent) + 1)]
    # A closing step: the last second drawn as wide as the others.
    sent, failed = [*panel.sent, *panel.sent[-1:]], [*panel.failed, *panel.failed[-1:]]
    ax.step(x, sent, where="post", color=SENT_COLOUR, linewidth=1.4, label="requests / s",
            gid=f"sent-{index}")  # fmt: skip
    ax.fill_between(x, failed, step="post", color=FAILED_COLOUR, alpha=0.3, linewidth=0)
    ax.step(x, failed, where="post", color=FAILED_COLOUR, linewidth=1.4, label="failed / s",
            gid=f"failed-{index}")  # fmt: skip
    for name, group in _kinds(panel.markers):
        colour, dash = STYLE.get(name, OTHER)
        for k, marker in enumerate(group):
            ax.axvline(marker.at - panel.origin, color=colour, linestyle=dash, linewidth=1.2,
                       label=_legend(name, group, panel.origin) if k == 0 else None,
                       gid=f"marker-{index}-{_slug(name)}-{k}")  # fmt: skip
    total, lost = sum(panel.sent), sum(panel.failed)
    ax.set_title(f"{panel.title}: {total} requests, {lost} failed", loc="left",
                 color=FAILED_COLOUR if lost else "#222222", fontweight="bold")  # fmt: skip
    ax.set_ylabel("requests per second")
    ax.grid(alpha=0.25)
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False, fontsize=8)


def _kinds(markers: Iterable[Marker]) -> list[tuple[str, list[Marker]]]:
    """Markers grouped by name, each group in time order, the groups by their first."""
    groups: dict[str, list[Marker]] = {}
    for m in sorted(markers, key=lambda m: m.at):
        groups.setdefault(m.name, []).append(m)
    return list(groups.items())


def _legend(name: str, group: Sequence[Marker], origin: float) -> str:
    first, last = group[0].at - origin, group[-1].at - origin
    if len(group) == 1:
        return f"{name} {first:+.2f} s"
    return f"{name} x{len(group)} {first:+.2f} to {last:+.2f} s"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower())


# ---- the data as JSON, and drawing it again --------------------------------------------------


def dump(panels: Sequence[Panel], path: Path) -> None:
    path.write_text(json.dumps({"panels": [asdict(p) for p in panels]}, indent=1) + "\n")


def load(path: Path) -> list[Panel]:
    return [Panel.from_dict(p) for p in json.loads(path.read_text())["panels"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".venv/bin/python -m hack.departure.timeline",
        description="draw a departure's timeline",
    )
    parser.add_argument("data", type=Path, help="the timeline's JSON (bench/demo.py writes it)")
    parser.add_argument("svg", type=Path, help="the SVG to write (the PNG goes beside it)")
    parser.add_argument("--no-png", dest="png", action="store_false")
    args = parser.parse_args(argv)
    try:
        panels = load(args.data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {args.data}: not a timeline's data ({exc})", file=sys.stderr)
        return 2
    if importlib.util.find_spec("matplotlib") is None:
        print(
            "error: drawing needs matplotlib: run hack/setup, then .venv/bin/python",
            file=sys.stderr,
        )
        return 69  # EX_UNAVAILABLE, as hack/preflight.py says a missing tool
    for path in draw(panels, args.svg, args.png):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
