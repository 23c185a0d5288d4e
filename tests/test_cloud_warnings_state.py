"""The cloud's warnings as the departure knows them (nodeagent/departure/warnings.py): when a
reading asks for a decision, what the decision is handed, and what is reported, once,
read from the milestones the reports write. The Events' delivery is the cluster tests'
(tests/test_cloud_warnings.py): here the recorder is off."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest

from nodeagent.config import WarningsConfig
from nodeagent.departure.warnings import CloudWarnings
from nodeagent.fence import marker
from nodeagent.kube.client import JSON, Kube
from nodeagent.kube.endpoint import Endpoint
from nodeagent.report.events import EventRecorder
from nodeagent.types import FIELDS_ATTR, MILESTONE_ATTR, Cloud, Notice, Policy, WarningKind

NOW = time.time()
SPOT = Notice(Cloud.AWS, WarningKind.INTERRUPTION, "spot", "spot terminate", NOW + 120, NOW)
REBAL = Notice(Cloud.AWS, WarningKind.REBALANCE, "rebal", "rebalance", None, NOW)
# An Azure Reboot the fence of boot-1 was taken for: on boot-2 it has happened.
REBOOT = Notice(Cloud.AZURE, WarningKind.MAINTENANCE, "ev-reboot", "Reboot", None, NOW)
NODE: JSON = {"metadata": {"name": "n", "annotations": {}}, "spec": {}, "status": {}}


def warnings(cfg: WarningsConfig | None = None) -> CloudWarnings:
    off = EventRecorder(Kube.from_endpoint(Endpoint("https://127.0.0.1:1")), "n", enabled=False)
    return CloudWarnings(cfg or WarningsConfig(), off)


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """(milestone, event ID) of each report, in order; cleared after."""
    found = [
        (getattr(r, MILESTONE_ATTR).value, getattr(r, FIELDS_ATTR)["event_id"])
        for r in caplog.records
        if hasattr(r, MILESTONE_ATTR)
    ]
    caplog.clear()
    return found


def test_a_decision_is_asked_for_when_the_list_or_the_acting_warning_changes() -> None:
    w = warnings()
    assert not w.now().known
    assert w.heard(()) is True  # the first reading: a warning's fence may be undone now
    assert w.now().known and w.now().acting == ()
    assert w.heard(()) is False
    assert w.heard((SPOT,)) is True
    assert w.heard((SPOT,)) is False
    assert w.now().ids == {"spot"} and w.now().drains
    assert w.heard((SPOT, REBAL)) is True  # listed: decided again, though SPOT still acts
    assert [a.notice for a in w.now().acting] == [SPOT, REBAL]  # the strongest first
    assert w.heard((REBAL,)) is True
    assert not w.now().drains and w.tick() is False


def test_the_acting_warning_changes_by_time_alone() -> None:
    cfg = replace(WarningsConfig(), rebalance=Policy.CORDON, rebalance_lifetime=0.2)
    w = warnings(cfg)
    assert w.heard((replace(REBAL, since=time.time()),)) is True
    assert w.now().acting and w.tick() is False
    time.sleep(0.3)
    assert w.tick() is True  # its lifetime over
    assert w.now().acting == () and w.now().ids == {"rebal"}


def test_each_warning_is_reported_once_as_it_comes_and_goes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "nodeagent.departure.warnings")
    w = warnings()
    w.heard((SPOT,))
    assert said(caplog) == []  # not before the Node is known
    w.report(NODE)
    assert said(caplog) == [("warning-heard", "spot")]
    w.report(NODE)
    w.heard((SPOT,))
    w.report(NODE)
    assert said(caplog) == []
    w.heard((REBAL,))
    w.report(NODE)
    assert said(caplog) == [("warning-heard", "rebal"), ("warning-over", "spot")]


def test_a_departed_warning_is_not_news(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "nodeagent.departure.warnings")
    carried = {
        marker.CORDONED_BY: "nodeagent",
        marker.DRAIN_REASON: "reboot",
        marker.BOOT_ID: "boot-1",
        marker.DRAIN_RESULT: "drained",
        marker.WARNING: "azure maintenance",
        marker.WARNING_ID: "ev-reboot",
    }
    node: JSON = {
        "metadata": {"name": "n", "annotations": carried},
        "spec": {"unschedulable": True},
        "status": {"nodeInfo": {"bootID": "boot-2"}},
    }
    w = warnings()
    w.heard((REBOOT,))
    w.report(node)
    w.heard(())
    w.report(node)
    assert said(caplog) == []
    # It is still handed to the decision, which alone tells it departed (Observed.acting).
    w.heard((REBOOT,))
    assert [a.notice for a in w.now().acting] == [REBOOT]
