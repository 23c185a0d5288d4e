"""One cancellation and deadline object, handed into every loop body and engine.

Like Go's ``context.Context``: a child never outlives its parent (its deadline is the
earlier of the two) and cancelling a parent cancels every child. Code that waits asks the
context how long it may wait instead of carrying Events, floats and client clones side by
side, so a cancel (a shutdown called off, the agent stopping) reaches whatever is waiting.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Context:
    """A deadline (monotonic seconds; ``inf`` for none) and a cancellation."""

    def __init__(self, deadline: float = math.inf, parent: Context | None = None) -> None:
        self.deadline: float = min(deadline, parent.deadline) if parent else deadline
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._children: list[Context] = []
        self._callbacks: list[Callable[[], None]] = []
        self._parent = parent
        if parent is not None:
            parent._adopt(self)

    @classmethod
    def background(cls) -> Context:
        """The root: no deadline, cancelled only by its owner."""
        return cls()

    def with_deadline(self, deadline: float) -> Context:
        return Context(deadline, self)

    def with_timeout(self, seconds: float) -> Context:
        return Context(time.monotonic() + seconds, self)

    def child(self) -> Context:
        """Cancellable on its own, same deadline."""
        return Context(parent=self)

    def cancel(self) -> None:
        """Cancel this context and every child; callbacks run once, on this thread."""
        with self._lock:
            if self._done.is_set():
                return
            self._done.set()
            children, callbacks = self._children, self._callbacks
            self._children, self._callbacks = [], []
        for child in children:
            child.cancel()
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run `callback` when cancelled (at once if already): wakes what waits elsewhere."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    @property
    def cancelled(self) -> bool:
        return self._done.is_set()

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    @property
    def done(self) -> bool:
        """Cancelled or past the deadline: nothing more should start."""
        return self.cancelled or self.expired

    def remaining(self) -> float:
        """Seconds left before the deadline, never negative (``inf`` without one)."""
        return max(0.0, self.deadline - time.monotonic())

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, cut by the deadline; True when cancelled meanwhile."""
        timeout = min(seconds, self.remaining())
        return self._done.wait(None if timeout == math.inf else timeout)

    def _adopt(self, child: Context) -> None:
        with self._lock:
            if not self._done.is_set():
                self._children.append(child)
                return
        child.cancel()

    def _forget(self, child: Context) -> None:
        with self._lock:
            if child in self._children:
                self._children.remove(child)

    def release(self) -> None:
        """Done with this child: its parent stops holding it (long-lived parents stay small)."""
        if self._parent is not None:
            self._parent._forget(self)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
