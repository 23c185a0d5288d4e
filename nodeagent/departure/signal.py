"""What the departure's queue carries (nodeagent/departure/worker.py), and what its worker
remembers between signals."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent.context import Context
from nodeagent.departure.budget import Budget
from nodeagent.fence.decision import Decision
from nodeagent.fence.refence import Refences
from nodeagent.types import Occasion, Reason


@dataclass
class Signal:
    """One thing that happened, queued for the worker; `done` is set once handled."""

    occasion: Occasion
    reason: Reason | None = None  # SHUTDOWN
    budget: Budget | None = None  # SHUTDOWN: the drain's time, fixed when the signal arrived
    source: str = ""  # SHUTDOWN: "logind" or "SIGTERM"
    generation: int | None = None  # logind's PrepareForShutdown count; None for SIGTERM
    started_at: str = ""  # SETTLED: the marker seen at start
    unclean: bool = False  # SETTLED: the previous boot ended without a drain
    after: Callable[[], None] | None = None  # run once handled (release logind's lock)
    done: threading.Event = field(default_factory=threading.Event)
    decision: Decision | None = None  # what the worker decided, once handled

    def wait(self, until: float) -> bool:
        return self.done.wait(max(0.0, until - time.monotonic()))


@dataclass
class Running:
    """The step being applied (a drain, mostly): a producer may cancel its context."""

    reason: Reason
    ctx: Context


@dataclass
class State:
    """What the worker remembers that the Node cannot hold, shared with the producers'
    threads: read and written under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    generation: int = 0  # logind's latest PrepareForShutdown count
    owner: Reason | None = None  # the shutdown that owns the node, until cancelled
    running: Running | None = None
    retry_at: float = 0.0  # when a blocked drain is tried again (monotonic; 0: not)
    refences: Refences = field(default_factory=Refences)  # cordons put back, this departure
    deleted: str = ""  # the UID of the own Node deleted from the API, until one registers
    handler_seen: str = ""  # another handler of the cloud's notices, seen on this Node
    kured_lock: str = ""  # kured's lock naming this node ([alongside]), as others.kured_holds says
