"""The departure's timeline picture (hack/departure/timeline.py): the per-second counts and
markers from what a departure leaves, then the SVG itself, read back as XML: each run's
series, every marker, and the failures where there were some."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from hack import milestones as ms
from hack.departure import timeline as tl
from hack.departure.scene import SceneResult
from hack.departure.timeline import Marker, Panel

SVG = "{http://www.w3.org/2000/svg}"
REPO = Path(__file__).resolve().parents[1]
# Recorded: `hack/demo --workdir DIR` at commit 603a5e0 on the 2-core machine (2026-11-29),
# the timeline.json it wrote beside its picture: 1448 requests, 0 failed with the agent;
# 2615, 555 failed without it.
RECORDED = REPO / "tests" / "data" / "demo-timeline.json"
T0 = 1_780_000_000.0


def rows(spans: list[tuple[float, float, bool]], rate: float = 50.0) -> list[dict[str, Any]]:
    """Loadgen rows (hack/departure/loadgen.py's fields) at `rate`/s over each span."""
    out = []
    for begin, end, ok in spans:
        n = round((end - begin) * rate)
        out += [{"start": T0 + begin + k / rate, "ok": ok, "mode": "new"} for k in range(n)]
    return out


@pytest.mark.parametrize(
    ("starts", "oks", "expected"),
    [
        ([], [], (0, [], [])),
        ([0.0, 0.5, 0.99], [True, False, True], (0, [3], [1])),
        ([-2.5, -0.1, 1.0], [True, True, False], (-3, [1, 0, 1, 0, 1], [0, 0, 0, 0, 1])),
        ([3.0, 5.2], [False, False], (3, [1, 0, 1], [1, 0, 1])),
    ],
)
def test_per_second(starts: list[float], oks: list[bool], expected: tuple[Any, ...]) -> None:
    data = [{"start": T0 + s, "ok": ok} for s, ok in zip(starts, oks, strict=True)]
    assert tl.per_second(data, T0) == expected


def test_milestone_markers_first_after_the_start_and_every_eviction() -> None:
    records = [
        ms.Record(ms.LOCK_RELEASED, T0 - 20),  # an earlier shutdown, cancelled
        ms.Record(ms.SHUTDOWN_ANNOUNCED, T0 + 0.05, {"source": "logind", "reason": "poweroff"}),
        ms.Record(ms.CORDONED, T0 + 0.2, {"reason": "poweroff"}),
        ms.Record(ms.EVICTED, T0 + 0.4, {"pod": "default/web-1"}),
        ms.Record(ms.EVICTED, T0 + 0.6, {"pod": "default/web-2"}),
        ms.Record(ms.LOCK_RELEASED, T0 + 9.9),
        ms.Record(ms.LOCK_RELEASED, T0 + 9.7),
    ]
    got = sorted((m.name, round(m.at - T0, 2)) for m in tl.milestone_markers(records, T0))
    want = [(tl.PREPARE, 0.05), (tl.CORDON, 0.2), (tl.EVICTION, 0.4), (tl.EVICTION, 0.6),
            (tl.RELEASED, 9.7)]  # fmt: skip
    assert got == sorted(want)


def test_endpoints_removed_when_none_of_the_pods_is_left() -> None:
    changes = [
        (T0 - 5, ["10.1.0.4:8080", "10.2.0.5:8080", "10.1.0.6:8080"]),
        (T0 + 1, ["10.2.0.5:8080", "10.1.0.6:8080"]),
        (T0 + 2, ["10.2.0.5:8080", "10.2.0.7:8080"]),
    ]
    marker = tl.endpoints_removed(changes, {"10.1.0.4", "10.1.0.6"}, T0)
    assert marker == Marker(tl.ENDPOINTS, T0 + 2)
    assert tl.endpoints_removed(changes[:2], {"10.1.0.4", "10.1.0.6"}, T0) is None


@pytest.mark.parametrize("agent", [True, False])
def test_departure_panel(agent: bool) -> None:
    """What bench/demo.py draws from scene.py's SceneResult: each source's marker, relative to
    the departure's start, and the client's steady requests only."""
    result = SceneResult(
        kind="poweroff", config="nodeagent" if agent else "none", started=T0, released=None,
        off=T0 + 20.0, steady=rows([(-6, 23, True)]), long=rows([(-1, 19, True)]),
        endpoints=[(T0 - 5, ["10.1.0.4:8080", "10.2.0.5:8080"]), (T0 + 2.1, ["10.2.0.5:8080"])],
        leaving_ips=["10.1.0.4"], leaving_pods=["web-1"], poweroff_at=T0 + 0.01,
    )  # fmt: skip
    records = [ms.Record(ms.SHUTDOWN_ANNOUNCED, T0 + 0.02), ms.Record(ms.CORDONED, T0 + 0.03),
               ms.Record(ms.EVICTED, T0 + 0.4), ms.Record(ms.LOCK_RELEASED, T0 + 19.7)]  # fmt: skip
    panel = tl.departure_panel("t", result, records if agent else [], {"web-1": T0 + 0.5}, agent)
    got = sorted((m.name, round(m.at - T0, 2)) for m in panel.markers)
    # The agent's own eviction time where it ran; else the poll's sight of the deletion.
    deleted = (tl.EVICTION, 0.4) if agent else ("pod deleted", 0.5)
    agents = [(tl.PREPARE, 0.02), (tl.CORDON, 0.03), (tl.RELEASED, 19.7)] if agent else []
    want = [(tl.ASKED, 0.01), (tl.ENDPOINTS, 2.1), (tl.OFF, 20.0), deleted, *agents]
    assert got == sorted(want)
    assert (panel.first, sum(panel.sent), sum(panel.failed)) == (-6, 29 * 50, 0)


def departure_panels() -> list[Panel]:
    """The demo's two runs as the client and the markers saw them: with the agent no request
    fails; without it, requests through kube-proxy to the powered-off node's pods fail until
    the endpoints go (about half of them: two of four pods)."""
    with_agent = Panel.from_requests(
        "with nodeagent",
        rows([(-6, 40, True)]),
        T0,
        [Marker(tl.ASKED, T0), Marker(tl.PREPARE, T0 + 0.08), Marker(tl.CORDON, T0 + 0.2),
         Marker(tl.EVICTION, T0 + 0.4), Marker(tl.EVICTION, T0 + 0.9),
         Marker(tl.ENDPOINTS, T0 + 1.3), Marker(tl.RELEASED, T0 + 9.8), Marker(tl.OFF, T0 + 10.6)],
    )  # fmt: skip
    half = rows([(1.5, 43, True)], rate=25) + rows([(1.5, 43, False)], rate=25)
    without = Panel.from_requests(
        "without nodeagent",
        rows([(-6, 1.5, True)]) + half + rows([(43, 46, True)]),
        T0,
        [Marker(tl.ASKED, T0), Marker(tl.OFF, T0 + 1.5), Marker(tl.ENDPOINTS, T0 + 43.2)],
    )
    return [with_agent, without]


def groups(svg: Path) -> dict[str, ET.Element]:
    return {g.get("id", ""): g for g in ET.parse(svg).getroot().iter(f"{SVG}g")}


def texts(svg: Path) -> str:
    return "\n".join("".join(t.itertext()) for t in ET.parse(svg).getroot().iter(f"{SVG}text"))


def ys(group: ET.Element) -> set[float]:
    """The y coordinates of a series' path (SVG y grows downwards: one value is flat)."""
    d = next(group.iter(f"{SVG}path")).get("d", "")
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", d)]
    return {round(y, 2) for y in numbers[1::2]}


def check_picture(svg: Path, panels: list[Panel]) -> None:
    """Each panel's series and every marker's line and name are in the SVG; the failures'
    series lies flat on the axis exactly where nothing failed."""
    ids, words = groups(svg), texts(svg)
    for index, panel in enumerate(panels):
        assert {f"sent-{index}", f"failed-{index}"} <= set(ids)
        for name, group in tl._kinds(panel.markers):
            for k in range(len(group)):
                assert f"marker-{index}-{tl._slug(name)}-{k}" in ids
            assert name in words
        assert f"{panel.title}: {sum(panel.sent)} requests, {sum(panel.failed)} failed" in words
        assert (len(ys(ids[f"failed-{index}"])) == 1) == (sum(panel.failed) == 0)


def test_recorded_demo(tmp_path: Path) -> None:
    panels = tl.load(RECORDED)
    assert [sum(p.failed) > 0 for p in panels] == [False, True]
    assert {tl.PREPARE, tl.CORDON, tl.EVICTION, tl.ENDPOINTS, tl.RELEASED, tl.OFF} <= {
        m.name for m in panels[0].markers
    }
    svg, png = tl.draw(panels, tmp_path / "demo.svg")
    check_picture(svg, panels)
    assert png.stat().st_size > 10_000


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return tl.draw(departure_panels(), tmp_path_factory.mktemp("timeline") / "departure.svg")


def test_svg_has_both_runs_and_every_marker(drawn: list[Path]) -> None:
    svg, png = drawn
    assert png.suffix == ".png" and png.read_bytes().startswith(b"\x89PNG")
    check_picture(svg, departure_panels())
    words = texts(svg)
    assert "eviction x2 +0.40 to +0.90 s" in words
    assert "PrepareForShutdown +0.08 s" in words


def test_failures_show_only_where_there_were_some(drawn: list[Path]) -> None:
    ids = groups(drawn[0])
    with_agent, without = departure_panels()
    assert sum(with_agent.failed) == 0 and sum(without.failed) == round(41.5 * 25)
    assert len(ys(ids["failed-0"])) == 1  # flat on the axis
    assert len(ys(ids["failed-1"])) > 1


def test_data_round_trip_and_cli(tmp_path: Path) -> None:
    panels = departure_panels()
    tl.dump(panels, tmp_path / "t.json")
    assert tl.load(tmp_path / "t.json") == panels
    cmd = [sys.executable, "-m", "hack.departure.timeline", str(tmp_path / "t.json"),
           str(tmp_path / "out" / "t.svg"), "--no-png"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert (out.returncode, out.stdout.strip()) == (0, str(tmp_path / "out" / "t.svg"))
    (tmp_path / "bad.json").write_text(json.dumps({"panels": [{"title": "x"}]}))
    cmd[3] = str(tmp_path / "bad.json")
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "not a timeline's data" in out.stderr
