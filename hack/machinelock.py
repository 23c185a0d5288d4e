"""The machine-wide lock that runs which must not share the CPUs take (`--lock FILE`)."""

from __future__ import annotations

import contextlib
import fcntl
import signal
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def held(lock: Path | None, wait: int, error: type[Exception]) -> Iterator[None]:
    """Hold `lock` (flock) for the block, if one is named; `error` if it is still taken
    after `wait` seconds."""
    if lock is None:
        yield
        return
    with lock.open("a") as f:

        def expired(_signum: int, _frame: object) -> None:
            raise error(f"{lock} still taken after {wait} s")

        # Blocking, so it queues with the others' flock(1) waiters; an alarm bounds the wait.
        previous = signal.signal(signal.SIGALRM, expired)
        signal.alarm(wait)
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        print(f"  holding {lock}", file=sys.stderr, flush=True)
        yield
