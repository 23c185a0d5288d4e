"""A drain that finds the node already drained by an earlier drain of the agent's: what the
Node's Events say about it. Pure, no I/O.

An evacuation drains the node and its cordon stays; when the machine then goes down, the
shutdown's drain takes that cordon over (marker.cordon rewrites the marker for its reason)
and finds nothing to move. Said the way a first drain is said, the Node's Events would
carry Cordoned, DrainStarted and Drained a second time, 0.05 s apart, and read as a second
departure. Instead the cordon that already stood is no `Cordoned` (the executor's
`Fenced.REASONED`), and one Event replaces DrainStarted and Drained:

| this drain (the node's pods as watched once the cordon stands) | Event |
| --- | --- |
| a pod to move (`drained_before` is "") | the engine's: DrainStarted, ..., Drained |
| nothing to move, and it ends so | `AlreadyDrained`: which drain emptied the node |
| a pod bound in between, moved | `Drained`: after which drain, how many moved |
| a pod bound in between, left | `DrainTimedOut` or `DrainIncomplete` (Warning) |
| called off | none: whoever called it off says what follows |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.drain.engine import DrainResult
from nodeagent.drain.podfilter import skip_reason
from nodeagent.fence.marker import NodeFence
from nodeagent.kube.client import JSON
from nodeagent.report.events import NORMAL, WARNING
from nodeagent.types import FINISHED, DrainOutcome, FinishedPods

ALREADY_DRAINED = "AlreadyDrained"


@dataclass(frozen=True)
class Said:
    """One Event on the Node."""

    reason: str
    message: str
    kind: str = NORMAL


def drained_before(fence: NodeFence, pods: Sequence[JSON], finished: FinishedPods) -> str:
    """The reason of the agent's finished drain written on the Node (`fence`, as read before
    this drain's cordon) when none of `pods` (the node's, as watched once the cordon
    stands) is one a drain moves: this drain has nothing to do, and its Events are said as
    one (`said`). "" when there was no such drain, or something is to move."""
    if not fence.recorded or fence.result not in FINISHED:
        return ""
    if any(skip_reason(pod, finished) is None for pod in pods):
        return ""
    return fence.reason or "an earlier departure"


def said(before: str, started_at: str, reason: str, result: DrainResult) -> Said | None:
    """The one Event for a drain for `reason` that found the node drained for `before`
    (whose drain began at `started_at`, the marker's; "" when unknown), once it ended as
    `result`."""
    if result.outcome not in (*FINISHED, DrainOutcome.TIMED_OUT, DrainOutcome.INCOMPLETE):
        return None  # called off (or a dry run)
    since = f" (its drain began {started_at})" if started_at else ""
    moved = len(result.evicted) + len(result.deleted_for_kubelet)
    if not moved and not result.blocked:
        return Said(
            ALREADY_DRAINED,
            f"Nothing left to drain for {reason}: the node was drained for {before}{since}; "
            f"the cordon stays, now for {reason}",
        )
    what = (
        f"Drained for {reason} after the {before} drain{since}: {moved} pod(s) bound since, "
        f"moved in {result.seconds:.1f}s"
    )
    if not result.blocked:
        return Said("Drained", what)
    left = ", ".join(f"{p.ref} ({p.detail})" for p in result.blocked)
    kind = "DrainTimedOut" if result.outcome is DrainOutcome.TIMED_OUT else "DrainIncomplete"
    return Said(kind, f"{what}; left: {left}", WARNING)
