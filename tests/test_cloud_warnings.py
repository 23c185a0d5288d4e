"""The cloud's early warnings through a real agent on the real control plane.

AWS against amazon-ec2-metadata-mock (IMDSv2 required, as on Amazon Linux 2023); GCP and
Azure against the contract fakes in hack/cloudfakes.py. Each test runs `nodeagent run` for
a simulated node whose metadata endpoint is the test's own, and reads the outcome from the
API: the cordon and its marker, the pods, the condition and the Events.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.aemm import Aemm, rfc3339
from hack.agentproc import AgentProcess
from hack.cloudfakes import AzureEvent, AzureScheduledEventsFake, GceMetadataFake
from nodeagent.cloud import aws
from nodeagent.cloud.watcher import WarningWatcher
from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure import budget
from nodeagent.departure.worker import Departure
from nodeagent.fence import marker
from nodeagent.kube.client import JSON, Kube, node_path
from nodeagent.report import conditions
from nodeagent.report.conditions import ConditionWriter
from nodeagent.report.events import EventRecorder
from nodeagent.types import Cloud, DrainOutcome, Reason


@dataclass
class Node:
    kube: Kube
    name: str
    spare: str
    ns: str
    workdir: Path
    kubeconfig: str
    stops: list[Any] = field(default_factory=list)

    def agent(self, url: str, cloud: str, **warnings: str) -> AgentProcess:
        config = {
            "warnings": {"cloud": cloud, "metadata_url": url, **warnings},
            "drain": {"deadline": "60s"},
        }
        agent = AgentProcess.start(self.workdir, self.kubeconfig, self.name, config)
        self.stops.append(lambda: agent.stop(signal.SIGKILL))
        return agent

    def obj(self) -> JSON:
        return ku.node(self.kube, self.name)

    def annotations(self) -> dict[str, str]:
        return dict(self.obj()["metadata"].get("annotations") or {})

    def cordoned(self) -> bool:
        return bool(self.obj()["spec"].get("unschedulable"))

    def condition(self) -> JSON:
        return conditions.find(self.obj(), conditions.DRAINED) or {}

    def workload_pods(self) -> list[JSON]:
        return [
            p
            for p in ku.running(ku.pods_on(self.kube, self.name))
            if p["metadata"]["labels"].get("app") != "ds"
        ]

    def events(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for e in ku.node_events(self.kube, self.name):
            out.setdefault(e["reason"], []).append(e["message"])
        return out


@pytest.fixture
def node(cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path) -> Iterator[Node]:
    group, name, spare = ku.node_pair(cluster, kube, "cw")
    n = Node(kube, name, spare, group, tmp_path, admin_kubeconfig)
    ku.deployment(kube, group, "web", group, 2)
    ku.daemonset(kube, group, "ds", group)
    ku.wait_running(kube, name, 3)
    ku.open_node(kube, spare)
    try:
        yield n
    finally:
        for stop in reversed(n.stops):
            stop()


def aemm(n: Node, *args: str) -> Aemm:
    mock = Aemm(list(args), n.workdir / "aemm.log")
    n.stops.append(mock.stop)
    return mock


def test_spot_interruption_drains_before_the_time(node: Node) -> None:
    """The notice two minutes ahead: cordon with the warning in the marker, the pods
    evicted, Drained naming the warning, well before the notice's time."""
    at = time.time() + 120
    mock = aemm(node, "spot", "-a", "terminate", "-t", rfc3339(at))
    agent = node.agent(mock.url, "aws")

    ku.wait_until(lambda: not node.workload_pods(), 60, "workload pods evicted")
    ann = node.annotations()
    assert node.cordoned()
    assert ann[marker.DRAIN_REASON] == "warning"
    assert ann[marker.WARNING] == "aws interruption"
    assert ann[marker.WARNING_ID] == "spot-itn-terminate"
    assert ann[marker.WARNING_DEADLINE] == rfc3339(at)
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 20, "Drained")
    assert "aws interruption warning (Spot interruption: terminate" in node.condition()["message"]
    assert time.time() < at - 30
    # The agent posts its Events in the background: maybe after the condition's write.
    warned = ku.wait_until(
        lambda: w if len(w := node.events().get("CloudWarning") or []) >= 2 else None,
        10,
        "the two CloudWarning Events",
    )
    assert any("Spot interruption: terminate" in m for m in warned), warned
    # The mock's rebalance recommendation (its time moves with every read) is one warning.
    assert len(warned) == 2, warned
    assert agent.metric("nodeagent_cloud_warnings_total", cloud="aws", kind="interruption") == 1
    # IMDSv2: the mock refuses a read without a session token (-I), so none was refused.
    assert agent.metric("nodeagent_cloud_metadata_errors_total", cloud="aws", error="token") == 0


def test_canceled_scheduled_event_undoes_its_drain(node: Node) -> None:
    """A reboot event within the lead drains; the same event canceled (the mock started
    again with its state canceled) gives the node back, and nothing is left."""
    not_before = rfc3339(time.time() + 300)
    args = ["events", "-o", "system-reboot", "-b", not_before]
    mock = aemm(node, *args, "-t", "active")
    node.agent(mock.url, "aws", maintenance_lead="10m")
    ku.wait_until(lambda: not node.workload_pods(), 60, "workload pods evicted")
    assert node.annotations()[marker.WARNING_ID] == "instance-event-1234567890abcdef0"

    mock.stop()
    canceled = Aemm([*args, "-t", "canceled"], node.workdir / "aemm.log", port=mock.port)
    node.stops.append(canceled.stop)

    ku.wait_until(lambda: not node.cordoned(), 30, "uncordon after the cancel")
    ann = node.annotations()
    assert not set(marker.MARKER_KEYS) & set(ann)
    assert marker.EXCLUDE_LB_LABEL not in (node.obj()["metadata"].get("labels") or {})
    ku.wait_until(lambda: "CloudWarningOver" in node.events(), 10, "the warning's end")
    ku.wait_until(lambda: node.condition().get("reason") == "NotDraining", 10, "NotDraining")


def test_scheduled_event_far_ahead_keeps_the_node_serving(node: Node) -> None:
    """A reboot two days ahead is reported, and nothing is fenced until its lead."""
    mock = aemm(node, "events", "-o", "instance-stop", "-b", rfc3339(time.time() + 2 * 86400))
    agent = node.agent(mock.url, "aws", maintenance_lead="1h")
    ku.wait_until(lambda: "CloudWarning" in node.events(), 20, "the warning reported")
    # The Event says from when it will act: its start less the lead.
    assert any("policy drain, from " in m for m in node.events()["CloudWarning"])
    seen = agent.metric("nodeagent_loop_last_success_timestamp_seconds", loop="warnings")
    ku.wait_until(
        lambda: (
            agent.metric("nodeagent_loop_last_success_timestamp_seconds", loop="warnings")
            > seen + 2
        ),
        20,
        "more readings",
    )
    assert not node.cordoned()
    assert len(node.workload_pods()) == 2


def test_rebalance_cordon_ends_with_its_lifetime(node: Node) -> None:
    """A rebalance recommendation cordons (policy cordon), evicts nothing, and the cordon
    goes when its lifetime is over though the endpoint still shows the recommendation."""
    # Pinned (-r): the mock's notice time otherwise moves with every read. The Spot
    # notice of the same mock comes an hour later, after the test.
    mock = aemm(node, "spot", "-r", rfc3339(time.time()), "-d", "3600")
    node.agent(mock.url, "aws", rebalance="cordon", rebalance_lifetime="15s")
    ku.wait_until(node.cordoned, 20, "the rebalance cordon")
    assert node.annotations()[marker.WARNING] == "aws rebalance"
    assert len(node.workload_pods()) == 2
    ku.wait_until(lambda: not node.cordoned(), 40, "the cordon's lifetime over")
    assert len(node.workload_pods()) == 2


def test_azure_preempt_is_approved_once_drained(node: Node) -> None:
    """Preempt naming this VM alone: drained, then approved (never before the drain is
    done); an event naming other VMs too is drained for but never approved."""
    fake = AzureScheduledEventsFake(vm_name="vm-a")
    node.stops.append(fake.stop)
    fake.add(AzureEvent("ev-shared", "Freeze", ["vm-a", "vm-b"], time.time() + 900))
    fake.add(AzureEvent("ev-preempt", "Preempt", ["vm-a"], time.time() + 120))
    # The Node as the approval arrives (the agent's request waits for the read): the
    # result must be on it already.
    at_approval: list[dict[str, str]] = []
    fake.on_approve = lambda _event: at_approval.append(node.annotations())
    agent = node.agent(fake.url, "azure", migration="cordon")

    ku.wait_until(lambda: at_approval, 60, "the approval")  # the Node read, then
    assert [a.event_id for a in fake.approvals] == ["ev-preempt"]
    [drained] = at_approval
    assert drained[marker.WARNING_ID] == "ev-preempt"
    assert drained[marker.DRAIN_RESULT] == "drained"
    assert not node.workload_pods()
    # The condition writer writes on its own thread, maybe after the approval left.
    ku.wait_until(lambda: node.condition().get("reason") == "Drained", 20, "Drained")
    assert agent.metric("nodeagent_cloud_warnings_total", cloud="azure", kind="migration") == 1

    fake.remove("ev-preempt")  # Azure removes the event once it has run
    ku.wait_until(lambda: node.annotations().get(marker.WARNING_ID) == "ev-shared", 30, "freeze")
    assert node.cordoned()  # the freeze's cordon holds; it is never approved
    time.sleep(3)
    assert [a.event_id for a in fake.approvals] == ["ev-preempt"]


def test_gcp_terminate_maintenance_then_none(node: Node) -> None:
    """TERMINATE_ON_HOST_MAINTENANCE drains at once (its long poll hears it); back to
    NONE, the node is given back."""
    fake = GceMetadataFake()
    node.stops.append(fake.stop)
    node.agent(fake.url, "gcp")
    ku.wait_until(lambda: fake.requests, 20, "the first read")
    fake.set(maintenance="TERMINATE_ON_HOST_MAINTENANCE")
    ku.wait_until(lambda: not node.workload_pods(), 60, "workload pods evicted")
    assert node.annotations()[marker.WARNING] == "gcp maintenance"
    fake.set(maintenance="NONE")
    ku.wait_until(lambda: not node.cordoned(), 30, "uncordon when the event is over")


def test_azure_reboot_listed_after_the_boot_fences_no_more(node: Node) -> None:
    """A Reboot drained for and approved, then the reboot itself (logind's PrepareForShutdown
    to the departure worker, in process), then the node back with a new boot ID and the agent
    started again while Azure still lists the event as Started: the reboot's cordon is
    undone as after any reboot, with no second drain and no warning Event, the event ID
    noted on the Node; once the event leaves the list the note goes too."""
    from hack.localcluster.kubelet_sim import BOOT_ID

    fake = AzureScheduledEventsFake(vm_name="vm-a")
    node.stops.append(fake.stop)
    fake.add(AzureEvent("ev-reboot", "Reboot", ["vm-a"], time.time() + 120))
    departure, stop = _worker(node, fake.url)
    try:
        ku.wait_until(lambda: fake.approvals, 60, "the approval after the drain")
        shutdown = departure.shutdown(
            Reason.REBOOT, budget.logind(time.monotonic(), 60, None), "logind", 1
        )
        assert shutdown.wait(time.monotonic() + 30), "the reboot's drain"
    finally:
        stop()
    ann = node.annotations()
    assert ann[marker.DRAIN_REASON] == "reboot"  # the shutdown's, keeping the warning's keys
    assert ann[marker.WARNING_ID] == "ev-reboot"
    assert fake.events[0].status == "Started"
    warned = len(node.events()["CloudWarning"])

    old = node.obj()["status"]["nodeInfo"]["bootID"]
    node.kube.merge_patch(node_path(node.name), {"metadata": {"annotations": {BOOT_ID: "b2"}}})
    ku.wait_until(lambda: node.obj()["status"]["nodeInfo"]["bootID"] != old, 15, "the new boot")
    agent = node.agent(fake.url, "azure")

    ku.wait_until(lambda: not node.cordoned(), 60, "the reboot's cordon undone")
    ann = node.annotations()
    assert ann.get(marker.WARNING_DEPARTED) == "ev-reboot"
    assert not set(marker.MARKER_KEYS) & set(ann)
    ku.wait_until(
        lambda: any("Uncordoned after reboot" in m for m in node.events().get("Uncordoned", [])),
        10,
        "the Uncordoned Event, posted after the uncordon it reports",
    )
    seen = agent.metric("nodeagent_loop_last_success_timestamp_seconds", loop="warnings")
    ku.wait_until(
        lambda: (
            agent.metric("nodeagent_loop_last_success_timestamp_seconds", loop="warnings")
            > seen + 2
        ),
        20,
        "more readings of the listed event",
    )
    assert not node.cordoned()
    drains = [agent.metric("nodeagent_drains_total", reason="warning", result=r) for r in RESULTS]
    assert sum(drains) == 0
    assert agent.metric("nodeagent_cloud_warnings_total", cloud="azure", kind="maintenance") == 0
    assert len(node.events()["CloudWarning"]) == warned

    fake.remove("ev-reboot")  # Azure drops the event at last
    ku.wait_until(
        lambda: marker.WARNING_DEPARTED not in node.annotations(), 30, "the note forgotten"
    )
    assert "CloudWarningOver" not in node.events()
    assert not node.cordoned()


RESULTS = [str(r) for r in DrainOutcome]


def _worker(node: Node, url: str) -> tuple[Departure, Callable[[], None]]:
    """The departure worker and the warnings reader in process, fed the Node as its watch
    would: the agent's own parts, for the logind signal a test agent cannot hear."""
    cfg = Config(node=node.name)
    cfg.drain.deadline = 60
    cfg.warnings.cloud = Cloud.AZURE
    cfg.warnings.metadata_url = url
    kube = node.kube
    events, report = EventRecorder(kube, node.name), ConditionWriter(kube, node.name)
    departure = Departure(cfg, kube, events, report, lambda _text: None, lambda *_fields: None)
    watcher = WarningWatcher(cfg.warnings, departure.warned)
    departure.warning_drained = watcher.approve
    ctx = Context.background()

    def feed(ctx: Context) -> None:
        while not ctx.wait(0.2):
            departure.observe(node.obj())

    departure.observe(node.obj())
    threads = [
        threading.Thread(target=departure.run, args=(ctx, lambda: None), daemon=True),
        threading.Thread(target=watcher.run, args=(ctx, lambda: None, lambda: None), daemon=True),
        threading.Thread(target=feed, args=(ctx,), daemon=True),
    ]
    for t in threads:
        t.start()

    def stop() -> None:
        ctx.cancel()
        for t in threads:
            t.join(10)
        # Its Events and conditions go out on threads of their own: all of them out
        # before the test counts them, or starts an agent that writes the same ones.
        report.flush(10)
        events.flush(10)

    return departure, stop


def read_ids(imds: aws.Imds) -> list[str]:
    """The IDs of the notices of one reading's believed items."""
    return [n.event_id for item in imds.read(time.time()) if item.believed for n in item.notices]


def test_imds_token_renewed_once_on_401(tmp_path: Path) -> None:
    """A session token the mock no longer knows: one 401, a new token, the read goes on."""
    mock = Aemm(["spot", "-a", "stop", "-t", rfc3339(time.time() + 120)], tmp_path / "aemm.log")
    try:
        imds = aws.Imds(mock.url)
        assert "spot-itn-stop" in read_ids(imds)
        imds._token = "not-a-token-the-mock-issued"  # as if it expired under us
        assert "spot-itn-stop" in read_ids(imds)
        assert imds._token != "not-a-token-the-mock-issued"
    finally:
        mock.stop()


def test_shutdown_called_off_under_a_warning_is_undone_with_the_warning(node: Node) -> None:
    """A poweroff announced while an Azure Reboot holds the node, then called off (logind's
    PrepareForShutdown(false)): the cordon becomes the warning's, so the event's
    cancellation gives the node back; the shutdown's marker is not left behind."""
    fake = AzureScheduledEventsFake(vm_name="vm-a")
    node.stops.append(fake.stop)
    fake.add(AzureEvent("ev-held", "Reboot", ["vm-a", "vm-b"], time.time() + 300))
    departure, stop = _worker(node, fake.url)
    try:
        ku.wait_until(
            lambda: node.annotations().get(marker.DRAIN_RESULT) == "drained", 60, "the drain"
        )
        shutdown = departure.shutdown(
            Reason.POWEROFF, budget.logind(time.monotonic(), 60, None), "logind", 1
        )
        assert shutdown.wait(time.monotonic() + 30), "the poweroff's drain"
        assert node.annotations()[marker.DRAIN_REASON] == "poweroff"
        departure.cancel(1)
        ku.wait_until(
            lambda: node.annotations().get(marker.DRAIN_REASON) == "warning",
            30,
            "the cordon handed to the warning",
        )
        assert node.cordoned()
        fake.remove("ev-held")  # Azure cancels the maintenance
        ku.wait_until(lambda: not node.cordoned(), 30, "the cordon undone with the warning")
    finally:
        stop()
    assert not set(marker.MARKER_KEYS) & set(node.annotations())
