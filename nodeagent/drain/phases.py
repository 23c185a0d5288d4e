"""Where one drain's time went, phase by phase: in its result, the summary and the log.

A drain that takes longer than it should says which part did (the cordon's write, the
pods' list, the evictions, the wait for the pods to go, the detach check, the result's
write), without a profiler; bench/drain_bench.py prints the same figures beside the floor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum


class Phase(StrEnum):
    """In the order a drain goes through them; the value is what the summary shows."""

    STARTUP = "start-up"  # the process: interpreter, imports, config, credentials
    NODE = "node read"
    LIST = "list"  # the pod watch's first list
    CORDON = "cordon"  # the cordon, the marker and the load balancer label: one write
    EVICT = "evictions"  # from the plan to the last eviction accepted
    GONE = "pods gone"  # from then until the watch sees the last pod go
    RESULT = "result write"
    DETACH = "detach check"
    EVENTS = "events flush"  # the Events still queued at the end of a one-shot drain


@dataclass
class Phases:
    """Seconds per phase, for the phases a drain went through."""

    seconds: dict[Phase, float] = field(default_factory=dict)

    def add(self, phase: Phase, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + max(0.0, seconds)

    @contextmanager
    def timed(self, phase: Phase) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(phase, time.monotonic() - start)

    def render(self) -> str:
        """In the phases' order: "start-up 0.21s, node read 0.01s, ..."."""
        return ", ".join(f"{p.value} {self.seconds[p]:.2f}s" for p in Phase if p in self.seconds)


def process_age() -> float | None:
    """Seconds since this process started, from the kernel's record of its start (Linux,
    in clock ticks: 10 ms steps); None where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            stat = fh.read()
        # Fields after the command's closing parenthesis start at the 3rd; starttime is
        # the 22nd (proc(5)).
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(0.0, since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
