"""The other actors, as tables: who is seen on a Node (fence/others.py), and what the
decision does beside another drainer (docs/architecture.md, "Beside the other actors")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nodeagent.departure.waits import OTHER_DRAIN_RESERVE, other_drain_until, to_move
from nodeagent.fence.decision import Observed, decide
from nodeagent.fence.marker import NodeFence
from nodeagent.fence.others import Others, other_handler, standing_aside
from nodeagent.types import FinishedPods, Handler, Occasion, Policy, Reason, Step
from tests.test_warning import DRAIN as SPOT_DRAIN

CA = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1795939200", "effect": "NoSchedule"}
DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
REBOOTING = {"key": "karpenter.sh/rebooting", "effect": "NoSchedule"}
NTH_TAINT = {"key": "aws-node-termination-handler/spot-itn", "value": "e", "effect": "NoSchedule"}
AKS = {"key": "remediator.kubernetes.azure.com/unschedulable", "effect": "NoSchedule"}
LB = "node.kubernetes.io/exclude-from-external-load-balancers"


def node(taints: tuple[dict[str, str], ...] = (), **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n", **meta}, "spec": {"taints": list(taints)}}


@pytest.mark.parametrize(
    ("n", "field", "evidence"),
    [
        (
            node((CA,)),
            "autoscaler_removing",
            "cluster-autoscaler (taint ToBeDeletedByClusterAutoscaler=1795939200)",
        ),
        (
            node(deletionTimestamp="2026-11-29T06:01:02Z", finalizers=["karpenter.sh/termination"]),
            "karpenter_terminating",
            "karpenter (deletionTimestamp 2026-11-29T06:01:02Z, finalizer "
            "karpenter.sh/termination)",
        ),
        (
            node(deletionTimestamp="2026-11-29T06:01:02Z", finalizers=["other"]),
            "karpenter_terminating",
            "",
        ),
        (node((REBOOTING,)), "karpenter_rebooting", "karpenter (taint karpenter.sh/rebooting)"),
        (node((DISRUPTED,)), "karpenter_disrupting", "karpenter (taint karpenter.sh/disrupted)"),
        (node((DISRUPTED,), deletionTimestamp="t"), "karpenter_disrupting", ""),
        (
            node(annotations={"weave.works/kured-reboot-in-progress": "n"}),
            "kured_rebooting",
            "kured (annotation weave.works/kured-reboot-in-progress)",
        ),
        (
            node(annotations={"cluster.x-k8s.io/machine": "m1"}),
            "capi_managed",
            "cluster-api (Machine m1)",
        ),
        (
            node((NTH_TAINT,)),
            "nth",
            "aws-node-termination-handler (aws-node-termination-handler/spot-itn)",
        ),
        (
            node(labels={"aws-node-termination-handler/event-id": "e"}),
            "nth",
            "aws-node-termination-handler (aws-node-termination-handler/event-id)",
        ),
        (
            node(labels={LB: "aws-node-termination-handler"}),
            "nth",
            f"aws-node-termination-handler (label {LB}=aws-node-termination-handler)",
        ),
        (node(labels={LB: "nodeagent"}), "nth", ""),
        (
            node((AKS,)),
            "aks_remediator",
            "aks (taint remediator.kubernetes.azure.com/unschedulable)",
        ),
        (node(), "autoscaler_removing", ""),
    ],
)
def test_who_is_seen(n: dict[str, Any], field: str, evidence: str) -> None:
    assert getattr(Others.of(n), field) == evidence


@pytest.mark.parametrize(
    ("others", "cordoned_by_other", "drainer", "maybe"),
    [
        (Others(), False, False, False),
        (Others(autoscaler_removing="ca"), False, True, True),
        (Others(karpenter_terminating="k"), False, True, True),
        (Others(karpenter_rebooting="k"), False, True, True),
        (Others(kured_rebooting="kured"), False, True, True),
        (Others(karpenter_disrupting="k"), True, False, False),  # D6: a candidate, no drain yet
        (Others(capi_managed="capi"), False, False, False),
        (Others(capi_managed="capi"), True, False, True),  # its drain, or a person's cordon
    ],
)
def test_drainers(others: Others, cordoned_by_other: bool, drainer: bool, maybe: bool) -> None:
    assert bool(others.drainer) is drainer
    assert bool(others.maybe_drainer(cordoned_by_other)) is maybe


FREE = NodeFence(False, False, "", "", "", "")
THEIR_CORDON = NodeFence(True, False, "", "", "", "")
RECORDED = NodeFence(True, False, "evacuate", "t1", "b", "", tainted=True)
CA_SEEN = Others(autoscaler_removing="cluster-autoscaler (taint ...)")
CAPI = Others(capi_managed="cluster-api (Machine m1)")


def seen(occasion: Occasion, fence: NodeFence = FREE, **kw: Any) -> Observed:
    return replace(Observed(occasion, fence, "b"), **kw)


SHUTDOWN = {"shutdown": Reason.POWEROFF, "shutdown_policy": Policy.DRAIN}
EVAC = {"taint": "nodeagent.io/evacuate"}

# (row, observed, step, waits for another drain)
ROWS: list[tuple[str, Observed, Step, bool]] = [
    (
        "D1 shutdown beside the autoscaler: wait, then drain what is left",
        seen(Occasion.SHUTDOWN, THEIR_CORDON, others=CA_SEEN, **SHUTDOWN),
        Step.DRAIN,
        True,
    ),
    (
        "D1 shutdown on a CAPI node cordoned by another",
        seen(Occasion.SHUTDOWN, THEIR_CORDON, others=CAPI, **SHUTDOWN),
        Step.DRAIN,
        True,
    ),
    (
        "D1 shutdown on a CAPI node nobody cordoned: drain at once",
        seen(Occasion.SHUTDOWN, others=CAPI, **SHUTDOWN),
        Step.DRAIN,
        False,
    ),
    ("shutdown alone", seen(Occasion.SHUTDOWN, **SHUTDOWN), Step.DRAIN, False),
    (
        "D3 evacuate beside the autoscaler: fence only",
        seen(Occasion.NODE, THEIR_CORDON, others=CA_SEEN, **EVAC),
        Step.CORDON,
        False,
    ),
    (
        "D3 their taint in evacuate.taints: the operator asked the agent to drain ahead",
        seen(Occasion.NODE, THEIR_CORDON, others=CA_SEEN, taint="ToBeDeletedByClusterAutoscaler"),
        Step.DRAIN,
        False,
    ),
    (
        "D3 already fenced beside it: nothing more",
        seen(Occasion.NODE, RECORDED, others=CA_SEEN, **EVAC),
        Step.NOTHING,
        False,
    ),
    (
        "D3 a warning's drain beside the autoscaler: fence only",
        seen(Occasion.NODE, others=CA_SEEN, warning=SPOT_DRAIN),
        Step.CORDON,
        False,
    ),
    (
        "D3 never skips a drain behind a CAPI node's cordon",
        seen(Occasion.NODE, THEIR_CORDON, others=CAPI, **EVAC),
        Step.DRAIN,
        False,
    ),
    (
        # Its cordon lifted while the evacuation holds: put back as the agent's first
        # (fence/refence.py, row F2), then the drain on the Node as written.
        "D4 the autoscaler gave the node back: its cordon put back as the agent's",
        seen(Occasion.NODE, replace(RECORDED, unschedulable=False), **EVAC),
        Step.REFENCE,
        False,
    ),
    (
        "D4 the autoscaler gave the node back, the cordon the agent's: drain",
        seen(Occasion.NODE, replace(RECORDED, marked=True), **EVAC),
        Step.DRAIN,
        False,
    ),
    (
        "D6 Karpenter's candidate is no drainer",
        seen(Occasion.NODE, others=Others(karpenter_disrupting="k"), **EVAC),
        Step.DRAIN,
        False,
    ),
]


@pytest.mark.parametrize(("row", "o", "step", "waits"), ROWS, ids=[r[0] for r in ROWS])
def test_beside_other_drainers(row: str, o: Observed, step: Step, waits: bool) -> None:
    d = decide(o)
    assert d.step is step, d.why
    assert bool(d.wait_for) is waits


def pod(name: str, *, ds: bool = False, terminating: bool = False) -> dict[str, Any]:
    owner = [{"kind": "DaemonSet", "apiVersion": "apps/v1", "name": "d", "controller": True}]
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": name}
    meta["ownerReferences"] = owner if ds else []
    if terminating:
        meta["deletionTimestamp"] = "2026-11-29T06:00:00Z"
    return {"metadata": meta, "spec": {}, "status": {"phase": "Running"}}


def test_what_another_drainer_leaves_to_move() -> None:
    pods = [pod("a"), pod("ds", ds=True), pod("going", terminating=True)]
    names = [p["metadata"]["name"] for p in to_move(pods, FinishedPods.KEEP)]
    assert names == ["a", "going"]  # waited for until gone


@pytest.mark.parametrize(
    ("budget", "waits"),
    [(60.0, 30.0), (30.0, 15.0), (16.0, 6.0), (10.0, 0.0), (4.0, -6.0)],
)
def test_the_wait_keeps_half_the_budget_at_least_the_reserve(budget: float, waits: float) -> None:
    assert other_drain_until(100.0, 100.0 + budget) - 100.0 == waits
    assert OTHER_DRAIN_RESERVE == 10.0


# -- one interruption handler -----------------------------------------------------------

NTH_SEEN = "aws-node-termination-handler (aws-node-termination-handler/event-id)"


@pytest.mark.parametrize(
    ("configured", "seen", "handler"),
    [
        (Handler.AUTO, "", ""),
        (Handler.AUTO, NTH_SEEN, NTH_SEEN),  # H1: told by what it writes on the Node
        (Handler.NONE, NTH_SEEN, ""),  # the operator says nodeagent alone handles them
        (Handler.KARPENTER, "", "karpenter (configuration [warnings] other_handler)"),
        (Handler.AKS, NTH_SEEN, "aks (configuration [warnings] other_handler)"),
    ],
)
def test_which_handler(configured: Handler, seen: str, handler: str) -> None:
    assert other_handler(configured, seen) == handler


OUR_WARNING = NodeFence(
    True, True, "warning", "t1", "b", "", warning_id=SPOT_DRAIN.notice.event_id, tainted=True
)

HANDLER_ROWS: list[tuple[str, Observed, Step]] = [
    ("alone: the warning drains", seen(Occasion.NODE, warning=SPOT_DRAIN), Step.DRAIN),
    (
        "H2 another handler: the warning stands aside",
        seen(Occasion.NODE, warning=SPOT_DRAIN, handler=NTH_SEEN),
        Step.NOTHING,
    ),
    (
        "H3 already fencing for it: the drain goes on",
        seen(Occasion.NODE, OUR_WARNING, warning=SPOT_DRAIN, handler=NTH_SEEN),
        Step.DRAIN,
    ),
    (
        "H4 the shutdown path stays on",
        seen(Occasion.SHUTDOWN, handler=NTH_SEEN, **SHUTDOWN),
        Step.DRAIN,
    ),
]


@pytest.mark.parametrize(("row", "o", "step"), HANDLER_ROWS, ids=[r[0] for r in HANDLER_ROWS])
def test_one_interruption_handler(row: str, o: Observed, step: Step) -> None:
    assert decide(o).step is step


def test_the_handler_line() -> None:
    assert standing_aside(NTH_SEEN) == (
        f"cloud warnings: {NTH_SEEN} handles them here; nodeagent stands aside (the "
        "OS-shutdown path stays on)"
    )
    assert "nodeagent handles them" in standing_aside("")
