"""The agent's milestones read as data: never from the words of its log lines.

The agent writes each milestone (a shutdown announced, a cordon, a drain's start and end,
the logind lock's release...) with a stable name and key fields, in two forms:

- the journal (the host form): ``NODEAGENT_MILESTONE=<name>``, ``MESSAGE_ID=<hex>`` and
  ``NODEAGENT_<FIELD>=<value>`` per field, as ``journalctl -o json`` shows them; the time
  is the entry's ``__REALTIME_TIMESTAMP`` (microseconds);
- JSON log lines (``--log-format json``, the DaemonSet form's): ``milestone``,
  ``message_id`` and each field under its own lower-case key; the time is ``ts`` (unix
  seconds). A line may come with a prefix (the kubelet's pod log files put
  ``<time> <stream> <tag>`` before it); whatever is not such an object is passed over.

Both give :class:`Record` values, and :func:`first`, :func:`last` and :func:`when` pick
one by name, fields and time. The prose (``MESSAGE``, ``msg``) is never read: a reworded
line changes no figure (tests/test_milestones.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.types import RESERVED_FIELDS, Milestone

# The names, the agent's own (one vocabulary: a renamed milestone is renamed here too).
SHUTDOWN_ANNOUNCED = Milestone.SHUTDOWN_ANNOUNCED.value
SHUTDOWN_CANCELLED = Milestone.SHUTDOWN_CANCELLED.value
WARNING_HEARD = Milestone.WARNING_HEARD.value
WARNING_OVER = Milestone.WARNING_OVER.value
CORDONED = Milestone.CORDONED.value
UNCORDONED = Milestone.UNCORDONED.value
DRAIN_STARTED = Milestone.DRAIN_STARTED.value
EVICTED = Milestone.EVICTED.value
DRAIN_FINISHED = Milestone.DRAIN_FINISHED.value
LOCK_RELEASED = Milestone.LOCK_RELEASED.value
LOCK_TAKEN = Milestone.LOCK_TAKEN.value
STOPPING = Milestone.STOPPING.value
STANDING_BY = Milestone.STANDING_BY.value
TOOK_OVER = Milestone.TOOK_OVER.value
METRICS_FAILED = Milestone.METRICS_FAILED.value
DRAIN_FAILED = Milestone.DRAIN_FAILED.value
API_UNREACHABLE = Milestone.API_UNREACHABLE.value
API_ANSWERS_AGAIN = Milestone.API_ANSWERS_AGAIN.value
WATCH_RESTARTED = Milestone.WATCH_RESTARTED.value
RESULT_KEPT = Milestone.RESULT_KEPT.value
RESULT_WRITTEN = Milestone.RESULT_WRITTEN.value
RESULT_DROPPED = Milestone.RESULT_DROPPED.value

JOURNAL_PREFIX = "NODEAGENT_"
JOURNAL_NAME = "NODEAGENT_MILESTONE"
# The keys of a JSON line that are not a milestone's fields.
LINE_KEYS = RESERVED_FIELDS
# The fields the agent writes (the interface's table). Only where journalctl is told which
# fields to print (a VM's journal, read through its guest agent) does the list matter.
FIELDS = (
    "source", "reason", "generation", "cloud", "kind", "event_id", "pods", "pod", "outcome",
    "seconds", "late", "form", "pid", "address", "resource", "tries",
)  # fmt: skip
JOURNAL_KEYS = ("MESSAGE_ID", JOURNAL_NAME, *(JOURNAL_PREFIX + f.upper() for f in FIELDS))


@dataclass(frozen=True)
class Record:
    """One milestone: its name, when it was written (unix seconds) and its key fields."""

    name: str
    time: float
    fields: Mapping[str, str] = field(default_factory=dict)

    def matches(self, name: str, after: float | None, fields: Mapping[str, str]) -> bool:
        if self.name != name or (after is not None and self.time < after):
            return False
        return all(self.fields.get(k) == v for k, v in fields.items())


def from_journal(entries: Iterable[Mapping[str, Any]]) -> list[Record]:
    """The milestones among `journalctl -o json` entries, in their order."""
    records = []
    for entry in entries:
        name = entry.get(JOURNAL_NAME)
        stamp = entry.get("__REALTIME_TIMESTAMP")
        if not isinstance(name, str) or not isinstance(stamp, str) or not stamp.isdigit():
            continue
        fields = {
            key.removeprefix(JOURNAL_PREFIX).lower(): value
            for key, value in entry.items()
            # A value journalctl prints as an array (binary, or a field given twice) is
            # none the agent writes.
            if key.startswith(JOURNAL_PREFIX) and key != JOURNAL_NAME and isinstance(value, str)
        }
        records.append(Record(name, int(stamp) / 1e6, fields))
    return records


def from_lines(lines: Iterable[str]) -> list[Record]:
    """The milestones among JSON log lines (each maybe behind a prefix), in their order."""
    records = []
    for line in lines:
        obj = _object(line)
        if obj is None:
            continue
        name, stamp = obj.get("milestone"), obj.get("ts")
        if not isinstance(name, str) or not isinstance(stamp, int | float):
            continue
        fields = {k: str(v) for k, v in obj.items() if k not in LINE_KEYS}
        records.append(Record(name, float(stamp), fields))
    return records


def first(
    records: Iterable[Record], name: str, after: float | None = None, **fields: str
) -> Record | None:
    """The first milestone `name` with these `fields`, written at `after` or later."""
    return next((r for r in records if r.matches(name, after, fields)), None)


def last(
    records: Iterable[Record], name: str, after: float | None = None, **fields: str
) -> Record | None:
    """The last milestone `name` with these `fields`, written at `after` or later."""
    found = [r for r in records if r.matches(name, after, fields)]
    return found[-1] if found else None


def when(
    records: Iterable[Record], name: str, after: float | None = None, **fields: str
) -> float | None:
    """When the first such milestone was written, or None."""
    record = first(records, name, after, **fields)
    return None if record is None else record.time


def _object(line: str) -> dict[str, Any] | None:
    start = line.find("{")
    if start < 0:
        return None
    try:
        obj = json.loads(line[start:])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
