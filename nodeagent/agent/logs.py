"""Where the agent's log goes, and in what form: text, JSON lines, or the journal's own
protocol. A milestone (nodeagent/types.py: `milestone`) carries its name, MESSAGE_ID and
key fields into the JSON lines and the journal as data, so that a reader finds it by
field, never by the words of its line.

- Under systemd, stderr is the journal (``$JOURNAL_STREAM`` names stderr's device and
  inode): every record is sent as one datagram in journald's native protocol, with
  PRIORITY, the logger and, for a milestone, MESSAGE_ID and NODEAGENT_* fields. MESSAGE is
  the text line, as the stream would have had it. A send that fails (the socket gone, a
  record too long for one datagram) writes the record to stderr as text.
- ``--log-format json`` (the DaemonSet form's default): one object per line, ``ts``,
  ``level``, ``logger``, ``msg``, and a milestone's ``milestone``, ``message_id`` and
  fields under their own names.
- Text otherwise, with no fields.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import sys
from typing import Any

from nodeagent.types import FIELDS_ATTR, MILESTONE_ATTR, Milestone

JOURNAL_SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "nodeagent"
TEXT = "%(levelname)s %(name)s: %(message)s"
# syslog priorities (journald's PRIORITY) of Python's levels
PRIORITIES = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3}


def milestone_of(record: logging.LogRecord) -> tuple[Milestone | None, dict[str, str]]:
    """The milestone a record carries (None for an ordinary line) and its fields."""
    which = getattr(record, MILESTONE_ATTR, None)
    fields: dict[str, str] = getattr(record, FIELDS_ATTR, None) or {}
    return (which, fields) if isinstance(which, Milestone) else (None, {})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        which, fields = milestone_of(record)
        if which is not None:
            line.update(fields)  # names never taken by the keys around them (types.milestone)
            line["milestone"] = which.value
            line["message_id"] = which.message_id
        return json.dumps(line)


def journal_fields(record: logging.LogRecord, message: str) -> list[tuple[str, str]]:
    """The journal entry of `record`, as (KEY, value) pairs."""
    priority = PRIORITIES.get(record.levelno, 2 if record.levelno > logging.ERROR else 6)
    fields = [
        ("MESSAGE", message),
        ("PRIORITY", str(priority)),
        ("SYSLOG_IDENTIFIER", IDENTIFIER),
        ("LOGGER", record.name),
    ]
    which, values = milestone_of(record)
    if which is not None:
        fields += [("MESSAGE_ID", which.message_id), ("NODEAGENT_MILESTONE", which.value)]
        fields += [(f"NODEAGENT_{key.upper()}", value) for key, value in values.items()]
    return fields


def encode(fields: list[tuple[str, str]]) -> bytes:
    """journald's native protocol: KEY=value lines; a value with a newline as KEY, a
    newline, its length (64-bit little endian), the bytes and a newline."""
    out = bytearray()
    for key, value in fields:
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


class JournalHandler(logging.Handler):
    """Sends each record to journald's socket; a failed send writes it to stderr."""

    def __init__(self, path: str = JOURNAL_SOCKET) -> None:
        super().__init__()
        self.path = path
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.fallback = logging.StreamHandler(sys.stderr)
        self.fallback.setFormatter(logging.Formatter(TEXT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            self.socket.sendto(encode(journal_fields(record, message)), self.path)
        except OSError:
            self.fallback.handle(record)
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        self.socket.close()
        super().close()


def stderr_is_the_journal() -> bool:
    """systemd connected stderr to the journal: ``$JOURNAL_STREAM`` is its dev:ino."""
    dev, _, ino = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(sys.stderr.fileno())
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (OSError, ValueError, AttributeError):
        return False


class Verbosity(logging.Filter):
    """Records at `level` and above, and every milestone (data, whatever the verbosity)."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or milestone_of(record)[0] is not None


def setup_logging(verbose: int, fmt: str, milestones: bool = False) -> None:
    """Log at the verbosity asked (-v INFO, -vv DEBUG); `milestones`: the daemon's, whose
    milestones are written at any verbosity (the DaemonSet form runs without -v)."""
    handler: logging.Handler
    if stderr_is_the_journal():
        handler = JournalHandler()  # MESSAGE: the text line, the fields beside it
        handler.setFormatter(logging.Formatter(TEXT))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    if milestones:
        handler.addFilter(Verbosity(level))
        level = min(level, logging.INFO)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # The client's own loggers are noisy at INFO and could echo request headers.
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
