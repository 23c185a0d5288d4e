"""Node conditions as data, written with a status patch (as node-problem-detector does).

Two condition types belong to the agent:

- `NodeAgentReady`: a heartbeat. `lastHeartbeatTime` moves at every write;
  `lastTransitionTime` only when the status changes. The reason says what is worth
  knowing about the agent (`AgentRunning`, `InhibitDelayTooShort`,
  `KubeletGracefulShutdown`).
- `NodeAgentDrained`: the last departure. `True/Drained` after a completed drain
  (with the wait for its volumes to detach, nodeagent/drain/detach.py), or
  `True/VolumesAttached` when that wait ran out (naming the volumes);
  `False` with `Draining`, `WaitingForDetach` (naming the volumes still attached),
  `Blocked` (naming the PDBs and pods), `NotDraining`, or `UncleanShutdown` (a boot
  ended without a drain).

Writes go through one background thread, latest-wins per type, so reporting never
holds up a drain when the API server is slow, and the order of writes is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from nodeagent.kube.backoff import Backoff, Retries
from nodeagent.kube.client import JSON, ApiError, Kube, api_stamp, node_path
from nodeagent.objects import condition

# The one reader of a condition by type is nodeagent/objects.py; named here for its callers.
find = condition

log = logging.getLogger(__name__)

READY = "NodeAgentReady"
DRAINED = "NodeAgentDrained"


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str

    def as_status(self, previous: JSON | None, now: str) -> JSON:
        """The status entry, keeping the transition time while the status holds."""
        same = previous is not None and previous.get("status") == self.status
        transition = previous.get("lastTransitionTime") if same and previous else None
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message[:1024],
            "lastHeartbeatTime": now,
            "lastTransitionTime": transition or now,
        }


class ReadyReason(StrEnum):
    """Why NodeAgentReady says what it says, most important last."""

    RUNNING = "AgentRunning"
    INHIBIT_DELAY_TOO_SHORT = "InhibitDelayTooShort"
    TERMINATION_GRACE_TOO_SHORT = "TerminationGraceTooShort"
    KUBELET_GRACEFUL_SHUTDOWN = "KubeletGracefulShutdown"


def agent_ready(message: str = "nodeagent is running") -> Condition:
    return Condition(READY, "True", ReadyReason.RUNNING, message)


def inhibit_delay_too_short(message: str) -> Condition:
    return Condition(READY, "True", ReadyReason.INHIBIT_DELAY_TOO_SHORT, message)


def agent_ready_with(notes: Mapping[ReadyReason, str]) -> Condition:
    """NodeAgentReady from what the agent found: the weightiest finding names the reason
    (the kubelet racing the drain breaks the PDB guarantee; a short logind delay only cuts
    the drain), every finding goes in the message."""
    if not notes:
        return agent_ready()
    order = list(ReadyReason)
    reason = max(notes, key=order.index)
    message = "; ".join(notes[r] for r in sorted(notes, key=order.index, reverse=True))
    return Condition(READY, "True", reason, message)


def agent_removed() -> Condition:
    # Unknown, as the kubelet leaves its own conditions when it stops posting: nothing on the
    # node reports any more, which is neither healthy nor failed.
    return Condition(
        READY, "Unknown", "AgentRemoved", "nodeagent was uninstalled; nothing drains this node"
    )


def draining(reason: str) -> Condition:
    return Condition(DRAINED, "False", "Draining", f"Draining for {reason}")


VOLUMES_ATTACHED = "VolumesAttached"
WAITING_FOR_DETACH = "WaitingForDetach"


def drained(reason: str, seconds: float, detach: str = "") -> Condition:
    """`detach`: how the wait for the drained volumes went, when there was one."""
    note = f"; {detach}" if detach else ""
    return Condition(DRAINED, "True", "Drained", f"Drained for {reason} in {seconds:.1f}s{note}")


def drained_volumes_attached(reason: str, seconds: float, detach: str) -> Condition:
    """Drained, but the wait for its volumes to detach ran out: released anyway."""
    return Condition(
        DRAINED, "True", VOLUMES_ATTACHED, f"Drained for {reason} in {seconds:.1f}s; {detach}"
    )


def waiting_for_detach(reason: str, volumes: list[str]) -> Condition:
    return Condition(
        DRAINED,
        "False",
        WAITING_FOR_DETACH,
        f"Drained for {reason}; waiting for {len(volumes)} volume(s) to detach: "
        + ", ".join(volumes),
    )


def blocked(reason: str, pdbs: list[str], pods: list[str]) -> Condition:
    by = f" by PDB {', '.join(pdbs)}" if pdbs else ""
    return Condition(
        DRAINED, "False", "Blocked", f"Drain for {reason} blocked{by}; left: {', '.join(pods)}"
    )


def not_draining(message: str = "The node is not being drained") -> Condition:
    return Condition(DRAINED, "False", "NotDraining", message)


def unclean_shutdown(previous_boot: str) -> Condition:
    return Condition(
        DRAINED,
        "False",
        "UncleanShutdown",
        f"Boot {previous_boot} ended without a drain by nodeagent",
    )


def heartbeat_wait(last_write: float, now: float, interval: float) -> float:
    """Seconds until NodeAgentReady needs refreshing (0: now). Every condition write
    refreshes it, so the heartbeat waits for `interval` after the last write of any kind."""
    if not last_write:
        return 0.0
    return max(0.0, last_write + interval - now)


def patch_node_conditions(kube: Kube, node: JSON, conditions: list[Condition]) -> JSON:
    """Write `conditions` on the Node status; other conditions (the kubelet's) stay."""
    now = api_stamp()
    entries = [c.as_status(find(node, c.type), now) for c in conditions]
    name = node["metadata"]["name"]
    return kube.strategic_patch(node_path(name) + "/status", {"status": {"conditions": entries}})


class ConditionWriter:
    """Writes Node conditions from one background thread, latest per type wins.

    `current` is the agent's view of its own Node (from its watch), used to keep
    transition times. A failed write is tried again, with what was set meanwhile, on the
    shared backoff (kube/backoff.py: 1 s doubling to 30 s, with jitter, and at once when
    the API server answers again): at a fixed interval every node of a fleet would call
    an API server in an outage in step, for as long as it lasts. A Node
    deleted (`gone`, or a write answered 404) is final for that object: nothing is written
    or retried until the kubelet registers a new one (`observe` with another UID), and
    then the latest of each condition is written at once, not at the next heartbeat.
    """

    def __init__(self, kube: Kube, node_name: str, backoff: Backoff | None = None) -> None:
        self.kube = kube
        self.retries = Retries(kube.reach, backoff)  # the background writer's failures
        self.node_name = node_name
        self.node: JSON = {"metadata": {"name": node_name}}
        self._pending: dict[str, Condition] = {}
        self._cond = threading.Condition()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        # One write at a time, so a heartbeat can never land an older condition after
        # the background writer landed a newer one.
        self._writing = threading.Lock()
        self._ride_along: Callable[[], list[Condition]] = list
        self.last_write = 0.0  # monotonic time of the last successful write (0: none yet)
        self._gone = ""  # the UID of the Node deleted under the agent ("": none)
        self._parked: dict[str, Condition] = {}  # what it waits to write on the next Node

    def ride_along(self, conditions: Callable[[], list[Condition]]) -> None:
        """Conditions refreshed with every write (NodeAgentReady): any write is then a
        heartbeat too, and the heartbeat itself can wait for a quiet interval."""
        self._ride_along = conditions

    def observe(self, node: JSON) -> None:
        with self._cond:
            self.node = node
            uid = node["metadata"].get("uid", "")
            if self._gone and uid and uid != self._gone and "status" in node:
                self._gone = ""  # registered again: the latest of each, written now
                self._pending = self._parked | self._pending
                self._parked = {}
                self._idle.clear()
                self._cond.notify()

    def gone(self, uid: str) -> None:
        """The Node object `uid` was deleted: nothing more is written to it."""
        with self._cond:
            self._gone = uid

    @property
    def waiting_for_node(self) -> bool:
        with self._cond:
            return bool(self._gone)

    def set(self, *conditions: Condition) -> None:
        with self._cond:
            for c in conditions:
                self._pending[c.type] = c
            self._idle.clear()
            self._cond.notify()
        self._ensure_thread()

    def write_now(self, *conditions: Condition) -> None:
        """Write synchronously (the heartbeat: its success is the loop's progress)."""
        self.write_latest(lambda: list(conditions))

    def write_latest(self, conditions: Callable[[], list[Condition]]) -> None:
        """Write synchronously what `conditions()` says once no other write is under way:
        a condition changed meanwhile (and set()) is then written after this one. Nothing
        while the Node is deleted (the next one is written at its registration)."""
        with self._writing:
            with self._cond:
                node = self.node
                if self._gone:
                    self._parked |= {c.type: c for c in conditions()}
                    return
            if "status" not in node:  # not observed yet: keep transition times across restarts
                node = self.kube.get(node_path(self.node_name))
            self._write(node, conditions())

    def _write(self, node: JSON, conditions: list[Condition]) -> None:
        given = {c.type for c in conditions}
        extra = [c for c in self._ride_along() if c.type not in given]
        self.observe(patch_node_conditions(self.kube, node, conditions + extra))
        self.last_write = time.monotonic()

    def flush(self, timeout: float) -> bool:
        return self._idle.wait(timeout)

    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="conditions", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            self.retries.wait()
            with self._cond:
                while not self._pending:
                    self._idle.set()
                    self._cond.wait()
                batch, self._pending = list(self._pending.values()), {}
                node = self.node
                if self._gone:
                    self._parked |= {c.type: c for c in batch}
                    continue
            try:
                with self._writing:
                    self._write(node, batch)
                self.retries.succeeded()
            except ApiError as exc:
                if exc.status != 404:
                    self._retry(batch, exc)
                    continue
                self.retries.succeeded()  # an answer, and nothing to try again
                with self._cond:  # deleted: final for this object (the watch says it)
                    self._gone = self._gone or node["metadata"].get("uid", "") or "?"
                    self._parked |= {c.type: c for c in batch}
            except Exception as exc:  # the writer thread must outlive any failure
                self._retry(batch, exc)

    def _retry(self, batch: list[Condition], exc: Exception) -> None:
        """Keep `batch` for the next try (the loop waits for it to be due)."""
        wait = self.retries.failed()
        log.warning(
            "could not write node conditions (failure %d in a row): %s; retrying in %.1fs, "
            "or at once when the API server answers again",
            self.retries.failures,
            exc,
            wait,
        )
        with self._cond:
            for c in batch:  # a newer condition of the same type wins
                self._pending.setdefault(c.type, c)
