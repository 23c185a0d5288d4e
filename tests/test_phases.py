"""A drain's account of its time: the phases line, as the summary writes it and the bench
reads it back, and the process's age it starts from."""

from __future__ import annotations

import time

from hack.drainphases import own_phases
from nodeagent.drain.engine import DrainResult
from nodeagent.drain.phases import Phase, Phases, process_age
from nodeagent.drain.summary import render


def test_phases_are_rendered_in_the_drains_order_and_read_back() -> None:
    result = DrainResult("n1")
    result.phases.add(Phase.GONE, 0.5)
    result.phases.add(Phase.STARTUP, 0.25)
    result.phases.add(Phase.EVICT, 1.0)
    result.phases.add(Phase.EVICT, 0.25)  # a phase met twice counts once, summed
    text = render(result)
    assert "  phases: start-up 0.25s, evictions 1.25s, pods gone 0.50s" in text.splitlines()
    assert own_phases(text) == (("start-up", 0.25), ("evictions", 1.25), ("pods gone", 0.5))


def test_a_result_without_phases_says_nothing_of_them() -> None:
    assert "phases" not in render(DrainResult("n1"))
    assert own_phases("floor: drained 3 pods from n1 in 0.52s") == ()


def test_a_timed_phase_counts_its_time_even_when_it_raises() -> None:
    phases = Phases()
    try:
        with phases.timed(Phase.LIST):
            time.sleep(0.02)
            raise RuntimeError("the list failed")
    except RuntimeError:
        pass
    assert phases.seconds[Phase.LIST] >= 0.02


def test_the_process_age_grows_with_the_process() -> None:
    first = process_age()
    assert first is not None and first > 0
    time.sleep(0.05)
    second = process_age()
    assert second is not None and second >= first + 0.04
