"""An API server that stops answering during a drain, named within two seconds.

A drain mostly waits: for its pods to go, seen by a watch. A refusing API server fails the
next request at once, but a silent one (a partition, a blackhole) fails nothing until a
request's timeout ends, and a watch waits out its silence for longer still; meanwhile the
drain would go on reporting pods it can no longer see. So while the drain runs, a request
or watch byte answered in the last QUIET seconds is proof enough; after that a quick
probe (GET /livez, PROBE_TIMEOUT) asks. A change either way is said at once, and the
drain's progress lines say the API server is unreachable and name the pods only as last
seen (nodeagent/drain/engine.py).

Worst case from the cut to the line: QUIET + TICK + PROBE_TIMEOUT = 1.75 s. The probes
cost the API server at most two requests a second, only while a drain hears nothing else.

The drain sees its pods go only through its pod watch. When the API server answers again
after an outage, the client cuts the watch streams that slept through it (kube/client.py,
Reachability); a probe that succeeds is such an answer, so the drain's watch starts again
within a tick of the path healing, not after its 90 s of silence. A connection lost alone
(the rest of the path answering: one API server of several gone behind a load balancer,
a flow dropped by a NAT) leaves no failed request to go by: while a drain waits on it, a
watch quiet for WATCH_QUIET is renewed (kube/watch.py Reflector.renew: a new watch from
its resourceVersion, no list). That costs at most one watch request per WATCH_QUIET, on
a draining node whose pods are quiet; an idle agent never does it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress

from nodeagent.context import Context
from nodeagent.kube.client import Kube, KubeError
from nodeagent.kube.watch import Reflector
from nodeagent.types import Milestone, milestone

log = logging.getLogger(__name__)

TICK = 0.25  # how often the answers are looked at
QUIET = 0.5  # seconds without an answer before a probe asks
PROBE_TIMEOUT = 1.0
# The longest a drain's pod watch may be quiet while the API server answers: a pod's
# departure is then seen within this, even over a dead connection (bookmarks come only
# about every minute).
WATCH_QUIET = 10.0


class PartitionWatch:
    """Says when the API server stops answering `kube`, and when it answers again."""

    def __init__(
        self,
        kube: Kube,
        work: Context,
        say: Callable[[str], None],
        pods_seen: Callable[[], int],
        pods: Reflector | None = None,
    ) -> None:
        """`work` ends the watch; `say` is the drain's progress; `pods_seen` counts the
        pods the drain last saw on the node and still waits for; `pods` is the drain's
        pod watch, renewed when quiet for WATCH_QUIET while the API server answers."""
        self.kube = kube
        self.work = work
        self.say = say
        self.pods_seen = pods_seen
        self.pods = pods
        self._down = False
        self._began = time.monotonic()
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
                self._renew_quiet()
        except Exception:  # the drain must never lose its reports to a bug here
            log.exception("API server reachability watch failed")

    def _probe(self) -> None:
        deadline = self.kube.deadline
        left = PROBE_TIMEOUT if deadline is None else deadline - time.monotonic()
        if left <= 0.1:
            return
        with suppress(KubeError):  # the client noted it (Reachability)
            self.kube.probe(min(PROBE_TIMEOUT, left))

    def _renew_quiet(self) -> None:
        if self.pods is None or self._down:
            return
        # Quiet inside this drain: a watch quiet before it (between two bookmarks, a
        # minute apart) is no reason for a request at every drain's start.
        quiet = min(self.pods.quiet_for(), time.monotonic() - self._began)
        if quiet >= WATCH_QUIET:
            self.pods.renew(
                f"nothing on the node's pod watch for {quiet:.0f}s while the API server "
                "answers and a drain waits on it: renewed (a connection lost alone is "
                "silent)"
            )

    def _tell(self) -> None:
        down = self.kube.reach.down_for()
        if down is not None and not self._down:
            self._down = True
            seen = self.pods_seen()
            # The moment as data (the journal's fields, the harness's timing); the drain's
            # progress line below says it in its own words.
            milestone(
                log,
                Milestone.API_UNREACHABLE,
                "API server %s unreachable during a drain",
                self.kube.host,
                seconds=f"{down:.3f}",
                pods=seen,
            )
            self.say(
                f"{self.kube.reach.why} (no answer for {down:.1f}s); "
                f"{seen} pods last seen on the node"
            )
        elif down is None and self._down:
            self._down = False
            milestone(
                log,
                Milestone.API_ANSWERS_AGAIN,
                "API server %s answers a drain again",
                self.kube.host,
            )
            self.say(f"API server {self.kube.host} answers again")
