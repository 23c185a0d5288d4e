"""Milestones as data (nodeagent/types.py, nodeagent/agent/logs.py): the JSON lines' fields,
and the journal's native protocol read back from a real AF_UNIX datagram socket."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent import logs
from nodeagent.report import httpd
from nodeagent.types import RESERVED_FIELDS, Milestone, milestone

LOG = logging.getLogger("nodeagent.test")


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Keep]:
    handler = Keep()
    LOG.addHandler(handler)
    LOG.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        LOG.removeHandler(handler)


def test_every_milestone_has_its_own_id() -> None:
    ids = [m.message_id for m in Milestone]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids), ids
    assert len(set(ids)) == len(ids) == len(Milestone)
    assert Milestone("drain-finished") is Milestone.DRAIN_FINISHED


def test_the_json_line_carries_the_milestone_and_its_fields(kept: Keep) -> None:
    milestone(LOG, Milestone.CORDONED, "cordoned for %s", "poweroff", reason="poweroff")
    LOG.info("an ordinary line about %s", "nothing")
    line = json.loads(logs.JsonFormatter().format(kept.records[0]))
    assert set(line) == {"ts", "level", "logger", "msg", "milestone", "message_id", "reason"}
    assert line["msg"] == "cordoned for poweroff" and line["level"] == "info"
    assert line["milestone"] == "cordoned"
    assert line["message_id"] == Milestone.CORDONED.message_id
    assert line["reason"] == "poweroff" and line["logger"] == "nodeagent.test"
    assert isinstance(line["ts"], float)
    plain = json.loads(logs.JsonFormatter().format(kept.records[1]))
    assert set(plain) == {"ts", "level", "logger", "msg"}


def test_fields_are_strings_and_never_take_a_key_of_the_line(kept: Keep) -> None:
    milestone(LOG, Milestone.DRAIN_STARTED, "x", reason="evacuate", pods=3)
    line = json.loads(logs.JsonFormatter().format(kept.records[0]))
    assert line["pods"] == "3"
    for key in RESERVED_FIELDS:
        with pytest.raises(AssertionError):
            milestone(LOG, Milestone.CORDONED, "x", **{key: "y"})


def parse_datagram(data: bytes) -> dict[str, str]:
    """journald's native protocol, read the way journald reads it."""
    fields: dict[str, str] = {}
    while data:
        line, _, rest = data.partition(b"\n")
        if b"=" in line:
            key, _, value = line.partition(b"=")
            fields[key.decode()] = value.decode()
            data = rest
        else:  # KEY\n, 64-bit little-endian length, the value, \n
            (size,) = struct.unpack("<Q", rest[:8])
            fields[line.decode()] = rest[8 : 8 + size].decode()
            assert rest[8 + size : 9 + size] == b"\n"
            data = rest[9 + size :]
    return fields


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[socket.socket, logs.JournalHandler]]:
    path = str(tmp_path / "socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(5)
    handler = logs.JournalHandler(path)
    handler.setFormatter(logging.Formatter(logs.TEXT))
    LOG.addHandler(handler)
    LOG.setLevel(logging.DEBUG)
    try:
        yield server, handler
    finally:
        LOG.removeHandler(handler)
        handler.close()
        server.close()


def test_the_journal_gets_the_fields(journal: tuple[socket.socket, logs.JournalHandler]) -> None:
    server, _ = journal
    milestone(LOG, Milestone.EVICTED, "evicted %s", "ns/web-0", reason="poweroff", pod="ns/web-0")
    entry = parse_datagram(server.recv(65536))
    assert entry == {
        "MESSAGE": "INFO nodeagent.test: evicted ns/web-0",
        "PRIORITY": "6",
        "SYSLOG_IDENTIFIER": "nodeagent",
        "LOGGER": "nodeagent.test",
        "MESSAGE_ID": Milestone.EVICTED.message_id,
        "NODEAGENT_MILESTONE": "evicted",
        "NODEAGENT_REASON": "poweroff",
        "NODEAGENT_POD": "ns/web-0",
    }
    LOG.warning("plain")
    entry = parse_datagram(server.recv(65536))
    assert entry["PRIORITY"] == "4" and "MESSAGE_ID" not in entry


def test_a_value_with_a_newline_goes_binary_safe(
    journal: tuple[socket.socket, logs.JournalHandler],
) -> None:
    server, _ = journal
    milestone(LOG, Milestone.DRAIN_FINISHED, "two\nlines", reason="re\nboot", outcome="drained")
    data = server.recv(65536)
    assert b"MESSAGE\n" in data and b"MESSAGE=" not in data  # the length-prefixed form
    entry = parse_datagram(data)
    assert entry["MESSAGE"] == "INFO nodeagent.test: two\nlines"
    assert entry["NODEAGENT_REASON"] == "re\nboot" and entry["NODEAGENT_OUTCOME"] == "drained"


def test_a_failed_send_writes_text_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = logs.JournalHandler(str(tmp_path / "no-socket"))  # stderr as captured now
    handler.setFormatter(logging.Formatter(logs.TEXT))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    try:
        milestone(LOG, Milestone.UNCORDONED, "uncordoned (%s)", "evacuate", reason="evacuate")
    finally:
        LOG.removeHandler(handler)
        handler.close()
    assert capsys.readouterr().err == "INFO nodeagent.test: uncordoned (evacuate)\n"


def test_stderr_is_the_journal_only_when_journal_stream_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open(tmp_path / "stderr", "w") as stderr:
        st = os.fstat(stderr.fileno())
        monkeypatch.setattr(sys, "stderr", stderr)
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        assert logs.stderr_is_the_journal()
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
        assert not logs.stderr_is_the_journal()
        monkeypatch.setenv("JOURNAL_STREAM", "garbage")
        assert not logs.stderr_is_the_journal()
        monkeypatch.delenv("JOURNAL_STREAM")
        assert not logs.stderr_is_the_journal()


def test_the_daemon_writes_milestones_at_any_verbosity(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.setup_logging(0, "json", milestones=True)  # no -v: warnings and milestones
        LOG.setLevel(logging.NOTSET)
        LOG.info("not written")
        milestone(LOG, Milestone.LOCK_RELEASED, "released", generation=2)
        LOG.warning("written")
        logs.setup_logging(0, "json")  # a one-shot command: what its verbosity says
        milestone(LOG, Milestone.LOCK_RELEASED, "not written either", generation=3)
    finally:
        root.handlers[:], root.level = saved
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["msg"] for line in lines] == ["released", "written"]
    assert lines[0]["milestone"] == "lock-released" and lines[0]["generation"] == "2"


def test_a_metrics_address_not_served_is_a_milestone(caplog: pytest.LogCaptureFixture) -> None:
    # The harness tells a DaemonSet pod without its metrics port by this milestone.
    with caplog.at_level(logging.WARNING, logger=httpd.__name__):
        assert httpd.serve("127.0.0.1:no-port") is None
    (which, fields) = logs.milestone_of(caplog.records[-1])
    assert which is Milestone.METRICS_FAILED and fields == {"address": "127.0.0.1:no-port"}
