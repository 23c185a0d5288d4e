"""NodeAgentReady as the agent's findings: each part of the agent adds or drops one.

The heartbeat writes whatever `condition` says now, so a finding reported by the logind
loop (a short InhibitDelayMaxSec, the kubelet's delay lock) or at SIGTERM (a pod grace
too short, the package being removed) reaches the Node with the next write or at once.
"""

from __future__ import annotations

import threading

from nodeagent.report import conditions
from nodeagent.report.conditions import Condition, ConditionWriter, ReadyReason


class Readiness:
    """The findings behind NodeAgentReady, written through `writer` on every change."""

    def __init__(self, writer: ConditionWriter) -> None:
        self.writer = writer
        self._notes: dict[ReadyReason, str] = {}
        self._removed = False
        self._lock = threading.Lock()
        writer.ride_along(lambda: [self.condition])

    @property
    def condition(self) -> Condition:
        with self._lock:
            if self._removed:
                return conditions.agent_removed()
            return conditions.agent_ready_with(self._notes)

    def note(self, reason: ReadyReason, message: str | None) -> None:
        """Add (message) or drop (None) one finding, and report the condition."""
        with self._lock:
            if message is None:
                self._notes.pop(reason, None)
            else:
                self._notes[reason] = message
        self.writer.set(self.condition)

    def removed(self) -> None:
        """The package is going away: say so instead of a condition that looks alive."""
        with self._lock:
            self._removed = True
        self.writer.set(self.condition)
