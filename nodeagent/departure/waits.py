"""What a drain waits for once its cordon stands, inside its own deadline: another actor's
drain of the same node (at a shutdown), and after the evictions the volumes of the pods it
moved. Neither writes the fence (executor.py does); both report what is left."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from nodeagent import metrics
from nodeagent.context import Context
from nodeagent.drain import detach, podfilter
from nodeagent.drain.engine import Drain
from nodeagent.kube.client import JSON, KubeError
from nodeagent.report import conditions
from nodeagent.report.events import WARNING
from nodeagent.types import FinishedPods, Reason

log = logging.getLogger(__name__)

OTHER_DRAIN_RESERVE = 10.0  # seconds kept, at least, to drain what another drainer left


def to_move(pods: Sequence[JSON], finished: FinishedPods) -> list[JSON]:
    """The pods a drain would still have to move: not left alone by the drain's filter
    (DaemonSet, mirror, finished); those terminating already count until they are gone."""
    return [p for p in pods if podfilter.skip_reason(p, finished) is None]


def other_drain_until(start: float, deadline: float) -> float:
    """Until when a shutdown waits for another actor's drain: its deadline less a reserve
    for draining what is left (half the budget, at least OTHER_DRAIN_RESERVE seconds)."""
    return deadline - max(OTHER_DRAIN_RESERVE, (deadline - start) / 2)


def wait_for_other_drain(drain: Drain, who: str, reason: Reason) -> None:
    """At a shutdown, another actor drains the node (`who`): evict nothing while its drain
    goes on, until no pod the agent would move is bound (those it evicted gone too) or the
    reserve for finishing comes; the drain then moves what is left (often nothing: a pod
    still terminating is asked again, which changes nothing). logind's lock is held."""
    now = time.monotonic()
    until = other_drain_until(now, drain.deadline)
    finished = drain.opts.finished_pods
    left = to_move(drain.watched_pods(), finished)
    if not left or until <= now:
        return
    log.info(
        "%s: %s is draining this node (%d pod(s) to go); waiting %.0fs at most, then "
        "draining what is left",
        reason,
        who,
        len(left),
        until - now,
    )
    drain.wait_pods(lambda pods: drain.cancelled or not to_move(pods, finished), until)
    left = to_move(drain.watched_pods(), finished)
    if not left:
        log.info("%s: %s drained the node in %.1fs", reason, who, time.monotonic() - now)
    else:
        log.info("%s: %d pod(s) left after %s's drain; draining them", reason, len(left), who)


def wait_for_detach(
    drain: Drain,
    node: JSON,
    before: list[JSON],
    ctx: Context | None,
    detaching: Callable[[Sequence[str]], None] | None,
) -> detach.DetachResult:
    """After the drain, until the volumes of the pods it drained are unmounted and
    detached (nodeagent/drain/detach.py), inside the drain's own deadline: the departure
    is done, and its lock released, only then. Ran out: said in the log, an Event and the
    metric (the caller's condition says it too); the departure goes on all the same."""
    result = drain.result
    uids = {p.uid for p in result.evicted + result.deleted_for_kubelet + result.forced}
    try:
        waited = detach.wait_after_drain(
            drain.kube, drain.node_name, before, uids, drain.deadline, detaching, node, ctx
        )
    except KubeError as exc:
        log.warning("detach wait: could not read the node: %s", exc)
        waited = detach.DetachResult(0.0, left=(detach.NODE_UNREAD,))
    log.info("detach wait: %s", waited.summary())
    metrics.DETACH_WAITS.labels(waited.result).inc()
    if not waited.skipped:
        metrics.DETACH_SECONDS.observe(waited.waited)
    if not waited.detached and drain.events:
        message = f"Drained for {drain.opts.reason} with {waited.summary()}"
        drain.events.node(node, conditions.VOLUMES_ATTACHED, message, WARNING)
    return waited
