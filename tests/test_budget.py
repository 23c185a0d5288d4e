"""One departure's time, computed once (nodeagent/departure/budget.py): a table of what
each producer's budget says, pure and fast."""

from __future__ import annotations

import pytest

from nodeagent.departure import budget
from nodeagent.departure.budget import Budget
from nodeagent.host.logindconf import FINISH_GRACE, LOGIND_MARGIN

NOW = 1000.0
DEADLINE = 120.0

CASES = {
    # logind's delay is long enough: the whole deadline
    "logind, long delay": (
        budget.logind(NOW, DEADLINE, 300.0),
        Budget(1120.0, 1123.0, 1125.0, 1130.0),
    ),
    # logind's delay is short: cut to the delay less the margin for closing the lock
    "logind, short delay": (
        budget.logind(NOW, DEADLINE, 30.0),
        Budget(1025.0, 1028.0, 1030.0, 1035.0),
    ),
    # shorter than the margin itself: never below one second
    "logind, delay below the margin": (
        budget.logind(NOW, DEADLINE, 5.0),
        Budget(1001.0, 1004.0, 1006.0, 1011.0),
    ),
    # logind's default 5 s delay with a 1 s deadline
    "logind, short delay, short deadline": (
        budget.logind(NOW, 1.0, 5.0),
        Budget(1001.0, 1004.0, 1006.0, 1011.0),
    ),
    # delay unknown (the bus would not say): the configured deadline
    "logind, unknown delay": (
        budget.logind(NOW, DEADLINE, None),
        Budget(1120.0, 1123.0, 1125.0, 1130.0),
    ),
    # SIGTERM without logind's warning: nothing but the deadline bounds it
    "SIGTERM": (budget.sigterm(NOW, DEADLINE), Budget(1120.0, 1123.0, 1125.0, 1130.0)),
    "SIGTERM, short deadline": (budget.sigterm(NOW, 10.0), Budget(1010.0, 1013.0, 1015.0, 1020.0)),
    # an evacuation: the deadline, then the engine's own finish grace; nobody waits on it
    "evacuation": (budget.evacuation(NOW, DEADLINE), Budget(1120.0, 1130.0, 1130.0, 1130.0)),
    "evacuation, short deadline": (
        budget.evacuation(NOW, 10.0),
        Budget(1010.0, 1020.0, 1020.0, 1020.0),
    ),
}


@pytest.mark.parametrize("got,want", CASES.values(), ids=CASES.keys())
def test_budget(got: Budget, want: Budget) -> None:
    assert got == want


@pytest.mark.parametrize("got,_want", CASES.values(), ids=CASES.keys())
def test_every_budget_ends_in_order(got: Budget, _want: Budget) -> None:
    assert NOW < got.drain_until < got.finish_until <= got.stop_until <= got.extend_until


def test_a_shutdown_drain_finishes_inside_loginds_delay() -> None:
    for delay in (5.0, 30.0, 90.0, 124.0, 128.0, 300.0):
        fixed = budget.logind(NOW, DEADLINE, delay)
        assert fixed.finish_grace == FINISH_GRACE
        if delay - LOGIND_MARGIN >= budget.SHORTEST_DRAIN:
            # the result is recorded before logind stops waiting
            assert fixed.finish_until <= NOW + delay - LOGIND_MARGIN + FINISH_GRACE


def test_only_a_shutdown_logind_announced_under_the_kubelets_lock_says_the_kubelet_kills() -> None:
    """What was seen when the signal came travels with the budget to the drain's options."""
    from nodeagent.config import Config
    from nodeagent.departure.executor import drain_options
    from nodeagent.types import Reason

    cfg = Config(node="n")
    for fixed, kills in (
        (budget.logind(NOW, DEADLINE, 300.0, kubelet_kills=True), True),
        (budget.logind(NOW, DEADLINE, 300.0), False),
        (budget.sigterm(NOW, DEADLINE), False),
    ):
        assert fixed.kubelet_kills is kills
        assert drain_options(cfg, Reason.POWEROFF, fixed, NOW).kubelet_kills is kills
    evacuation = budget.evacuation(NOW, DEADLINE)
    assert not drain_options(cfg, Reason.EVACUATE, evacuation, NOW).kubelet_kills


def test_drain_seconds_left_and_the_short_delay_check() -> None:
    fixed = budget.sigterm(NOW, DEADLINE)
    assert fixed.drain_seconds(NOW + 20) == 100.0
    assert fixed.drain_seconds(NOW + 500) == 0.0
    assert budget.inhibit_delay_short(DEADLINE, 124.0)
    assert not budget.inhibit_delay_short(DEADLINE, 125.0)


def test_a_sigterm_mid_drain_names_its_likely_cause_and_no_more() -> None:
    from nodeagent.departure.sigterm import mid_drain_stop_message

    said = mid_drain_stop_message(37.4, 30.0)
    assert said.startswith("SIGTERM 37s before the drain deadline, with a grace of at most 30s")
    # The kubelet's graceful shutdown is the likely cause, not a certainty: a liveness
    # probe or a rollout sends the same signal.
    assert "most likely the kubelet's graceful node shutdown" in said
    assert "liveness probe" in said
    assert "grace of unknown" in mid_drain_stop_message(5.0, 0.0)
