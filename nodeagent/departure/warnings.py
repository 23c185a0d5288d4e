"""The cloud's early warnings as the departure knows them, and what is said about them.

The warnings loop (nodeagent/cloud/watcher.py) hands every reading it believes to
`CloudWarnings.heard`; the departure worker asks `now()` for an immutable `Heard` to decide
on, and `report(node)` says, once the Node is known, what appeared and what ended: a
`CloudWarning` Event, the nodeagent_cloud_warnings metric and the `warning-heard`
milestone when a warning first shows, `CloudWarningOver` and `warning-over` when it goes.
A warning whose departure already happened (the endpoint lists it for minutes after the
machine came back) is not news: it is reported neither way.

What is kept is the reading as a whole, `_notices`; `_take` is where a reading meets what
was believed before, so that memory per item (keeping an item's last believed state
through a bad reading of it) goes there, and nowhere else.
"""

from __future__ import annotations

import logging
import threading
import time

from nodeagent import metrics
from nodeagent.config import WarningsConfig
from nodeagent.fence import marker
from nodeagent.fence.warning import Due, Heard, due, is_departed, window
from nodeagent.kube.client import JSON
from nodeagent.report.events import WARNING, EventRecorder
from nodeagent.types import Milestone, Notice, milestone, stamp

log = logging.getLogger(__name__)


class CloudWarnings:
    """The notices as last read, which of them act now, and which are reported.
    `heard`, `tick` and `report` may be called from any thread."""

    def __init__(self, cfg: WarningsConfig, events: EventRecorder) -> None:
        self.cfg = cfg
        self.events = events
        self._lock = threading.Lock()
        self._notices: tuple[Notice, ...] | None = None  # None: not read yet
        self._due = Due()
        # Reporting is serialized on its own lock (an Event per change, never two).
        self._report_lock = threading.Lock()
        self._reported: tuple[Notice, ...] = ()  # what the last report said is there

    def heard(self, notices: tuple[Notice, ...]) -> bool:
        """A reading of the endpoint; True when the decision is to be made again: the
        warnings listed changed, or the one acting now did."""
        with self._lock:
            before = self._notices
            self._notices = self._take(before, notices)
            listed = before is None or _ids(before) != _ids(self._notices)
            return self._due_again() or listed

    def tick(self) -> bool:
        """True when the warning acting now changed by time alone (a scheduled event's
        lead reached, a rebalance's lifetime over)."""
        with self._lock:
            return self._due_again()

    def now(self) -> Heard:
        """What a decision reads of the warnings."""
        with self._lock:
            notices = self._notices
            return Heard(notices is not None, _ids(notices or ()), self._due.acting)

    def report(self, node: JSON) -> None:
        """An Event, a count and a milestone for each warning that appeared since the last
        report; an Event and a milestone for each that ended. Not before the Node is seen:
        whether a warning already departed is the Node's to say."""
        with self._report_lock:
            with self._lock:
                before, now = self._reported, self._notices or ()
                self._reported = now
            seen = _ids(before)
            for notice in now:
                if notice.event_id not in seen and not _departed(notice, node):
                    self._appeared(notice, node)
            current = _ids(now)
            for notice in before:
                if notice.event_id not in current and not _departed(notice, node):
                    self._ended(notice, node)

    def _take(
        self, before: tuple[Notice, ...] | None, now: tuple[Notice, ...]
    ) -> tuple[Notice, ...]:
        """What is believed after the reading `now`: the reading as a whole."""
        return now

    def _due_again(self) -> bool:
        """Recompute which warnings act now (under the lock); True when the first changed."""
        found = due(self._notices or (), self.cfg, time.time())
        changed = found.warned != self._due.warned
        self._due = found
        return changed

    def _appeared(self, notice: Notice, node: JSON) -> None:
        said = f"{notice.describe()}; policy {self.cfg.policy(notice.kind)}"
        start, _end = window(notice, self.cfg)
        if start > time.time():  # a scheduled event days ahead: the node serves until
            said += f", from {stamp(start)}"
        milestone(
            log,
            Milestone.WARNING_HEARD,
            "%s",
            said,
            severity=logging.WARNING,
            cloud=notice.cloud,
            kind=notice.kind,
            event_id=notice.event_id,
        )
        metrics.CLOUD_WARNINGS.labels(notice.cloud, notice.kind).inc()
        self.events.node(node, "CloudWarning", said, WARNING)

    def _ended(self, notice: Notice, node: JSON) -> None:
        milestone(
            log,
            Milestone.WARNING_OVER,
            "%s is over (canceled, done or gone)",
            notice.describe(),
            cloud=notice.cloud,
            kind=notice.kind,
            event_id=notice.event_id,
        )
        self.events.node(node, "CloudWarningOver", f"{notice.describe()} is over")


def _ids(notices: tuple[Notice, ...]) -> frozenset[str]:
    return frozenset(n.event_id for n in notices)


def _departed(notice: Notice, node: JSON) -> bool:
    if "spec" not in node:  # not observed
        return False
    fence = marker.NodeFence.of(node)
    return is_departed(notice, fence, marker.boot_id(node), marker.departed_note(node))
