"""The cancellation and deadline object: children follow parents, never the reverse."""

from __future__ import annotations

import threading
import time

from nodeagent.context import Context


def test_a_child_never_outlives_its_parent() -> None:
    parent = Context.background().with_timeout(5)
    assert parent.with_timeout(60).deadline == parent.deadline
    assert parent.with_timeout(1).deadline < parent.deadline
    assert Context.background().remaining() == float("inf")


def test_cancelling_a_parent_cancels_children_and_runs_callbacks_once() -> None:
    root = Context.background()
    child = root.child().with_timeout(60)
    woken: list[str] = []
    child.on_cancel(lambda: woken.append("child"))
    root.cancel()
    root.cancel()
    assert child.cancelled and child.done and woken == ["child"]
    late = root.child()
    assert late.cancelled  # a child of a cancelled context starts cancelled
    late.on_cancel(lambda: woken.append("late"))
    assert woken == ["child", "late"]


def test_cancelling_a_child_leaves_the_parent() -> None:
    root = Context.background()
    child = root.child()
    child.cancel()
    assert child.cancelled and not root.cancelled


def test_wait_returns_on_cancel_and_is_cut_by_the_deadline() -> None:
    ctx = Context.background().child()
    threading.Timer(0.05, ctx.cancel).start()
    started = time.monotonic()
    assert ctx.wait(30) is True
    assert time.monotonic() - started < 5
    forever = Context.background().child()
    threading.Timer(0.05, forever.cancel).start()
    assert forever.wait(float("inf")) is True  # no deadline, no timeout: until cancelled
    short = Context.background().with_timeout(0.05)
    assert short.wait(30) is False and short.expired and short.done and not short.cancelled


def test_released_children_are_not_held_by_a_long_lived_parent() -> None:
    root = Context.background()
    for _ in range(100):
        with root.with_timeout(1):
            pass
    assert not root._children
