"""A drain's result the API server did not take, written once it answers again.

A drain that ends while the API server is unreachable (a partition at its end) cannot
write its result on the Node: the marker's `drain-result`, which every later decision
reads (a finished evacuation or warning drain is not done again) and the next boot too (a
drained departure is no unclean one). The NodeAgentDrained condition is kept and written
again by the condition writer; the result was written once, with the drain's own time,
and dropped. Here it is kept, while the node still runs, and written again:

- on a thread of its own, so the worker never waits on an unreachable API server;
- on the agent's one retry backoff (kube/backoff.py: 1 s doubling to 30 s, with jitter, and
  at once, at most one try a second, when the client hears the API server answer again);
- for RETRY_FOR seconds and MAX_ATTEMPTS tries at most, then given up in one line;
- only over that drain's own marker (`Unrecorded.applies`: its reason, no result yet,
  begun before the result was lost, the same Node object), checked on the Node read and
  written with that read's resourceVersion; the executor forgets it at its next fence
  write (a new drain's cordon, an uncordon), so it never lands on a newer fence.

Until it lands, the worker decides on the Node with the result it holds (`overlay`): a
finished drain is not started again because its record is late.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.fence import marker
from nodeagent.kube.backoff import Retries
from nodeagent.kube.client import JSON, ApiError, Kube, KubeError, api_time
from nodeagent.types import DrainOutcome, Milestone, milestone

log = logging.getLogger(__name__)

RETRY_FOR = 600.0  # a result not written by then is given up
MAX_ATTEMPTS = 30  # tries at most (the backoff alone reaches RETRY_FOR in about 25)
ATTEMPT_SECONDS = 5.0  # each try's requests (a read and a write) end by then
TICK = 0.5  # how often the thread looks for an answer heard meanwhile


@dataclass(frozen=True)
class Unrecorded:
    """A drain's outcome not yet written on its Node."""

    reason: str  # the marker's drain reason
    outcome: DrainOutcome
    uid: str  # the Node object the drain ran on ("": not known)
    lost_at: float  # wall clock, when the write failed
    since: float  # monotonic, the same moment

    def applies(self, node: JSON) -> bool:
        """`node` still carries that drain's marker (or its record under another's
        cordon) without a result: the same reason, begun before the result was lost, on
        the same object."""
        fence = marker.NodeFence.of(node)
        began = api_time(fence.started_at)
        uid = node["metadata"].get("uid", "")
        return (
            fence.reason == self.reason
            and not fence.result
            and began is not None
            and began <= self.lost_at
            and (not self.uid or uid == self.uid)
        )


def overlay(node: JSON, late: Unrecorded | None) -> JSON:
    """`node` as it reads once `late` is written (unchanged when it does not apply)."""
    if late is None or "spec" not in node or not late.applies(node):
        return node
    meta = dict(node["metadata"])
    meta["annotations"] = dict(meta.get("annotations") or {}) | {
        marker.DRAIN_RESULT: str(late.outcome)
    }
    return dict(node, metadata=meta)


Write = Callable[[Kube, Unrecorded], bool]  # True: written; False: no longer applies


class LateResult:
    """Keeps at most one unwritten result and writes it (`write`, the executor's) when
    the API server answers again."""

    def __init__(self, kube: Kube, write: Write) -> None:
        self.kube = kube
        self.write = write
        self._lock = threading.Lock()
        self._late: Unrecorded | None = None
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> Unrecorded | None:
        with self._lock:
            return self._late

    def keep(self, late: Unrecorded) -> None:
        """Write `late` once the API server answers (it replaces any older one)."""
        milestone(
            log,
            Milestone.RESULT_KEPT,
            "drain result %s not taken by the API server: kept, written when it answers",
            late.outcome,
            reason=late.reason,
            outcome=late.outcome,
        )
        with self._lock:
            self._late = late
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="late-result", daemon=True)
                self._thread.start()
        self._wake.set()

    def forget(self) -> None:
        """A fence write of the executor's: the result kept belongs to a fence gone."""
        with self._lock:
            self._late = None

    def _run(self) -> None:
        while True:
            late = self.pending
            if late is None:
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                self._retry(late)
            except Exception:  # the thread outlives any bug; that result is given up
                log.exception("writing the drain's result again failed")
                self._drop(late)

    def _retry(self, late: Unrecorded) -> None:
        """Try until written, no longer needed, or out of tries or time."""
        retries = Retries(self.kube.reach)
        retries.failed()  # the write at the drain's end
        while self.pending is late:
            now, attempts = time.monotonic(), retries.failures - 1
            if now - late.since > RETRY_FOR or attempts >= MAX_ATTEMPTS:
                _tried(
                    Milestone.RESULT_DROPPED,
                    late,
                    attempts,
                    now - late.since,
                    "drain result %s not written on the Node after %d tries in %.0fs: "
                    "given up (the NodeAgentDrained condition says it)",
                    late.outcome,
                    attempts,
                    now - late.since,
                    severity=logging.WARNING,
                )
                self._drop(late)
                return
            if now < (due := retries.due()):
                self._wake.wait(min(TICK, due - now))
                self._wake.clear()
                continue
            if self._attempt(late, attempts + 1):
                return
            retries.failed()

    def _attempt(self, late: Unrecorded, attempt: int) -> bool:
        """One try; True when nothing more is to be done."""
        kube = self.kube.bounded(time.monotonic() + ATTEMPT_SECONDS)
        try:
            written = self.write(kube, late)
        except ApiError as exc:
            if exc.status in (403, 404):  # not ours to write, or the Node is gone
                _tried(
                    Milestone.RESULT_DROPPED,
                    late,
                    attempt,
                    time.monotonic() - late.since,
                    "drain result %s not written on the Node: %s",
                    late.outcome,
                    exc,
                    severity=logging.WARNING,
                )
                self._drop(late)
                return True
            log.info("drain result %s: try %d failed: %s", late.outcome, attempt, exc)
            return False
        except KubeError as exc:
            log.info("drain result %s: try %d failed: %s", late.outcome, attempt, exc)
            return False
        took = time.monotonic() - late.since
        if written:
            _tried(
                Milestone.RESULT_WRITTEN,
                late,
                attempt,
                took,
                "drain result %s written on the Node %.1fs after the API server did not "
                "take it (try %d)",
                late.outcome,
                took,
                attempt,
            )
        else:
            log.info("drain result %s no longer applies: its fence changed", late.outcome)
        self._drop(late)
        return True

    def _drop(self, late: Unrecorded) -> None:
        with self._lock:
            if self._late is late:
                self._late = None


def _tried(
    which: Milestone,
    late: Unrecorded,
    tries: int,
    seconds: float,
    message: str,
    *args: object,
    severity: int = logging.INFO,
) -> None:
    """A kept result's end as a milestone: its drain, and what the tries took."""
    milestone(
        log,
        which,
        message,
        *args,
        severity=severity,
        reason=late.reason,
        outcome=late.outcome,
        seconds=f"{seconds:.3f}",
        tries=tries,
    )
