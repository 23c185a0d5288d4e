"""The agent's supervisor pieces: loops that restart themselves, and sd_notify."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent import metrics
from nodeagent.context import Context

log = logging.getLogger(__name__)


class Notifier:
    """sd_notify, a no-op outside systemd."""

    def __init__(self) -> None:
        import sdnotify

        self._n = sdnotify.SystemdNotifier()

    def send(self, *fields: str) -> None:
        self._n.notify("\n".join(fields))

    def status(self, text: str) -> None:
        log.info("%s", text)
        self.send(f"STATUS={text}")


@dataclass
class Loop:
    """A named loop body run forever on its own thread with backoff on errors.

    The body calls `beat()` whenever it is demonstrably not stuck (a watch delivered,
    a bounded call returned, even with an error) and `succeeded()` when it did its
    job. A loop silent for longer than `max_silence` is stalled: the watchdog stops
    being fed and /healthz says so. Every call a body makes is bounded, so
    `max_silence` is the longest such bound plus slack.
    """

    name: str
    body: Callable[[Context], None]  # returns when done; raises to be restarted
    max_silence: float = 30.0
    last_beat: float = field(default_factory=time.monotonic)
    done: bool = False

    def alive(self) -> bool:
        return self.done or time.monotonic() - self.last_beat < self.max_silence

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def succeeded(self) -> None:
        self.beat()
        metrics.loop_succeeded(self.name)

    def run(self, ctx: Context) -> None:
        backoff = 1.0
        while not ctx.cancelled:
            try:
                self.body(ctx)
                self.done = True
                self.succeeded()
                return
            except Exception as exc:
                log.warning("loop %s failed: %s; restarting in %.0fs", self.name, exc, backoff)
                self.beat()  # failing and retrying is alive; hanging is not
                ctx.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, 30.0)
