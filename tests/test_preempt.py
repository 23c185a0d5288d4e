"""Pre-emption as a table: does a signal stop the running drain at once, or wait its turn
behind it (nodeagent/fence/decision.preempts; the worker's producers ask it)."""

from __future__ import annotations

import pytest

from nodeagent.fence.decision import preempts
from nodeagent.types import Occasion, Reason

SHUTDOWN, CANCELLED, NODE, SETTLED = (
    Occasion.SHUTDOWN,
    Occasion.CANCELLED,
    Occasion.NODE,
    Occasion.SETTLED,
)
EVACUATE, WARNING, POWEROFF, STOP = Reason.EVACUATE, Reason.WARNING, Reason.POWEROFF, Reason.STOP


@pytest.mark.parametrize(
    ("occasion", "running", "asked", "drains", "stops"),
    [
        # A shutdown owns the node: it stops an evacuation's or a warning's drain ...
        (SHUTDOWN, EVACUATE, True, True, True),
        (SHUTDOWN, WARNING, True, True, True),
        # ... never another shutdown's (the same shutdown announced twice, logind and SIGTERM).
        (SHUTDOWN, POWEROFF, True, True, False),
        (SHUTDOWN, STOP, False, False, False),
        # A cancel stops the shutdown's drain, never a drain the node or the cloud asks for.
        (CANCELLED, POWEROFF, True, True, True),
        (CANCELLED, STOP, True, True, True),
        (CANCELLED, EVACUATE, False, False, False),
        (CANCELLED, WARNING, False, False, False),
        # The Node or the warnings changed: the drain whose ask is gone stops ...
        (NODE, EVACUATE, False, True, True),
        (NODE, WARNING, True, False, True),
        # ... the one still asked for goes on ...
        (NODE, EVACUATE, True, False, False),
        (NODE, WARNING, False, True, False),
        # ... and a shutdown's drain waits for nothing the Node says.
        (NODE, POWEROFF, False, False, False),
        # After start: never.
        (SETTLED, EVACUATE, False, False, False),
        (SETTLED, WARNING, False, False, False),
        (SETTLED, POWEROFF, False, False, False),
    ],
)
def test_preempts(
    occasion: Occasion, running: Reason, asked: bool, drains: bool, stops: bool
) -> None:
    assert bool(preempts(occasion, running, asked, drains)) is stops


def test_every_occasion_and_running_reason_has_an_answer() -> None:
    # The table's promise: nothing raises, and a shutdown's own drain is only ever stopped
    # by its cancel.
    for occasion in Occasion:
        for running in Reason:
            for asked in (False, True):
                for drains in (False, True):
                    why = preempts(occasion, running, asked, drains)
                    if why and not running.while_up:
                        assert occasion is Occasion.CANCELLED, (occasion, running)
