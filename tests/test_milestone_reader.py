"""The harness reads the agent's milestones as data (hack/milestones.py): from the journal's
fields (the host form) and from JSON log lines (the DaemonSet form), never from the prose.
The entries below are written as the agent writes them (the journal's native protocol as
`journalctl -o json` shows it; `--log-format json` as the kubelet's pod log file holds it);
rewording every message changes no figure the benchmark and the VM runs compute."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hack import milestones as ms
from hack.departure.scene import agent_ready, pod_milestone
from hack.departure.ways import agent_times
from hack.vmnode.node import JOURNAL_FIELDS
from hack.vmnode.stage import SmokeFailed, milestone

BASE = 1_764_400_000.0  # a wall-clock time, seconds
WHEN = "2026-11-29T06:00:00.123456789Z"  # the kubelet's prefix's time

# (seconds after BASE, milestone, fields, the agent's words today)
SPOT_THEN_POWEROFF: list[tuple[float, str, dict[str, str], str]] = [
    (1.0, ms.WARNING_HEARD, {"cloud": "aws", "kind": "interruption",
                             "event_id": "spot-itn-terminate"},
     "aws interruption warning (Spot interruption: terminate at ...)"),
    (1.2, ms.CORDONED, {"reason": "warning"}, "cordon: aws interruption warning"),
    (1.3, ms.DRAIN_STARTED, {"reason": "warning", "pods": "2"}, "drain for warning: 2 pods"),
    (2.0, ms.EVICTED, {"reason": "warning", "pod": "ns/web-1"}, "evicted ns/web-1"),
    (4.5, ms.DRAIN_FINISHED, {"reason": "warning", "outcome": "drained", "seconds": "3.2"},
     "drain for warning: drained in 3.20s"),
    (120.0, ms.SHUTDOWN_ANNOUNCED, {"source": "logind", "reason": "poweroff",
                                    "generation": "1"},
     "logind: PrepareForShutdown(True), type poweroff"),
    (120.3, ms.DRAIN_FINISHED, {"reason": "poweroff", "outcome": "drained", "seconds": "0.1"},
     "drain for poweroff: drained in 0.10s"),
    (120.6, ms.LOCK_RELEASED, {"generation": "1"}, "released the logind delay lock"),
]  # fmt: skip
EXPECTED = {"warning_heard": BASE + 1.0, "warning_drained": BASE + 4.5, "lock_held_s": 0.6}


def journal(say: Any = None) -> list[dict[str, Any]]:
    """The journal entries; `say(words)` gives each MESSAGE (default: the agent's words)."""
    entries: list[dict[str, Any]] = [
        {"MESSAGE": "holding a logind delay lock", "__REALTIME_TIMESTAMP": str(int(BASE * 1e6))}
    ]
    for at, name, fields, words in SPOT_THEN_POWEROFF:
        entry = {
            "MESSAGE": say(words) if say else words,
            "PRIORITY": "6",
            "SYSLOG_IDENTIFIER": "nodeagent",
            "MESSAGE_ID": "0123456789abcdef0123456789abcdef",
            "NODEAGENT_MILESTONE": name,
            "__REALTIME_TIMESTAMP": str(round((BASE + at) * 1e6)),
            **{f"NODEAGENT_{k.upper()}": v for k, v in fields.items()},
        }
        entries.append(entry)
    return entries


def pod_log(say: Any = None) -> list[str]:
    """The kubelet's log file of the agent's container: `<time> <stream> <tag> <line>`."""
    lines = ["2026-11-29T06:00:00.000000001Z stderr F not json at all"]
    for at, name, fields, words in SPOT_THEN_POWEROFF:
        obj = {"ts": round(BASE + at, 3), "level": "info", "logger": "nodeagent.x",
               "msg": say(words) if say else words, "milestone": name,
               "message_id": "0123456789abcdef0123456789abcdef", **fields}  # fmt: skip
        lines.append(f"2026-11-29T06:00:00.123456789Z stderr F {json.dumps(obj)}")
    return lines


def figures(records: list[ms.Record]) -> dict[str, float | None]:
    times = agent_times(records)
    return {k: None if v is None else round(v, 3) for k, v in times.items()}


def rounded(expected: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in expected.items()}


@pytest.mark.parametrize(
    "say",
    [None, lambda words: "something else entirely", lambda words: words.upper()[::-1], str.title],
)
def test_rewording_every_message_changes_no_figure(say: Any) -> None:
    assert figures(ms.from_journal(journal(say))) == rounded(EXPECTED)
    assert figures(ms.from_lines(pod_log(say))) == rounded(EXPECTED)


def test_the_prose_alone_gives_no_figure() -> None:
    # Today's words without the fields: nothing is read from them.
    bare = [{"MESSAGE": e["MESSAGE"], "__REALTIME_TIMESTAMP": e["__REALTIME_TIMESTAMP"]}
            for e in journal()]  # fmt: skip
    assert ms.from_journal(bare) == []
    assert set(figures([]).values()) == {None}


def test_both_forms_give_the_same_records() -> None:
    from_journal = ms.from_journal(journal())
    from_lines = ms.from_lines(pod_log())
    assert [r.name for r in from_journal] == [r.name for r in from_lines]
    assert [dict(r.fields) for r in from_journal] == [dict(r.fields) for r in from_lines]
    assert [round(r.time, 3) for r in from_journal] == [round(r.time, 3) for r in from_lines]


def test_first_last_and_after_pick_by_name_fields_and_time() -> None:
    records = ms.from_journal(journal())
    drains = [ms.first(records, ms.DRAIN_FINISHED), ms.last(records, ms.DRAIN_FINISHED)]
    assert [r.fields["reason"] for r in drains if r] == ["warning", "poweroff"]
    after = ms.first(records, ms.DRAIN_FINISHED, BASE + 5)
    assert after is not None and after.fields["reason"] == "poweroff"
    assert ms.when(records, ms.DRAIN_FINISHED, reason="poweroff", outcome="forced") is None
    assert ms.when(records, ms.SHUTDOWN_CANCELLED) is None


def test_the_vm_runs_pick_a_milestone_or_fail_with_what_was_there() -> None:
    records = ms.from_journal(journal(lambda words: "reworded"))
    drained = milestone(records, ms.DRAIN_FINISHED, BASE + 100, reason="poweroff")
    assert drained == pytest.approx(BASE + 120.3)
    with pytest.raises(SmokeFailed, match="no milestone drain-finished reason=reboot"):
        milestone(records, ms.DRAIN_FINISHED, reason="reboot")


def test_values_journalctl_prints_as_arrays_are_no_fields() -> None:
    entry = {**journal()[1], "NODEAGENT_POD": [110, 115]}
    (record,) = ms.from_journal([entry])
    assert "pod" not in record.fields and record.fields["cloud"] == "aws"


def test_the_vms_journal_is_asked_for_every_milestone_field() -> None:
    asked = set(JOURNAL_FIELDS.removeprefix("--output-fields=").split(","))
    entries = journal() + agent_journal()
    written = {k for e in entries for k in e if k.startswith(("NODEAGENT_", "MESSAGE_ID"))}
    assert written <= asked, written - asked


# The agent's own moments the harness and the tests wait on (its words today).
AGENT_MOMENTS: list[tuple[float, str, dict[str, str], str]] = [
    (0.0, ms.LOCK_TAKEN, {}, "holding a logind delay lock for shutdown"),
    (0.2, ms.METRICS_FAILED, {"address": "0.0.0.0:9102"},
     "metrics server on 0.0.0.0:9102 not started: [Errno 98] Address already in use"),
    (0.5, ms.STANDING_BY, {"form": "pod", "pid": "41"},
     "standing by: pod agent n1 (pid 41) since 2026-11-29T06:00:00Z runs this node (claim "
     "file /run/nodeagent/agent.lock); taking over when it exits"),
    (9.0, ms.TOOK_OVER, {"form": "pod", "pid": "41"},
     "took over the node from pod agent n1 (pid 41) since 2026-11-29T06:00:00Z"),
    (30.0, ms.DRAIN_FAILED, {"reason": "poweroff"},
     "shutdown drain failed: GET /api/v1/nodes/n1: timed out"),
    (60.0, ms.STOPPING, {"reason": "restart"}, "stopping: reason restart (evidence: none)"),
    (61.0, ms.LOCK_TAKEN, {}, "holding a logind delay lock for shutdown"),
]  # fmt: skip
REWORDINGS = [None, lambda words: "reworded", lambda words: words.upper()[::-1], str.title]


def agent_journal(say: Any = None) -> list[dict[str, Any]]:
    return [
        {"MESSAGE": say(words) if say else words, "NODEAGENT_MILESTONE": name,
         "__REALTIME_TIMESTAMP": str(round((BASE + at) * 1e6)),
         **{f"NODEAGENT_{k.upper()}": v for k, v in fields.items()}}
        for at, name, fields, words in AGENT_MOMENTS
    ]  # fmt: skip


@dataclass
class JournalNode:
    """A node as the departure scene reads it: its agent unit's journal entries."""

    entries: list[dict[str, Any]]

    def milestones(self) -> list[ms.Record]:
        return ms.from_journal(self.entries)


@dataclass
class PodLogNode:
    """A node as the DaemonSet readers see it: the kubelet's pod log files under its root."""

    root: Path

    def path(self, relative: str) -> Path:
        return self.root / relative


@pytest.mark.parametrize("say", REWORDINGS)
def test_the_agents_own_moments_are_read_whatever_it_says(say: Any) -> None:
    records = ms.from_journal(agent_journal(say))
    assert sum(r.name == ms.LOCK_TAKEN for r in records) == 2  # its restarts (test_system)
    assert ms.last(records, ms.STOPPING, reason="restart") is not None
    assert ms.when(records, ms.STANDING_BY, form="pod", pid="41") == pytest.approx(BASE + 0.5)
    assert ms.when(records, ms.TOOK_OVER, form="pod", pid="41") == pytest.approx(BASE + 9.0)
    assert ms.first(records, ms.METRICS_FAILED, address="0.0.0.0:9102") is not None
    assert ms.when(records, ms.DRAIN_FAILED, reason="poweroff") == pytest.approx(BASE + 30.0)
    assert agent_ready(JournalNode(agent_journal(say)))  # type: ignore[arg-type]


def test_the_agents_words_alone_are_no_moment(tmp_path: Path) -> None:
    bare = [{k: v for k, v in e.items() if not k.startswith("NODEAGENT_")} for e in agent_journal()]
    assert not agent_ready(JournalNode(bare))  # type: ignore[arg-type]
    node = PodLogNode(tmp_path)
    logs = tmp_path / "var/log/pods/ns1_agent-x_0123/nodeagent"
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("".join(f"{WHEN} stderr F {e['MESSAGE']}\n" for e in bare))
    assert not pod_milestone(node, "ns1", ms.METRICS_FAILED)  # type: ignore[arg-type]


@pytest.mark.parametrize("say", REWORDINGS)
def test_a_pod_logs_moment_is_read_whatever_it_says(tmp_path: Path, say: Any) -> None:
    logs = tmp_path / "var/log/pods/ns1_agent-x_0123/nodeagent"
    logs.mkdir(parents=True)
    lines = [
        json.dumps({"ts": BASE + at, "level": "warning", "logger": "nodeagent.x",
                    "msg": say(words) if say else words, "milestone": name, **fields})
        for at, name, fields, words in AGENT_MOMENTS[:2]
    ]  # fmt: skip
    (logs / "0.log").write_text("".join(f"{WHEN} stderr F {line}\n" for line in lines))
    node = PodLogNode(tmp_path)
    assert pod_milestone(node, "ns1", ms.METRICS_FAILED)  # type: ignore[arg-type]
    assert not pod_milestone(node, "ns1", ms.STANDING_BY)  # type: ignore[arg-type]
    assert not pod_milestone(node, "other", ms.METRICS_FAILED)  # type: ignore[arg-type]
