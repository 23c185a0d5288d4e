"""A reading of the cloud's warnings is all or nothing per item, and doubts count per streak.

The tables are the pure functions of nodeagent/cloud/reading.py. Then the warnings loop
against loopback endpoints (hack/cloudfakes.py) that answer badly while a warning stands:
what the loop hands on never loses the standing notice and never gains one, each streak
of doubts is one line and one count, and a reply trickling a byte a second costs one
request deadline. The same bad answers against a real agent and the real API server are
in tests/test_cloud_warnings.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from hack.aemm import rfc3339
from hack.cloudfakes import FakeEndpoint, Fault, GceMetadataFake, Reply
from hack.kubeutil import wait_until
from nodeagent import metrics
from nodeagent.cloud import aws, gcp
from nodeagent.cloud.http import Error, MetadataError, request
from nodeagent.cloud.reading import Item, merge, standing, streaks
from nodeagent.cloud.watcher import WarningWatcher
from nodeagent.config import WarningsConfig
from nodeagent.context import Context
from nodeagent.kube.client import request_timeouts
from nodeagent.types import Cloud, Notice, WarningKind

NOW = 1_800_000_000.0


def notice(event_id: str) -> Notice:
    return Notice(Cloud.AWS, WarningKind.MAINTENANCE, event_id, "system-reboot", NOW + 600, NOW)


SPOT = Notice(Cloud.AWS, WarningKind.INTERRUPTION, "spot-itn-terminate", "t", NOW + 120, NOW)
E1, E2 = notice("e1"), notice("e2")
BAD = MetadataError(Error.MALFORMED, "bad")
LATE = MetadataError(Error.TIMEOUT, "late")


def doubt(key: str, why: MetadataError = BAD) -> Item:
    return Item(key, doubt=why)


def listing(*ids: str) -> Item:
    return Item("scheduled", entries=tuple(f"scheduled/{i}" for i in ids))


# -- all or nothing, per item -----------------------------------------------------------

MERGES = [
    # (what stands before, the reading, what stands after)
    ("idle, spot doubted", {}, [doubt("spot")], ()),
    ("spot stands, spot doubted", {"spot": (SPOT,)}, [doubt("spot")], (SPOT,)),
    ("spot stands, read 404", {"spot": (SPOT,)}, [Item("spot")], ()),
    ("idle, spot read", {}, [Item("spot", (SPOT,))], (SPOT,)),
    ("spot stands, another item doubted", {"spot": (SPOT,)}, [doubt("asg")], (SPOT,)),
    (
        "event stands, the list doubted",
        {"scheduled": (), "scheduled/e1": (E1,)},
        [doubt("scheduled")],
        (E1,),
    ),
    (
        "event stands, listed but doubted (a time far off)",
        {"scheduled": (), "scheduled/e1": (E1,)},
        [listing("e1"), doubt("scheduled/e1")],
        (E1,),
    ),
    (
        "event stands, gone from a believed list",
        {"scheduled": (), "scheduled/e1": (E1,)},
        [listing()],
        (),
    ),
    (
        "event stands, listed canceled",
        {"scheduled": (), "scheduled/e1": (E1,)},
        [listing("e1"), Item("scheduled/e1")],
        (),
    ),
    ("idle, a new event doubted", {}, [listing("e2"), doubt("scheduled/e2")], ()),
    (
        "one event doubted, another read",
        {"scheduled": (), "scheduled/e1": (E1,)},
        [listing("e1", "e2"), doubt("scheduled/e1"), Item("scheduled/e2", (E2,))],
        (E1, E2),
    ),
]


@pytest.mark.parametrize(
    ("state", "reading", "after"), [m[1:] for m in MERGES], ids=[m[0] for m in MERGES]
)
def test_a_doubted_item_keeps_its_last_believed_state(
    state: dict[str, tuple[Notice, ...]], reading: list[Item], after: tuple[Notice, ...]
) -> None:
    assert standing(merge(state, reading)) == after


# -- doubts per streak ------------------------------------------------------------------

STREAKS = [
    # (readings, the keys starting a streak per reading, the keys ending one per reading)
    (
        "one streak",
        [[doubt("spot")], [doubt("spot")], [doubt("spot")]],
        [["spot"], [], []],
        [[], [], []],
    ),
    (
        "a good reading between: two streaks",
        [[doubt("spot")], [Item("spot")], [doubt("spot")]],
        [["spot"], [], ["spot"]],
        [[], ["spot"], []],
    ),
    (
        "another kind of doubt: a new streak",
        [[doubt("spot")], [doubt("spot", LATE)], [doubt("spot", LATE)]],
        [["spot"], ["spot"], []],
        [[], [], []],
    ),
    (
        "items each their own",
        [[doubt("spot"), Item("asg")], [doubt("spot"), doubt("asg")]],
        [["spot"], ["asg"]],
        [[], []],
    ),
    (
        "an entry gone from its list ends its streak unsaid",
        [
            [listing("e1"), doubt("scheduled/e1")],
            [listing()],
            [listing("e1"), doubt("scheduled/e1")],
        ],
        [["scheduled/e1"], [], ["scheduled/e1"]],
        [[], [], []],
    ),
]


@pytest.mark.parametrize(
    ("readings", "starts", "ends"), [s[1:] for s in STREAKS], ids=[s[0] for s in STREAKS]
)
def test_one_line_and_one_count_per_streak(
    readings: list[list[Item]], starts: list[list[str]], ends: list[list[str]]
) -> None:
    doubting: dict[str, Error] = {}
    for reading, start, end in zip(readings, starts, ends, strict=True):
        doubting, started, ended = streaks(doubting, reading)  # type: ignore[assignment]
        assert [i.key for i in started] == start
        assert ended == end


# -- requests under a deadline ------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "connect", "read"),
    [
        (None, 3.0, 15.0),  # no deadline: the client's own
        (30.0, 3.0, 7.5),  # a 30 s shutdown budget: a quarter of it
        (8.0, 2.0, 2.0),
        (2.0, 1.0, 1.0),  # never less than a second...
        (0.5, 0.5, 0.5),  # ...unless less is left
    ],
)
def test_request_timeouts_fit_in_the_time_left(
    left: float | None, connect: float, read: float
) -> None:
    got = (3.0, 15.0) if left is None else request_timeouts(3.0, 15.0, left)
    assert got == (connect, read)


# -- the loop against endpoints answering badly -------------------------------------------


@dataclass
class Run:
    watcher: WarningWatcher
    ctx: Context
    heard: list[tuple[float, tuple[Notice, ...]]] = field(default_factory=list)

    def ids(self) -> list[str]:
        return [n.event_id for n in self.heard[-1][1]] if self.heard else []

    def since(self, t: float) -> list[list[str]]:
        return [[n.event_id for n in h] for at, h in list(self.heard) if at >= t]


def count(cloud: Cloud, error: Error) -> float:
    labels = {"cloud": cloud.value, "error": error.value}
    return metrics.enable().get_sample_value("nodeagent_cloud_metadata_errors_total", labels) or 0.0


@pytest.fixture
def loop() -> Iterator:  # type: ignore[type-arg]
    runs: list[Run] = []

    def start(cloud: Cloud, url: str) -> Run:
        cfg = WarningsConfig(cloud=cloud, metadata_url=url)
        run = Run(WarningWatcher(cfg, lambda n: None, error_wait=0.2), Context.background())
        run.watcher.heard = lambda n: run.heard.append((time.monotonic(), n))
        args = (run.ctx, lambda: None, lambda: None)
        threading.Thread(target=run.watcher.run, args=args, daemon=True).start()
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.ctx.cancel()


def await_reads(fake: FakeEndpoint, path: str, more: int) -> None:
    """Until the endpoint has had `more` further GETs of `path`."""
    seen = fake.reads(path)
    wait_until(lambda: fake.reads(path) >= seen + more, 20, f"{more} more readings of {path}")


GCP_FAULTS = [Fault.ERROR, Fault.MALFORMED, Fault.RESET, Fault.TRICKLE, Fault.HANG]


@pytest.mark.parametrize("fault", GCP_FAULTS, ids=[f.value for f in GCP_FAULTS])
def test_gcp_bad_answers_while_preempted_change_nothing(loop, monkeypatch, fault: Fault) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(gcp.GceMetadata, "timeout", 1.0)  # a hang costs a second
    monkeypatch.setattr(gcp, "WAIT_SECONDS", 1)  # the long poll's end: readings 1 s apart
    fake = GceMetadataFake()
    try:
        fake.set(preempted="TRUE")
        run = loop(Cloud.GCP, fake.url)
        wait_until(lambda: run.ids() == ["preempted"], 10, "the preemption heard")
        fake.faulty = {gcp.PREEMPTED}
        fake.fault = fault
        cut = time.monotonic()
        await_reads(fake, gcp.PREEMPTED, 3)
        assert all(ids == ["preempted"] for ids in run.since(cut)), run.since(cut)
        fake.fault = Fault.NONE
        fake.set(preempted="FALSE")  # a believed FALSE ends it
        wait_until(lambda: run.ids() == [], 10, "the preemption over")
    finally:
        fake.stop()


class SpotImds(FakeEndpoint):
    """IMDS with a Spot notice whose time the test sets: IMDSv2 tokens, 404 elsewhere."""

    def __init__(self) -> None:
        self.time = NOW
        super().__init__()

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if method == "PUT":
            return 200, {}, b"token"
        if path != aws.SPOT:
            return 404, {}, b"404 - Not Found"
        notice = {"action": "terminate", "time": rfc3339(self.time)}
        return 200, {"Content-Type": "text/plain"}, json.dumps(notice).encode()


def test_a_stale_spot_notice_neither_ends_the_warning_nor_is_doubted_once_for_life(
    loop, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """The issue's first case: a standing Spot notice read once with its time hours past
    is not the warning's end; and every streak of such readings is said and counted, though
    every Spot notice has the same ID."""
    caplog.set_level(logging.INFO)
    fake = SpotImds()
    try:
        fake.time = time.time() + 120
        run = loop(Cloud.AWS, fake.url)
        wait_until(lambda: run.ids() == ["spot-itn-terminate"], 10, "the notice heard")
        before = count(Cloud.AWS, Error.IMPLAUSIBLE)
        for streak in (1, 2):
            fake.time = time.time() - 3 * 3600
            cut = time.monotonic()
            await_reads(fake, aws.SPOT, 2)
            assert all(ids == ["spot-itn-terminate"] for ids in run.since(cut))
            assert count(Cloud.AWS, Error.IMPLAUSIBLE) == before + streak
            fake.time = time.time() + 120
            await_reads(fake, aws.SPOT, 1)
        said = [r.message for r in caplog.records if "not believed (spot)" in r.message]
        assert len(said) == 2, said
        assert "passed more than 3600s ago" in said[0]
    finally:
        fake.stop()


def test_a_trickling_reply_costs_one_deadline() -> None:
    """Headers, then a byte a second: the request ends at its deadline, an error like any
    other, however long the body would trickle."""
    fake = GceMetadataFake()
    try:
        fake.fault = Fault.TRICKLE
        started = time.monotonic()
        with pytest.raises(MetadataError) as exc:
            request(fake.url, gcp.PREEMPTED, headers=gcp.HEADERS, timeout=2.0)
        took = time.monotonic() - started
        print(f"\na reply trickling a byte a second, 2 s deadline: failed after {took:.2f}s")
        assert exc.value.error is Error.TIMEOUT
        assert 2.0 <= took < 2.3, took
    finally:
        fake.stop()


@pytest.mark.parametrize("fault", [Fault.HANG, Fault.TRICKLE], ids=["hang", "trickle"])
def test_an_aws_reading_takes_one_deadline_however_many_items_fail(fault: Fault) -> None:
    """The four items due together are read at once: an endpoint that hangs or trickles
    holds the reading (and the next Spot reading) one request deadline, not four."""
    fake = SpotImds()
    try:
        fake.time = time.time() + 120
        fake.fault = fault
        imds = aws.Imds(fake.url)
        started = time.monotonic()
        items = imds.read(time.time())
        took = time.monotonic() - started
        print(f"\nan AWS reading of 4 items, each one {fault.value}: {took:.2f}s")
        assert sorted(i.key for i in items) == ["asg", "rebalance", "scheduled", "spot"]
        assert all(i.doubt is not None and i.doubt.error is Error.TIMEOUT for i in items)
        assert took < imds.timeout + 0.5, took
    finally:
        fake.stop()


@pytest.mark.parametrize("text", ["<html>metadata</html>", "", "Terminated please", "404"])
def test_an_asg_state_outside_the_contract_is_no_answer(text: str) -> None:
    """Read as "not Terminated", a proxy's page would end the warning: it is malformed."""
    with pytest.raises(MetadataError) as exc:
        aws.asg_notice(text, NOW)
    assert exc.value.error is Error.MALFORMED
