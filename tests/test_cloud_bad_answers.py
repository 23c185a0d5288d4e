"""No bad answer of the metadata endpoint changes anything on the Node: from idle, and
while each kind of warning stands.

A real agent (`nodeagent run`) on the real control plane reads an endpoint that answers
badly on request: amazon-ec2-metadata-mock behind a relay that breaks its answers
(hack/cloudfakes.py FaultingRelay), the contract fakes for Azure and GCP. For each kind
of standing warning (AWS Spot, a scheduled event, the Auto Scaling group's Terminated, a
rebalance cordon; Azure; GCP) and from idle, every bad answer in the table is served on
the warning's own item for at least two readings: a 500, a body outside the contract, a
reset, no answer, a reply trickling a byte a second, and where the item states a time,
the same notice with its time hours past. After each, the Node is as it was (cordon,
marker, labels, taints, the NodeAgentDrained condition), no warning ended
(CloudWarningOver) or began, and no drain ran again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.aemm import rfc3339
from hack.cloudfakes import (
    AzureEvent,
    AzureScheduledEventsFake,
    FakeEndpoint,
    Fault,
    FaultingRelay,
    GceMetadataFake,
    http_date,
)
from nodeagent.cloud import aws, azure, gcp
from nodeagent.fence import marker
from nodeagent.report import conditions
from tests.test_cloud_warnings import RESULTS, Node, aemm
from tests.test_cloud_warnings import node as node  # the fixture

STALE = 3 * 3600.0  # a notice's time this far past: not believed (fence/warning.py)
BAD = [Fault.ERROR, Fault.MALFORMED, Fault.RESET, Fault.HANG, Fault.TRICKLE]


@dataclass
class Endpoint:
    """What the agent reads, where its faults go, and what a stale answer is."""

    fake: FakeEndpoint
    cloud: str
    paths: set[str]  # the items the faults break
    stale: dict[str, bytes] = field(default_factory=dict)  # a notice hours past, per path
    settings: dict[str, str] = field(default_factory=dict)
    stands: str = "drained"  # the warning stands: "drained", "cordoned" or "" (idle)


def relayed(node: Node, *args: str) -> FaultingRelay:
    relay = FaultingRelay(aemm(node, *args).url)
    node.stops.append(relay.stop)
    return relay


def spot(node: Node) -> Endpoint:
    at = time.time() + 900
    stale = {"action": "terminate", "time": rfc3339(time.time() - STALE)}
    relay = relayed(node, "spot", "-a", "terminate", "-t", rfc3339(at), "-r", rfc3339(time.time()))
    return Endpoint(relay, "aws", {aws.SPOT}, {aws.SPOT: json.dumps(stale).encode()})


def scheduled_event(not_before: float) -> dict[str, str]:
    return {
        "Code": "system-reboot",
        "Description": "scheduled reboot",
        "EventId": "instance-event-1234567890abcdef0",
        "NotBefore": time.strftime("%d %b %Y %H:%M:%S GMT", time.gmtime(not_before)),
        "State": "active",
    }


def scheduled(node: Node) -> Endpoint:
    relay = relayed(node, "events", "-o", "system-reboot", "-b", rfc3339(time.time() + 300))
    stale = json.dumps([scheduled_event(time.time() - STALE)]).encode()
    return Endpoint(
        relay, "aws", {aws.SCHEDULED}, {aws.SCHEDULED: stale}, {"maintenance_lead": "10m"}
    )


def asg(node: Node) -> Endpoint:
    return Endpoint(relayed(node, "asglifecycle"), "aws", {aws.ASG})


def rebalance(node: Node) -> Endpoint:
    # The Spot notice of the same mock comes an hour later, after the test.
    relay = relayed(node, "spot", "-r", rfc3339(time.time()), "-d", "3600")
    settings = {"rebalance": "cordon", "rebalance_lifetime": "1h"}
    return Endpoint(relay, "aws", {aws.REBALANCE}, settings=settings, stands="cordoned")


def aws_idle(node: Node) -> Endpoint:
    """Nothing stands (a canceled event is listed); a stale Spot notice must start nothing."""
    relay = relayed(node, "events", "-t", "canceled", "-b", rfc3339(time.time() + 300))
    stale = {"action": "terminate", "time": rfc3339(time.time() - STALE)}
    paths = {aws.SPOT, aws.SCHEDULED, aws.REBALANCE, aws.ASG}
    return Endpoint(relay, "aws", paths, {aws.SPOT: json.dumps(stale).encode()}, stands="")


def azure_preempt(node: Node) -> Endpoint:
    fake = AzureScheduledEventsFake(vm_name="vm-a")
    node.stops.append(fake.stop)
    event = AzureEvent("ev-preempt", "Preempt", ["vm-a", "vm-b"], time.time() + 600)
    fake.add(event)
    listed = event.as_json() | {"NotBefore": http_date(time.time() - STALE)}
    doc = {"DocumentIncarnation": 9, "Events": [listed]}
    path = azure.EVENTS.split("?")[0]
    return Endpoint(fake, "azure", {path}, {path: json.dumps(doc).encode()})


def gcp_maintenance(node: Node) -> Endpoint:
    fake = GceMetadataFake()
    node.stops.append(fake.stop)
    fake.set(maintenance="TERMINATE_ON_HOST_MAINTENANCE")
    return Endpoint(fake, "gcp", {gcp.MAINTENANCE, gcp.PREEMPTED})


KINDS: dict[str, Callable[[Node], Endpoint]] = {
    "aws-idle": aws_idle,
    "aws-spot": spot,
    "aws-scheduled": scheduled,
    "aws-asg-terminated": asg,
    "aws-rebalance-cordon": rebalance,
    "azure-preempt": azure_preempt,
    "gcp-terminate-maintenance": gcp_maintenance,
}


def as_is(n: Node) -> dict[str, Any]:
    """What a warning changes on the Node (heartbeat times aside)."""
    obj = n.obj()
    meta = obj["metadata"]
    cond = conditions.find(obj, conditions.DRAINED) or {}
    return {
        "cordoned": bool(obj["spec"].get("unschedulable")),
        # Without timeAdded: the node controller stamps its unschedulable taint anew at times.
        "taints": sorted(
            (t["key"], t.get("value", ""), t["effect"]) for t in obj["spec"].get("taints") or []
        ),
        "annotations": {
            k: v for k, v in (meta.get("annotations") or {}).items() if "nodeagent" in k
        },
        "labels": {
            k: v for k, v in (meta.get("labels") or {}).items() if k != "kubernetes.io/hostname"
        },
        "condition": {
            k: cond.get(k) for k in ("status", "reason", "message", "lastTransitionTime")
        },
    }


def settled(n: Node, ep: Endpoint) -> dict[str, Any]:
    """The Node once the writes that follow a stand have landed: the agent's condition after
    its drain-result annotation, the node controller's unschedulable taint after the cordon.
    Read too early, a later write of the stand itself looks like a bad answer's change."""
    unschedulable = ("node.kubernetes.io/unschedulable", "", "NoSchedule")
    last: dict[str, Any] = {}

    def steady() -> bool:
        nonlocal last
        now = as_is(n)
        done = (ep.stands != "drained" or now["condition"]["reason"] == "Drained") and (
            not now["cordoned"] or unschedulable in now["taints"]
        )
        same, last = now == last, now
        return done and same

    ku.wait_until(steady, 60, "the Node's writes of the standing warning", step=2)
    return last


def warned(n: Node, ep: Endpoint) -> dict[str, list[str]]:
    """The Node's Events once a standing warning's CloudWarning is among them and two reads
    agree: the agent posts its Events in the background, which may land after the Node has
    settled (a spot notice comes with a rebalance recommendation: two CloudWarnings)."""
    last: dict[str, list[str]] | None = None

    def steady() -> bool:
        nonlocal last
        now = n.events()
        done = (not ep.stands or bool(now.get("CloudWarning"))) and now == last
        last = now
        return done

    ku.wait_until(steady, 30, "the standing warning's Events", step=2)
    assert last is not None
    return last


def answers(fake: FakeEndpoint, paths: set[str], count: int, timeout: float) -> None:
    """Until each of `paths` got `count` more GETs."""
    seen = {p: fake.reads(p) for p in paths}
    ku.wait_until(
        lambda: all(fake.reads(p) >= seen[p] + count for p in paths),
        timeout,
        f"{count} more readings of {sorted(paths)}",
    )


@pytest.fixture(params=sorted(KINDS))
def standing(request: pytest.FixtureRequest, node: Node) -> Iterator[tuple[Node, Endpoint]]:
    yield node, KINDS[request.param](node)


def test_bad_answers_change_nothing_on_the_node(standing: tuple[Node, Endpoint]) -> None:
    n, ep = standing
    agent = n.agent(ep.fake.url, ep.cloud, **ep.settings)
    if ep.stands == "drained":
        ku.wait_until(
            lambda: n.annotations().get(marker.DRAIN_RESULT) == "drained", 60, "the warning's drain"
        )
    elif ep.stands == "cordoned":
        ku.wait_until(n.cordoned, 30, "the warning's cordon")
    else:
        answers(ep.fake, ep.paths, 2, 30)
    before = settled(n, ep)
    assert before["cordoned"] == bool(ep.stands)
    events = warned(n, ep)
    drains = sum(
        agent.metric("nodeagent_drains_total", reason="warning", result=r) for r in RESULTS
    )
    faults = [*BAD, *([Fault.BODY] if ep.stale else [])]
    for fault in faults:
        ep.fake.faulty, ep.fake.bodies, ep.fake.fault = ep.paths, ep.stale, fault
        answers(ep.fake, ep.paths, 2, 60)
        assert as_is(n) == before, f"{fault.value} changed the Node"
        ep.fake.fault = Fault.NONE
        answers(ep.fake, ep.paths, 1, 60)  # believed again before the next fault
        assert as_is(n) == before, f"the good answer after {fault.value} changed the Node"
    assert n.events().get("CloudWarningOver") is None
    assert n.events().get("CloudWarning") == events.get("CloudWarning")
    after = sum(agent.metric("nodeagent_drains_total", reason="warning", result=r) for r in RESULTS)
    assert after == drains
    errors = {
        e: agent.metric("nodeagent_cloud_metadata_errors_total", cloud=ep.cloud, error=e)
        for e in ("http", "malformed", "unreachable", "timeout", "implausible")
    }
    print(f"\n{ep.cloud} {ep.stands or 'idle'}: {len(faults)} bad answers, errors counted {errors}")
    assert all(errors[e] >= 1 for e in ("http", "malformed", "unreachable", "timeout"))
