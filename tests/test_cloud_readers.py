"""The warning loop against endpoints that answer badly: nothing acts on a bad answer.

Each endpoint here is a loopback server (hack/cloudfakes.py) told to fail one way: a 500,
a body outside its contract, no answer at all, a time far from the node's clock, an
event for other VMs. The loop (nodeagent/cloud/watcher.py) must hand on no warning, count
the error by kind, say it in one line, keep beating (a hang never stalls the agent), and
take up the endpoint's answers again once they are good.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from hack.cloudfakes import (
    AzureEvent,
    AzureScheduledEventsFake,
    FakeEndpoint,
    Fault,
    GceMetadataFake,
    Reply,
)
from hack.kubeutil import wait_until
from nodeagent import metrics
from nodeagent.cloud import aws, gcp
from nodeagent.cloud.watcher import WarningWatcher
from nodeagent.config import WarningsConfig
from nodeagent.context import Context
from nodeagent.types import Cloud, Notice, WarningKind


@dataclass
class Run:
    """One watcher loop on a thread, and what it handed on."""

    watcher: WarningWatcher
    ctx: Context
    heard: list[tuple[Notice, ...]] = field(default_factory=list)
    beats: list[float] = field(default_factory=list)

    def kinds(self) -> list[WarningKind]:
        return [n.kind for n in self.heard[-1]] if self.heard else []


def errors(cloud: Cloud, error: str) -> float:
    value = metrics.enable().get_sample_value(
        "nodeagent_cloud_metadata_errors_total", {"cloud": cloud.value, "error": error}
    )
    return value or 0.0


@pytest.fixture
def watch() -> Iterator[Run]:
    runs: list[Run] = []

    def start(cloud: Cloud, url: str) -> Run:
        ctx = Context.background()
        run = Run(
            WarningWatcher(
                WarningsConfig(cloud=cloud, metadata_url=url), lambda n: None, error_wait=0.2
            ),
            ctx,
        )
        run.watcher.heard = run.heard.append
        threading.Thread(
            target=run.watcher.run,
            args=(
                ctx,
                lambda: run.beats.append(time.monotonic()),
                lambda: run.beats.append(time.monotonic()),
            ),
            daemon=True,
        ).start()
        runs.append(run)
        return run

    yield start  # type: ignore[misc]
    for run in runs:
        run.ctx.cancel()


def test_azure_bad_answers_change_nothing(watch, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO)
    fake = AzureScheduledEventsFake("vm1")
    try:
        fake.add(AzureEvent("ev1", "Preempt", ["vm1"], time.time() + 30))
        fake.fault = Fault.ERROR
        run = watch(Cloud.AZURE, fake.url)
        wait_until(lambda: errors(Cloud.AZURE, "http") >= 1, 10, "the 500 counted")
        fake.fault = Fault.MALFORMED
        wait_until(lambda: errors(Cloud.AZURE, "malformed") >= 1, 15, "the bad body counted")
        assert run.heard == []  # nothing handed on while the answers were bad
        assert sum("HTTP 500" in r.message for r in caplog.records) == 1  # once per streak
        fake.fault = Fault.NONE
        wait_until(lambda: run.kinds() == [WarningKind.INTERRUPTION], 15, "the good answer")
        assert any("answers again" in r.message for r in caplog.records)
    finally:
        fake.stop()


def test_azure_events_for_other_vms_and_far_times(watch) -> None:  # type: ignore[no-untyped-def]
    fake = AzureScheduledEventsFake("vm1")
    try:
        before = errors(Cloud.AZURE, "other-vm"), errors(Cloud.AZURE, "implausible")
        fake.add(AzureEvent("theirs", "Preempt", ["vm2", "vm3"], time.time() + 30))
        # A Preempt two days ahead: a clock far off, or a garbled answer.
        fake.add(AzureEvent("far", "Preempt", ["vm1"], time.time() + 2 * 86400))
        run = watch(Cloud.AZURE, fake.url)
        wait_until(lambda: len(run.heard) >= 3, 15, "three readings")
        assert all(reading == () for reading in run.heard)
        assert errors(Cloud.AZURE, "other-vm") == before[0] + 1  # counted once, not per read
        assert errors(Cloud.AZURE, "implausible") == before[1] + 1
    finally:
        fake.stop()


def test_a_hanging_endpoint_never_stalls_the_loop(watch, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(gcp.GceMetadata, "timeout", 0.5)  # the read's wait, shortened
    fake = GceMetadataFake()
    try:
        fake.fault = Fault.HANG
        run = watch(Cloud.GCP, fake.url)
        wait_until(lambda: errors(Cloud.GCP, "timeout") >= 1, 15, "the timeout counted")
        beats = len(run.beats)
        wait_until(lambda: len(run.beats) > beats, 15, "the loop beating on")
        assert run.heard == []
    finally:
        fake.stop()


def test_gcp_long_poll_hears_a_change_at_once(watch) -> None:  # type: ignore[no-untyped-def]
    fake = GceMetadataFake()
    try:
        run = watch(Cloud.GCP, fake.url)
        wait_until(lambda: run.heard, 10, "the first reading")
        wait_until(
            lambda: any("wait_for_change=true" in r[2] for r in fake.requests), 10, "a long poll"
        )
        # Preempted is read after each long poll: set first, both are heard with the change.
        fake.set(preempted="TRUE")
        fake.set(maintenance="MIGRATE_ON_HOST_MAINTENANCE")
        changed = time.monotonic()
        want = [WarningKind.MIGRATION, WarningKind.INTERRUPTION]
        wait_until(lambda: run.kinds() == want, 10, "the change heard")
        heard_after = time.monotonic() - changed
        # The long poll answered on the change, not at its 5 s end (nor a poll's cadence).
        assert heard_after < 2.0, heard_after
        assert all(r[1] == "GET" for r in fake.requests)
    finally:
        fake.stop()


def test_off_reads_nothing_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    heard: list[tuple[Notice, ...]] = []
    watcher = WarningWatcher(
        WarningsConfig(cloud=Cloud.AUTO), heard.append, dmi_root="/nonexistent"
    )
    watcher.run(Context.background(), lambda: None, lambda: None)  # returns at once
    assert heard == [()]
    assert [r.message for r in caplog.records if "cloud warnings" in r.message] == [
        "cloud warnings: off (no cloud in the node's DMI)"
    ]


class NoTokenImds(FakeEndpoint):
    """IMDS behind a hop limit of 1, as a pod on the pod network sees it: the token's PUT
    gets no answer, and a read without a token is refused (IMDSv2 required)."""

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if method == "PUT":
            time.sleep(1)  # longer than the reader waits: the reply never arrives
            return 200, {}, b"token"
        return 401, {}, b"Unauthorized"


def test_imds_without_a_token_says_why_once(watch, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(aws.Imds, "timeout", 0.5)  # the PUT's wait, shortened for the test
    fake = NoTokenImds()
    try:
        run = watch(Cloud.AWS, fake.url)
        wait_until(lambda: errors(Cloud.AWS, "token") >= 2, 20, "two failed reads")
        said = [r.message for r in caplog.records if "hop limit" in r.message]
        assert len(said) == 1, said
        assert "raise the instance's metadata hop limit to 2" in said[0]
        assert run.heard == []
    finally:
        fake.stop()


def test_off_the_clouds_no_reader_is_loaded() -> None:
    """Every node pays for what the loop imports: off a cloud, none of the readers and
    their HTTP and date modules (about 1 MB of resident memory when they were)."""
    code = (
        "import sys\n"
        "from nodeagent.cloud.watcher import WarningWatcher\n"
        "from nodeagent.config import WarningsConfig\n"
        "from nodeagent.context import Context\n"
        "WarningWatcher(WarningsConfig(), lambda n: None, '/nonexistent').run("
        "Context.background(), lambda: None, lambda: None)\n"
        "prefixes = ('nodeagent.cloud.', 'http.', 'email.')\n"
        "print(sorted(m for m in sys.modules if m.startswith(prefixes)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        out.stdout.strip()
        == "['nodeagent.cloud.detect', 'nodeagent.cloud.http', 'nodeagent.cloud.watcher']"
    )
