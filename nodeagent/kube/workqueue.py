"""A keyed work queue: each key processed by one worker at a time, now or after a delay."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque


class WorkQueue:
    """Keys to process, each by at most one worker at a time, now or after a delay.

    A key added while it is being processed is processed once more afterwards; a key
    already waiting is not queued twice. Delayed keys sit in a heap the workers wait on.
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._busy: set[str] = set()
        self._dirty: set[str] = set()
        self._timers: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._closed = False

    def add(self, key: str, delay: float = 0.0) -> None:
        with self._cv:
            if delay > 0:
                heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), key))
                self._cv.notify_all()
            else:
                self._add_now(key)

    def get(self) -> str | None:
        """The next key to process (marked busy), or None once closed."""
        with self._cv:
            while not self._closed:
                self._promote_due()
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._busy.add(key)
                    return key
                timeout = self._timers[0][0] - time.monotonic() if self._timers else None
                self._cv.wait(timeout)
            return None

    def done(self, key: str) -> None:
        with self._cv:
            self._busy.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add_now(key)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _add_now(self, key: str) -> None:
        if key in self._busy:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            self._cv.notify()

    def _promote_due(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            self._add_now(heapq.heappop(self._timers)[2])


# -- the controller ---------------------------------------------------------------------
