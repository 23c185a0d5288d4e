"""What the agent reads of the other actors beyond its Node, as tables: kured's lock on its
DaemonSet (`[alongside] kured_daemonset`, fence/others.kured_holds), the autoscaler's
delay-deletion annotation a stopped agent left (fence/others.stale_hold), and the setting's
checks."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hack import kubeutil as ku
from hack.actors.kured import Lock
from nodeagent.config import ConfigError, load
from nodeagent.fence.decision import Observed, decide
from nodeagent.fence.marker import NodeFence
from nodeagent.fence.others import DELAY_DELETION, Others, kured_holds, stale_hold
from nodeagent.types import Occasion, Policy, Reason, Step

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
HOUR_NS = 3600 * 10**9
WHERE = "kube-system/kured"
EVIDENCE = f"kured (lock weave.works/kured-node-lock on DaemonSet {WHERE}, since "


def lock(node: str = "n1", ttl_ns: int = 0, age_s: float = 60.0) -> str:
    """kured's own encoding, from the harness's re-enactment of daemonsetlock.go."""
    created = datetime.fromtimestamp(NOW.timestamp() - age_s, UTC)
    return Lock(node, False, created, ttl_ns).encode()


MULTI = (
    '{"maxOwners":2,"locks":[{"nodeID":"n0","created":"2026-11-29T08:59:00Z","TTL":0},'
    '{"nodeID":"n1","metadata":{"unschedulable":true},"created":"2026-11-29T08:59:00Z",'
    '"TTL":0}]}'
)

# (row, the lock annotation's text, held for n1)
KURED_ROWS: list[tuple[str, str, bool]] = [
    ("no lock", "", False),
    ("this node holds it", lock(), True),
    ("another node holds it", lock("n2"), False),
    ("within its TTL", lock(ttl_ns=HOUR_NS, age_s=600), True),
    ("its TTL passed: ttlExpired, no lock", lock(ttl_ns=HOUR_NS, age_s=3601), False),
    ("TTL 0 never expires", lock(age_s=30 * 86400), True),
    ("--concurrency 2: this node among the holders", MULTI, True),
    ("--concurrency 2: not among them", MULTI.replace('"n1"', '"n3"'), False),
    ("not JSON", "{nodeID: n1", False),
    ("JSON, not a lock", '["n1"]', False),
    ("a Go time with nanoseconds", lock().replace('Z"', '.123456789Z"'), True),
]


@pytest.mark.parametrize(("row", "text", "held"), KURED_ROWS, ids=[r[0] for r in KURED_ROWS])
def test_kureds_lock(row: str, text: str, held: bool) -> None:
    evidence = kured_holds(text, "n1", NOW, WHERE)
    assert evidence.startswith(EVIDENCE) if held else evidence == ""


def test_the_lock_counts_as_kureds_drain_and_the_annotation_still_does() -> None:
    node = {"metadata": {"name": "n1"}, "spec": {}}
    held = kured_holds(lock(), "n1", NOW, WHERE)
    assert Others.of(node, held).drainer == held
    assert Others.of(node).drainer == ""
    annotated = {
        "metadata": {"name": "n1", "annotations": {"weave.works/kured-reboot-in-progress": "t"}}
    }
    assert Others.of(annotated, held).kured_rebooting == (
        "kured (annotation weave.works/kured-reboot-in-progress)"
    )


KURED_CORDON = NodeFence(True, False, "", "", "", "")


@pytest.mark.parametrize(
    ("occasion", "kw", "step", "waits"),
    [
        (Occasion.NODE, {"taint": "nodeagent.io/evacuate"}, Step.CORDON, False),
        (
            Occasion.SHUTDOWN,
            {"shutdown": Reason.REBOOT, "shutdown_policy": Policy.DRAIN},
            Step.DRAIN,
            True,
        ),
    ],
    ids=["an evacuation beside kured's drain fences only", "kured's reboot: wait, then finish"],
)
def test_beside_kureds_lock(
    occasion: Occasion, kw: dict[str, object], step: Step, waits: bool
) -> None:
    others = Others.of({"metadata": {}, "spec": {}}, kured_holds(lock(), "n1", NOW, WHERE))
    d = decide(replace(Observed(occasion, KURED_CORDON, "b"), others=others, **kw))  # type: ignore[arg-type]
    assert d.step is step, d.why
    assert bool(d.wait_for) is waits


def node_with(annotations: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "n1", "annotations": annotations}}


@pytest.mark.parametrize(
    ("row", "annotations", "holding", "left"),
    [
        ("none on the Node", {}, False, ""),
        ("a stopped agent's hold", {DELAY_DELETION: "poweroff: 2 volume(s) detaching"}, False,
         "poweroff: 2 volume(s) detaching"),
        ("this agent's drain holds it now", {DELAY_DELETION: "x"}, True, ""),
        ("another tool's delay-deletion key is not ours",
         {"delay-deletion.cluster-autoscaler.kubernetes.io/csi": "x"}, False, ""),
        ("an empty value is still ours", {DELAY_DELETION: ""}, False, "(empty)"),
    ],
)  # fmt: skip
def test_a_stale_deletion_hold(
    row: str, annotations: dict[str, str], holding: bool, left: str
) -> None:
    assert stale_hold(node_with(annotations), holding) == left


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("file", 'kured_daemonset = "kured"', "alongside.kured_daemonset: 'kured' is not NAMES"),
        ("file", 'kured_daemonset = ""', "alongside.kured_daemonset: empty value"),
        ("file", 'kured_daemonset = "Kube-System/kured"', "is not NAMESPACE/NAME"),
        ("file", 'kured_daemonset = "kube-system/"', "is not NAMESPACE/NAME"),
        ("file", 'kured_daemonset = "a/b/c"', "is not NAMESPACE/NAME"),
        ("file", "kured_daemonset = 1", "alongside.kured_daemonset: expected a string"),
        ("env", "", "NODEAGENT_ALONGSIDE_KURED_DAEMONSET: empty value"),
        ("env", "kube-system", "NODEAGENT_ALONGSIDE_KURED_DAEMONSET: 'kube-system' is not"),
    ],
)  # fmt: skip
def test_a_bad_kured_daemonset_is_one_line(
    where: str, value: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as err:
        if where == "file":
            load(str(ku.write(tmp_path / "c.toml", f"[alongside]\n{value}\n")), {})
        else:
            load(None, {"NODEAGENT_ALONGSIDE_KURED_DAEMONSET": value})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_kured_daemonset_is_opt_in() -> None:
    assert load(None, {}).alongside.kured_daemonset == ""
    env = {"NODEAGENT_ALONGSIDE_KURED_DAEMONSET": "kube-system/kured"}
    assert load(None, env).alongside.kured_daemonset == "kube-system/kured"
