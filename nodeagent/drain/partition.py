"""An API server that stops answering during a drain, named within two seconds.

A drain mostly waits: for its pods to go, seen by a watch. A refusing API server fails the
next request at once, but a silent one (a partition, a blackhole) fails nothing until a
request's timeout ends, and a watch waits out its silence for longer still; meanwhile the
drain would go on reporting pods it can no longer see. So while the drain runs, a request
or watch byte answered in the last QUIET seconds is proof enough; after that a quick
probe (GET /version, PROBE_TIMEOUT) asks. A change either way is said at once, and the
drain's progress lines say the API server is unreachable and name the pods only as last
seen (nodeagent/drain/engine.py).

Worst case from the cut to the line: QUIET + TICK + PROBE_TIMEOUT = 1.75 s. The probes
cost the API server at most two requests a second, only while a drain hears nothing else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress

from nodeagent.context import Context
from nodeagent.kube.client import Kube, KubeError

log = logging.getLogger(__name__)

TICK = 0.25  # how often the answers are looked at
QUIET = 0.5  # seconds without an answer before a probe asks
PROBE_TIMEOUT = 1.0


class PartitionWatch:
    """Says when the API server stops answering `kube`, and when it answers again."""

    def __init__(
        self,
        kube: Kube,
        work: Context,
        say: Callable[[str], None],
        pods_seen: Callable[[], int],
    ) -> None:
        """`work` ends the watch; `say` is the drain's progress; `pods_seen` counts the
        pods the drain last saw on the node and still waits for."""
        self.kube = kube
        self.work = work
        self.say = say
        self.pods_seen = pods_seen
        self._down = False
        self._thread = threading.Thread(target=self._run, name="partition", daemon=True)

    def start(self) -> PartitionWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self.work.wait(TICK):
                if self.kube.reach.silent_for() >= QUIET:
                    self._probe()
                self._tell()
        except Exception:  # the drain must never lose its reports to a bug here
            log.exception("API server reachability watch failed")

    def _probe(self) -> None:
        deadline = self.kube.deadline
        left = PROBE_TIMEOUT if deadline is None else deadline - time.monotonic()
        if left <= 0.1:
            return
        with suppress(KubeError):  # the client noted it (Reachability)
            self.kube.probe(min(PROBE_TIMEOUT, left))

    def _tell(self) -> None:
        down = self.kube.reach.down_for()
        if down is not None and not self._down:
            self._down = True
            self.say(
                f"{self.kube.reach.why} (no answer for {down:.1f}s); "
                f"{self.pods_seen()} pods last seen on the node"
            )
        elif down is None and self._down:
            self._down = False
            self.say(f"API server {self.kube.host} answers again")
