"""The fence nobody else undoes, as tables (docs/architecture.md, "The agent's taint"):
what of the agent's fence is put back while its departure holds, what its writes carry over
of everyone else's, and who is named as the last writer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nodeagent.fence import marker
from nodeagent.fence.decision import Observed, decide, reason_holds
from nodeagent.fence.marker import NodeFence
from nodeagent.fence.refence import (
    CONTESTED_AFTER,
    CONTESTED_WINDOW,
    Refences,
    contested_message,
    last_writer,
)
from nodeagent.fence.warning import Warned
from nodeagent.types import EvacuatePolicy, Occasion, Policy, Reason, Step
from tests.test_warning import SPOT

BOOT = "boot-2"
EVAC = "nodeagent.io/evacuate"
SPOT_WARNED = Warned(SPOT, Policy.DRAIN)


NO_LB: dict[str, Any] = {"excluded": False, "lb": None}  # the agent set no LB label


def fence(
    reason: str,
    *,
    cordon: bool = True,
    marked: bool = True,
    tainted: bool = True,
    lb: str | None = "nodeagent",
    excluded: bool = True,
    warning_id: str = "",
    boot: str = BOOT,
) -> NodeFence:
    return NodeFence(
        cordon,
        marked,
        reason,
        "t1",
        boot,
        "",
        excluded_lb=excluded,
        warning_id=warning_id,
        tainted=tainted,
        lb_label=lb,
    )


def seen(f: NodeFence, occasion: Occasion = Occasion.NODE, **kw: Any) -> Observed:
    return replace(Observed(occasion, f, BOOT), **kw)


EVACUATING: dict[str, Any] = {"taint": EVAC}
NOTHING = None
C, T, L, A = "cordon", "taint", "label", "adopt"
KUBELET: dict[str, Any] = {"may_taint": False}  # NodeRestriction: no taint of its own

# (row, observed, what is put back: a set of C/T/L, A when the cordon put back becomes the
# agent's, or NOTHING when the step is not REFENCE)
ROWS: list[tuple[str, Observed, set[str] | None]] = [
    ("F1 the whole fence stands", seen(fence("evacuate"), **EVACUATING), NOTHING),
    (
        "F3 foreign uncordon, evacuate taint there",
        seen(fence("evacuate", cordon=False), **EVACUATING),
        {C},
    ),
    (
        "F3 foreign uncordon of a shutdown's cordon",
        seen(fence("poweroff", cordon=False), shutdown=Reason.POWEROFF),
        {C},
    ),
    (
        "F3 foreign uncordon of a warning's cordon",
        seen(fence("warning", cordon=False, warning_id=SPOT.event_id), warning=SPOT_WARNED),
        {C},
    ),
    ("F4 taint removed", seen(fence("evacuate", tainted=False), **EVACUATING), {T}),
    (
        "F4 taint removed under a person's cordon (the record)",
        seen(fence("evacuate", marked=False, **NO_LB, tainted=False), **EVACUATING),
        {T},
    ),
    (
        "F2 a person's cordon lifted under the record: put back, the agent's now",
        seen(fence("evacuate", cordon=False, marked=False, **NO_LB), **EVACUATING),
        {C, A},
    ),
    (
        "F2 another drainer's cordon lifted under a shutdown's record",
        seen(fence("poweroff", cordon=False, marked=False, **NO_LB), shutdown=Reason.POWEROFF),
        {C, A},
    ),
    (
        "F2 a person's cordon lifted and the taint dropped under the record",
        seen(fence("evacuate", cordon=False, marked=False, tainted=False, **NO_LB), **EVACUATING),
        {C, T, A},
    ),
    (
        "F2 the departure is over: a person's cordon lifted under an old record stays lifted",
        seen(fence("evacuate", cordon=False, marked=False, **NO_LB)),
        NOTHING,
    ),
    ("F5 LB label removed", seen(fence("evacuate", lb=None), **EVACUATING), {L}),
    (
        "F5 LB label given another value (Karpenter's): theirs now",
        seen(fence("evacuate", lb="karpenter"), **EVACUATING),
        NOTHING,
    ),
    (
        "F5 a label the agent did not set, removed",
        seen(fence("evacuate", lb=None, excluded=False), **EVACUATING),
        NOTHING,
    ),
    (
        "F6 all three at once",
        seen(fence("evacuate", cordon=False, tainted=False, lb=None), **EVACUATING),
        {C, T, L},
    ),
    (
        "F7 contested: the taint only",
        seen(fence("evacuate", cordon=False, tainted=False), contested=True, **EVACUATING),
        {T},
    ),
    (
        "F7 contested, taint there: nothing",
        seen(fence("evacuate", cordon=False), contested=True, **EVACUATING),
        NOTHING,
    ),
    # The kubelet's identity may not change its Node's taints (NodeRestriction).
    (
        "F4 under the kubelet's identity: the taint is never the agent's",
        seen(fence("evacuate", tainted=False), may_taint=False, **EVACUATING),
        NOTHING,
    ),
    (
        "F3 under the kubelet's identity: the cordon alone",
        seen(fence("evacuate", cordon=False, tainted=False), may_taint=False, **EVACUATING),
        {C},
    ),
    (
        "F2 under the kubelet's identity: a person's cordon lifted under the record",
        seen(
            fence("evacuate", cordon=False, marked=False, tainted=False, **NO_LB),
            **KUBELET,
            **EVACUATING,
        ),
        {C, A},
    ),
    (
        "F2 under the kubelet's identity: a warning's record under a lifted cordon",
        seen(
            fence("warning", cordon=False, marked=False, tainted=False, warning_id=SPOT.event_id),
            warning=SPOT_WARNED,
            **KUBELET,
        ),
        {C, A},
    ),
    (
        "F7 contested under the kubelet's identity: no taint holds, the cordon goes back",
        seen(
            fence("evacuate", cordon=False, tainted=False), contested=True, **KUBELET, **EVACUATING
        ),
        {C},
    ),
    (
        "F7 contested under the kubelet's identity, a person's cordon lifted: put back",
        seen(
            fence("evacuate", cordon=False, marked=False, tainted=False, **NO_LB),
            contested=True,
            **KUBELET,
            **EVACUATING,
        ),
        {C, A},
    ),
    (
        "F7 contested, a person's cordon lifted, the taint there: nothing",
        seen(fence("evacuate", cordon=False, marked=False, **NO_LB), contested=True, **EVACUATING),
        NOTHING,
    ),
    # The reason is gone: nothing is put back (F8/F9 are the uncordon's).
    ("F9 evacuate taint gone", seen(fence("evacuate", cordon=False, tainted=False)), NOTHING),
    (
        "F9 a shutdown cordon, no shutdown owns the node",
        seen(fence("poweroff", cordon=False)),
        NOTHING,
    ),
    (
        "F9 a shutdown cordon of the last boot",
        seen(fence("poweroff", cordon=False, boot="boot-1"), shutdown=Reason.POWEROFF),
        NOTHING,
    ),
    (
        "F9 the warning is over",
        seen(fence("warning", cordon=False, warning_id=SPOT.event_id)),
        NOTHING,
    ),
    (
        "F9 another warning acts, not the one fenced for",
        seen(fence("warning", cordon=False, warning_id="e0"), warning=SPOT_WARNED),
        NOTHING,
    ),
    (
        "no departure of the agent's: a person's cordon lifted",
        seen(fence("", cordon=False, marked=False, tainted=False, **NO_LB), **EVACUATING),
        NOTHING,
    ),
]


@pytest.mark.parametrize(("row", "o", "want"), ROWS, ids=[r[0] for r in ROWS])
def test_refence_table(row: str, o: Observed, want: set[str] | None) -> None:
    d = decide(o)
    if want is None:
        assert d.step is not Step.REFENCE, d.why
        return
    assert d.step is Step.REFENCE
    assert d.refence is not None
    r = d.refence
    pieces = ((C, r.cordon), (T, r.taint), (L, r.label), (A, r.adopt))
    got = {name for name, on in pieces if on}
    assert got == want
    assert d.refence.reason == o.fence.reason


def test_refence_comes_first_whoever_owns_the_node() -> None:
    """A shutdown owns the node and every NODE decision is NOTHING, but its fence put back."""
    o = seen(fence("poweroff", cordon=False), shutdown=Reason.POWEROFF)
    assert decide(o).step is Step.REFENCE
    # Only on a change of the Node: a shutdown's own signal decides its drain as before.
    shutdown = replace(o, occasion=Occasion.SHUTDOWN, shutdown_policy=Policy.DRAIN)
    assert decide(shutdown).step is Step.DRAIN


@pytest.mark.parametrize(
    ("o", "holds"),
    [
        (seen(fence("evacuate"), **EVACUATING), f"the evacuate taint {EVAC}"),
        (seen(fence("evacuate")), ""),
        (seen(fence("evacuate"), taint=EVAC, evacuate_policy=EvacuatePolicy.IGNORE), ""),
        (seen(fence("reboot"), shutdown=Reason.REBOOT), "the reboot shutdown"),
        (seen(fence("warning", warning_id=SPOT.event_id), warning=SPOT_WARNED), SPOT.describe()),
        (seen(fence("warning", warning_id=SPOT.event_id), warning=Warned(SPOT, Policy.NONE)), ""),
        (seen(fence("", marked=False)), ""),
    ],
)
def test_reason_holds(o: Observed, holds: str) -> None:
    assert reason_holds(o) == holds


def test_what_the_event_says() -> None:
    o = seen(fence("evacuate", cordon=False, tainted=False, lb=None), **EVACUATING)
    put_back = decide(o).refence
    assert put_back is not None
    message = put_back.message("cluster-autoscaler (Update at 2026-11-29T07:00:00Z)")
    assert message == (
        f"spec.unschedulable set false; taint {marker.TAINT} removed; label "
        f"{marker.EXCLUDE_LB_LABEL} removed while the evacuate taint {EVAC} holds (the API "
        "server does not record who removes a field; the Node's last named writer: "
        "cluster-autoscaler (Update at 2026-11-29T07:00:00Z)); set again"
    )


def test_the_event_says_a_cordon_put_back_is_the_agents_now() -> None:
    o = seen(fence("evacuate", cordon=False, marked=False, **NO_LB), **EVACUATING)
    put_back = decide(o).refence
    assert put_back is not None and put_back.adopt
    message = put_back.message("kubectl (Update at 2026-11-29T07:00:00Z)")
    assert message.startswith("spec.unschedulable set false while the evacuate taint")
    assert message.endswith(
        "set again; the cordon, first someone else's and lifted, is nodeagent's now: it goes "
        "when the departure is over"
    )


@pytest.mark.parametrize(
    ("may_taint", "says"),
    [
        (True, f"the taint {marker.TAINT} holds the fence from here"),
        (False, "the cordon is the fence and is put back each time it is lifted"),
    ],
)
def test_what_contested_says(may_taint: bool, says: str) -> None:
    message = contested_message("kured (Update at t)", may_taint)
    assert message.startswith("something keeps uncordoning this node (kured (Update at t))")
    assert says in message


def test_contested_counts_one_departure_in_its_window() -> None:
    r = Refences()
    for i in range(CONTESTED_AFTER - 1):
        r.count("t1", float(i))
    assert not r.contested("t1", 3.0)
    assert r.count("t1", 3.0) == CONTESTED_AFTER
    assert r.contested("t1", 3.0)
    assert not r.contested("t2", 3.0)  # another departure starts afresh
    assert not r.contested("t1", 3.0 + CONTESTED_WINDOW)  # old repairs age out
    assert r.count("t2", 4.0) == 1


def node(taints: list[dict[str, str]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels or {}}, "spec": {"taints": taints}}


CA = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1795939200", "effect": "NoSchedule"}
KARPENTER = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
OURS = {"key": marker.TAINT, "value": "warning", "effect": "NoSchedule"}
EVACUATING_TAINT = {"key": marker.TAINT, "value": "evacuate", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("taints", "want"),
    [
        ([], [EVACUATING_TAINT]),
        ([CA, KARPENTER], [CA, KARPENTER, EVACUATING_TAINT]),
        ([OURS, CA], [CA, EVACUATING_TAINT]),
    ],
)
def test_the_taint_list_carries_everyone_elses(
    taints: list[dict[str, str]], want: list[dict[str, str]]
) -> None:
    """D7: the agent's writes change its own key only; every other taint unchanged."""
    assert marker.taints_with(node(taints), "evacuate") == want
    assert marker.taints_without(node([*taints, OURS])) == [t for t in taints if t is not OURS]


@pytest.mark.parametrize(
    ("labels", "excluded", "ours"),
    [
        ({marker.EXCLUDE_LB_LABEL: "nodeagent"}, "true", True),
        ({marker.EXCLUDE_LB_LABEL: "true"}, "true", True),  # an earlier agent's value
        ({marker.EXCLUDE_LB_LABEL: "karpenter"}, "true", False),  # overwritten: Karpenter's
        ({marker.EXCLUDE_LB_LABEL: "aws-node-termination-handler"}, "true", False),
        ({marker.EXCLUDE_LB_LABEL: "nodeagent"}, "", False),  # not set by the agent's cordon
        ({}, "true", False),
    ],
)
def test_the_lb_label_is_the_agents_by_value(
    labels: dict[str, str], excluded: str, ours: bool
) -> None:
    n = node([], labels)
    n["metadata"]["annotations"] = {marker.EXCLUDED_LB: excluded} if excluded else {}
    assert NodeFence.of(n).lb_ours is ours


T1, T5, T9 = "2026-11-29T07:00:01Z", "2026-11-29T07:00:05Z", "2026-11-29T07:00:09Z"


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ([], "unknown"),
        (
            [
                {"manager": "kubelet", "operation": "Update", "time": T9, "subresource": "status"},
                {"manager": "kubectl-cordon", "operation": "Update", "time": T5},
                {"manager": "nodeagent", "operation": "Update", "time": T1},
            ],
            f"kubectl-cordon (Update at {T5})",
        ),
    ],
)
def test_last_writer(fields: list[dict[str, str]], want: str) -> None:
    assert last_writer({"metadata": {"managedFields": fields}}) == want
