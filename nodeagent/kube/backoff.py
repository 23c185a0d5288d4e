"""When a caller tries a failed API request again: a bounded exponential backoff with
jitter, and at once when the client heard the API server answer since.

A fixed interval keeps a fleet in step through an API server outage: every node sends
its retry at the same cadence, all of them together, for as long as the outage lasts.
Doubling thins that load (after five failures a node tries about twice a minute, not
twelve times), the jitter drifts the nodes apart, and an answer heard by the client
(`Reachability.recoveries`, from any request or watch of the agent) brings the retry
forward: once the outage ends, the write waits for one `first` at the most, not for the
rest of a long backoff.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from nodeagent.kube.client import Reachability

FIRST = 1.0  # seconds before the first try again, and between two tries after an answer
CAP = 30.0  # the backoff's ceiling, before its jitter
JITTER = 0.2  # up to this fraction added to each wait, so the nodes drift apart
TICK = 0.5  # how often a waiting caller looks for an answer heard meanwhile


@dataclass(frozen=True)
class Backoff:
    first: float = FIRST
    cap: float = CAP
    jitter: float = JITTER

    def delay(self, failures: int, answered: bool, spread: float) -> float:
        """Seconds from the `failures`-th failure in a row (1 on) to the next try.
        `answered`: the API server answered since that failure (then `first`: at once,
        at most one try per `first`); `spread` in [0, 1) picks the jitter."""
        doublings = min(max(0, failures - 1), 32)  # past the ceiling long before 2**32
        base = self.first if answered else self.first * 2.0**doublings
        return min(base, self.cap) * (1 + self.jitter * spread)


class Retries:
    """One caller's failures in a row, and the wait before its next try."""

    def __init__(self, reach: Reachability, backoff: Backoff | None = None) -> None:
        self.reach = reach
        self.backoff = backoff or Backoff()
        self.failures = 0
        self._failed_at = 0.0  # monotonic, the last failure
        self._heard = 0  # the client's recoveries at the last failure
        self._spread = 0.0

    def failed(self) -> float:
        """Note a failure; return the seconds to the next try as it stands now."""
        self.failures += 1
        self._failed_at = time.monotonic()
        self._heard = self.reach.recoveries
        self._spread = random.random()
        return self.due() - self._failed_at

    def succeeded(self) -> None:
        self.failures = 0

    def due(self) -> float:
        """Monotonic time of the next try (now or past: at once)."""
        if not self.failures:
            return 0.0
        answered = self.reach.recoveries != self._heard
        return self._failed_at + self.backoff.delay(self.failures, answered, self._spread)

    def wait(self) -> None:
        """Sleep until the next try is due, looking every TICK for an answer heard."""
        while (left := self.due() - time.monotonic()) > 0:
            time.sleep(min(TICK, left))
