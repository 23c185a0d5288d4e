"""nodeagent.drain.detach: which volumes a departure still waits for, and the bounded wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from nodeagent.departure.executor import outcome_condition
from nodeagent.drain.detach import (
    NODE_UNREAD,
    DetachPlan,
    DetachResult,
    VolumeState,
    attachment_name,
    pod_volume_keys,
    still_attached,
    wait_detached,
)
from nodeagent.drain.engine import DrainResult
from nodeagent.kube.client import JSON
from nodeagent.types import DrainOutcome

A = "kubernetes.io/csi/mock^1"
B = "kubernetes.io/csi/mock^2"
C = "kubernetes.io/csi/mock^3"


def node(attached: tuple[str, ...] = (), in_use: tuple[str, ...] = ()) -> JSON:
    status: JSON = {
        "volumesAttached": [{"name": v, "devicePath": ""} for v in attached],
        "volumesInUse": list(in_use),
    }
    return {"metadata": {"name": "n"}, "status": status}


def pod(name: str, *volumes: JSON, namespace: str = "default") -> JSON:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"volumes": list(volumes)}}


def claim(vol: str, claim_name: str) -> JSON:
    return {"name": vol, "persistentVolumeClaim": {"claimName": claim_name}}


@pytest.mark.parametrize(
    ("drained", "kept", "attached", "in_use", "want"),
    [
        # Nothing drained that could be attached: no wait at all.
        (0, 0, (A,), (A,), []),
        (0, 2, (A, B), (A, B), []),
        # Nothing kept: every volume attached or mounted is waited for.
        (1, 0, (A,), (A,), [A]),
        (1, 0, (A,), (), [A]),  # unmounted, not yet detached
        (1, 0, (), (A,), [A]),  # mounted, not (yet) reported attached
        (1, 0, (), (), []),
        (2, 0, (A, B), (B,), [A, B]),
        # Kept pods hold one volume, which stays mounted.
        (1, 1, (A, B), (A, B), [A, B]),  # two mounted for one kept: cannot tell which
        (1, 1, (A, B), (A,), [B]),  # B unmounted: the drained pod's, still attached
        (1, 1, (A,), (A,), []),  # only the kept one is left
        (1, 1, (), (), []),
        (1, 2, (A, B, C), (A, B), [C]),
        (1, 2, (A, B), (A, B), []),
        # An unmounted volume is never a kept pod's, whatever the count.
        (1, 2, (A,), (), [A]),
    ],
)
def test_still_attached(
    drained: int,
    kept: int,
    attached: tuple[str, ...],
    in_use: tuple[str, ...],
    want: list[str],
) -> None:
    state = VolumeState.of(node(attached, in_use))
    assert still_attached(state, DetachPlan(drained, kept)) == want


def test_volume_state_of_a_node_without_status() -> None:
    assert VolumeState.of(None) == VolumeState(frozenset(), frozenset())
    assert VolumeState.of({"metadata": {"name": "n"}}) == VolumeState(frozenset(), frozenset())


@pytest.mark.parametrize(
    ("volume", "want"),
    [
        (claim("data", "www-0"), {"claim:ns/www-0"}),
        ({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}, {"claim:ns/p-scratch"}),
        (
            {"name": "disk", "gcePersistentDisk": {"pdName": "d"}},
            {'gcePersistentDisk:{"pdName": "d"}'},
        ),
        ({"name": "tmp", "emptyDir": {}}, set()),
        ({"name": "cfg", "configMap": {"name": "c"}}, set()),
        ({"name": "inline", "csi": {"driver": "d"}}, set()),  # inline CSI is never attached
    ],
)
def test_pod_volume_keys(volume: JSON, want: set[str]) -> None:
    assert pod_volume_keys(pod("p", volume, namespace="ns")) == want


def test_plan_counts_claims_once_and_leaves_kept_claims_out_of_drained() -> None:
    drained = [pod("a", claim("d", "x")), pod("b", claim("d", "x"), claim("e", "shared"))]
    kept = [pod("ds", claim("d", "shared")), pod("ds2", claim("d", "shared"))]
    assert DetachPlan.of(drained, kept) == DetachPlan(drained=1, kept=1)
    assert not DetachPlan.of([pod("a", {"name": "t", "emptyDir": {}})], []).needed


class FakeNode:
    """A Node source with the Reflector's wait semantics (its own tests cover the watch)."""

    def __init__(self, obj: JSON) -> None:
        self.obj = obj
        self.changed = threading.Condition()

    def set(self, obj: JSON) -> None:
        with self.changed:
            self.obj = obj
            self.changed.notify_all()

    def snapshot(self) -> list[JSON]:
        with self.changed:
            return [self.obj]

    def wait_for(self, predicate: Callable[[], bool], deadline: float) -> bool:
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return predicate()
                self.changed.wait(remaining)
            return True


def test_wait_ends_when_the_volume_is_detached() -> None:
    source = FakeNode(node((A,), (A,)))
    heard: list[list[str]] = []
    timers = [
        threading.Timer(0.1, source.set, (node((A,), ()),)),
        threading.Timer(0.2, source.set, (node((), ()),)),
    ]
    for t in timers:
        t.start()
    result = wait_detached(
        source, DetachPlan(1, 0), time.monotonic() + 10, lambda v: heard.append(list(v))
    )
    assert result.detached and result.volumes == (A,) and not result.skipped
    assert 0.15 < result.waited < 5
    assert heard == [[A], []]
    assert "1 volume(s) detached" in result.summary()


def test_wait_ends_at_the_deadline_naming_what_is_left() -> None:
    source = FakeNode(node((A, B), (B,)))
    result = wait_detached(source, DetachPlan(2, 0), time.monotonic() + 0.3)
    assert not result.detached
    assert result.left == (A, B)
    assert 0.25 < result.waited < 2
    assert A in result.summary() and "still attached" in result.summary()


def test_a_deadline_already_past_reads_once_and_does_not_wait() -> None:
    result = wait_detached(FakeNode(node((A,))), DetachPlan(1, 0), time.monotonic() - 1)
    assert result.left == (A,) and result.waited < 0.1


def test_nothing_to_wait_for_is_skipped() -> None:
    result = wait_detached(FakeNode(node((A,), (A,))), DetachPlan(0, 1), time.monotonic() + 10)
    assert result.skipped and result.detached and result.waited == 0.0


class NoNode(FakeNode):
    def snapshot(self) -> list[JSON]:
        return []


def test_a_node_never_read_is_not_taken_for_detached() -> None:
    result = wait_detached(NoNode(node()), DetachPlan(1, 0), time.monotonic() + 0.2)
    assert not result.detached and result.left == (NODE_UNREAD,)


def with_uid(p: JSON, uid: str, phase: str = "Running") -> JSON:
    p["metadata"]["uid"] = uid
    p["status"] = {"phase": phase}
    return p


def test_plan_after_drain_keeps_what_still_runs_and_not_drained_leftovers() -> None:
    db = with_uid(pod("db-0", claim("d", "data")), "u1")
    ds = with_uid(pod("agent-x", claim("d", "ds-data")), "u2")
    web = with_uid(pod("web", {"name": "t", "emptyDir": {}}), "u3")
    before = [db, ds, web]
    # db-0's object stays, finished, after its eviction; the DaemonSet pod runs on.
    after = [with_uid(pod("db-0", claim("d", "data")), "u1", "Succeeded"), ds]
    assert DetachPlan.after_drain(before, after, {"u1", "u3"}) == DetachPlan(1, 1)
    # A pod the drain left running (stuck, past the ceiling) keeps its claim.
    stuck = with_uid(pod("slow", claim("d", "slow")), "u4")
    assert DetachPlan.after_drain([*before, stuck], [ds, stuck], {"u1"}) == DetachPlan(1, 2)
    assert not DetachPlan.after_drain(before, after, {"u3"}).needed


def test_attachment_name_is_kubernetes_own() -> None:
    # Seen on a real cluster: handle 1 of csi-mock.nodeagent.test on node real-cd750e-a.
    name = attachment_name("kubernetes.io/csi/csi-mock.nodeagent.test^1", "real-cd750e-a")
    assert name == "csi-a9b73ca7479a19510b1491fe4f8b3e40286fd06f9608dea2317604b55f7dbfc6"
    assert attachment_name("kubernetes.io/rbd/pool-image", "n") is None


def test_off_the_node_is_not_detached_until_confirmed() -> None:
    # The attach/detach controller drops the volume from volumesAttached as the detach
    # starts; the attachment goes only when it is done.
    source = FakeNode(node((), ()))
    looks: list[str] = []
    answers = iter([False, False, True])

    def confirm(volume: str) -> bool | None:
        looks.append(volume)
        return next(answers)

    result = wait_detached(
        source, DetachPlan(1, 0), time.monotonic() + 10, confirm=confirm, initial=[A]
    )
    assert result.detached and looks == [A, A, A] and result.volumes == (A,)


def test_unconfirmed_detach_ends_at_the_deadline_naming_it() -> None:
    source = FakeNode(node((), ()))
    result = wait_detached(
        source, DetachPlan(1, 0), time.monotonic() + 0.3, confirm=lambda _v: False, initial=[A]
    )
    assert result.left == (A,) and 0.25 < result.waited < 2


def test_cannot_tell_takes_the_nodes_word_and_kept_volumes_are_not_looked_up() -> None:
    looks: list[str] = []

    def confirm(volume: str) -> None:
        looks.append(volume)

    source = FakeNode(node((B,), (B,)))  # B: the kept pod's, still mounted
    result = wait_detached(
        source, DetachPlan(1, 1), time.monotonic() + 10, confirm=confirm, initial=[A, B]
    )
    assert result.detached and looks == [A]


@pytest.mark.parametrize(
    ("waited", "reason", "words"),
    [
        (None, "Drained", "Drained for poweroff in 3.0s"),
        (DetachResult(0.0, skipped=True), "Drained", "Drained for poweroff in 3.0s"),
        (DetachResult(1.5, (A,)), "Drained", f"1 volume(s) detached in 1.5s: {A}"),
        (DetachResult(9.0, (A, B), (B,)), "VolumesAttached", f"still attached after 9.0s: {B}"),
    ],
)
def test_the_drained_condition_records_the_wait(
    waited: DetachResult | None, reason: str, words: str
) -> None:
    result = DrainResult("n", DrainOutcome.DRAINED, 3.0, detach=waited)
    cond = outcome_condition("poweroff", result)
    assert (cond.status, cond.reason) == ("True", reason)
    assert words in cond.message
    assert (waited is None or waited.skipped) == (cond.message == "Drained for poweroff in 3.0s")
