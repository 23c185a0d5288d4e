"""The cloud's early warnings as tables: what each endpoint's answer means, which warning
acts when, what the fence does about it, and how long its drain may take.

Pure functions only; the readers against real endpoints (AEMM for AWS, the contract fakes
for GCP and Azure) are in tests/test_cloud_warnings.py.
"""

from __future__ import annotations

import calendar
import json
import math
from dataclasses import replace

import pytest

from nodeagent.cloud import aws, azure, detect, gcp
from nodeagent.cloud.http import Error, MetadataError
from nodeagent.config import ConfigError, WarningsConfig, load
from nodeagent.departure import budget as budgets
from nodeagent.fence.decision import Observed, decide
from nodeagent.fence.marker import NodeFence
from nodeagent.fence.warning import Warned, due, implausible, marker_notes
from nodeagent.types import GOING_DOWN, Cloud, Notice, Occasion, Policy, Reason, Step, WarningKind

NOW = float(calendar.timegm((2026, 11, 26, 8, 0, 0, 0, 0, 0)))
CFG = WarningsConfig(maintenance_lead=600.0, rebalance_lifetime=1800.0)


def notice(kind: WarningKind, deadline: float | None = None, *, since: float = NOW, id: str = "e1"):
    return Notice(Cloud.AWS, kind, id, str(kind), deadline, since)


SPOT = notice(WarningKind.INTERRUPTION, NOW + 120, id="spot-itn-terminate")
MAINT = notice(WarningKind.MAINTENANCE, NOW + 86400, id="instance-event-1")
REBAL = notice(WarningKind.REBALANCE, since=NOW - 60, id="rebalance-x")


# -- which warning acts, when --------------------------------------------------------


@pytest.mark.parametrize(
    ("notices", "now", "acting", "later", "next_change"),
    [
        ((), NOW, None, (), math.inf),
        ((SPOT,), NOW, SPOT, (), math.inf),
        # A scheduled event a day ahead acts only from its start less the lead.
        ((MAINT,), NOW, None, (MAINT,), NOW + 86400 - 600),
        ((MAINT,), NOW + 86400 - 600, MAINT, (), math.inf),
        # A rebalance recommendation acts for its lifetime, counted from its notice time.
        ((REBAL,), NOW, REBAL, (), NOW - 60 + 1800),
        ((REBAL,), NOW - 60 + 1800, None, (), math.inf),
        # The strongest policy first (drain over the rebalance's none), then the soonest.
        ((REBAL, SPOT), NOW, SPOT, (), NOW - 60 + 1800),
        (
            (replace(SPOT, event_id="late", deadline=NOW + 300), SPOT),
            NOW,
            SPOT,
            (),
            math.inf,
        ),
    ],
)
def test_due(
    notices: tuple[Notice, ...],
    now: float,
    acting: Notice | None,
    later: tuple[Notice, ...],
    next_change: float,
) -> None:
    found = due(notices, CFG, now)
    assert (found.warned.notice if found.warned else None) == acting
    assert found.later == later
    assert found.next_change == next_change


def test_due_names_the_kinds_policy() -> None:
    cfg = replace(CFG, rebalance=Policy.CORDON)
    assert due((REBAL,), cfg, NOW).warned == Warned(REBAL, Policy.CORDON)


@pytest.mark.parametrize(
    ("n", "why"),
    [
        (SPOT, ""),
        (MAINT, ""),
        (replace(SPOT, deadline=NOW - 7200), "passed more than 3600s ago"),
        (replace(SPOT, deadline=NOW + 86400), "more than 3600s ahead"),
        (replace(MAINT, deadline=NOW + 90 * 86400), "more than 5184000s ahead"),
        (REBAL, ""),  # no deadline: nothing to doubt
    ],
)
def test_implausible(n: Notice, why: str) -> None:
    assert why in implausible(n, NOW) and bool(why) == bool(implausible(n, NOW))


def test_marker_notes() -> None:
    assert marker_notes(SPOT) == {
        "nodeagent.io/warning": "aws interruption",
        "nodeagent.io/warning-id": "spot-itn-terminate",
        "nodeagent.io/warning-deadline": "2026-11-26T08:02:00Z",
    }
    assert "nodeagent.io/warning-deadline" not in marker_notes(REBAL)


# -- AWS --------------------------------------------------------------------------------


def test_aws_spot_notice() -> None:
    n = aws.spot_notice('{\n\t"action": "terminate",\n\t"time": "2026-11-26T08:02:00Z"\n}')
    assert (n.kind, n.event_id, n.deadline) == (
        WarningKind.INTERRUPTION,
        "spot-itn-terminate",
        NOW + 120,
    )


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        '{"action": "terminate"}',
        '{"action": "terminate", "time": "yesterday"}',
        '{"action": "explode", "time": "2026-11-26T08:02:00Z"}',
        '{"action": "terminate", "time": 1764144120}',
    ],
)
def test_aws_spot_notice_malformed(body: str) -> None:
    with pytest.raises(MetadataError) as exc:
        aws.spot_notice(body)
    assert exc.value.error is Error.MALFORMED


def test_aws_rebalance_notice() -> None:
    n = aws.rebalance_notice('{"noticeTime": "2026-11-26T07:59:00Z"}')
    assert (n.kind, n.since, n.deadline) == (WarningKind.REBALANCE, NOW - 60, None)


def event(**kw: str) -> dict[str, str]:
    base = {
        "Code": "system-reboot",
        "Description": "scheduled reboot",
        "EventId": "instance-event-1",
        "NotBefore": "27 Nov 2026 08:00:00 GMT",
        "NotAfter": "27 Nov 2026 09:00:00 GMT",
        "State": "active",
    }
    return base | kw


@pytest.mark.parametrize(
    ("events", "ids"),
    [
        ([event()], ["instance-event-1"]),
        ([event(State="canceled")], []),
        ([event(State="completed")], []),
        (
            [event(Code="instance-stop"), event(EventId="e2", Code="instance-retirement")],
            ["instance-event-1", "e2"],
        ),
        ([event(Code="something-new")], []),
        ([{k: v for k, v in event().items() if k != "NotAfter"}], ["instance-event-1"]),
    ],
)
def test_aws_scheduled_events(events: list[dict[str, str]], ids: list[str]) -> None:
    notices = aws.scheduled_notices(json.dumps(events), NOW)
    assert [n.event_id for n in notices] == ids
    assert all(n.deadline == NOW + 86400 and n.kind is WarningKind.MAINTENANCE for n in notices)


@pytest.mark.parametrize("body", ['{"Code": 1}', "[1]", '[{"Code": "system-reboot"}]', "nope"])
def test_aws_scheduled_events_malformed(body: str) -> None:
    with pytest.raises(MetadataError):
        aws.scheduled_notices(body, NOW)


@pytest.mark.parametrize(
    ("text", "acts"),
    [
        ("Terminated", True),
        ("InService", False),
        ("Terminated\n", True),
        ("Warmed:Terminated", False),
    ],
)
def test_aws_asg_target_state(text: str, acts: bool) -> None:
    n = aws.asg_notice(text, NOW)
    assert (n is not None) == acts
    assert n is None or n.kind is WarningKind.TERMINATION


# -- GCP --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind", "deadline"),
    [
        ("NONE", None, None),
        ("MIGRATE_ON_HOST_MAINTENANCE", WarningKind.MIGRATION, None),
        ("TERMINATE_ON_HOST_MAINTENANCE", WarningKind.MAINTENANCE, NOW + 60),
        ("SHUTDOWN_ON_HOST_MAINTENANCE", WarningKind.MAINTENANCE, NOW + 60),
    ],
)
def test_gcp_maintenance_event(
    value: str, kind: WarningKind | None, deadline: float | None
) -> None:
    n = gcp.maintenance_notice(value, NOW)
    assert (n.kind if n else None) == kind
    assert (n.deadline if n else None) == deadline


@pytest.mark.parametrize("value", ["", "MAYBE", "<html>"])
def test_gcp_values_outside_the_contract(value: str) -> None:
    with pytest.raises(MetadataError):
        gcp.maintenance_notice(value, NOW)
    with pytest.raises(MetadataError):
        gcp.preempted_notice(value, NOW)


def test_gcp_preempted() -> None:
    assert gcp.preempted_notice("FALSE", NOW) is None
    n = gcp.preempted_notice("TRUE", NOW)
    assert n is not None and n.kind is WarningKind.INTERRUPTION and n.deadline == NOW + 30


# -- Azure ------------------------------------------------------------------------------


def azure_doc(*events: dict[str, object]) -> str:
    return json.dumps({"DocumentIncarnation": 2, "Events": list(events)})


def az_event(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
        "EventStatus": "Scheduled",
        "EventType": "Preempt",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm1"],
        "NotBefore": "Thu, 26 Nov 2026 08:00:30 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }
    return base | kw


@pytest.mark.parametrize(
    ("events", "kinds", "approvable", "others"),
    [
        ([], [], [], 0),
        ([az_event()], [WarningKind.INTERRUPTION], [True], 0),
        ([az_event(Resources=["vm1", "vm2"])], [WarningKind.INTERRUPTION], [False], 0),
        ([az_event(Resources=["VM1"])], [WarningKind.INTERRUPTION], [True], 0),
        ([az_event(Resources=["vm2"])], [], [], 1),
        ([az_event(EventType="Terminate")], [WarningKind.TERMINATION], [True], 0),
        ([az_event(EventType="Reboot")], [WarningKind.MAINTENANCE], [True], 0),
        ([az_event(EventType="Redeploy")], [WarningKind.MAINTENANCE], [True], 0),
        ([az_event(EventType="Freeze")], [WarningKind.MIGRATION], [True], 0),
        ([az_event(EventType="Unknown")], [], [], 0),
    ],
)
def test_azure_events(
    events: list[dict[str, object]], kinds: list[WarningKind], approvable: list[bool], others: int
) -> None:
    ours, theirs = azure.notices(azure_doc(*events), "vm1", NOW)
    assert [n.kind for n in ours] == kinds
    assert [n.approvable for n in ours] == approvable
    assert len(theirs) == others


def test_azure_not_before() -> None:
    (n,), _ = azure.notices(azure_doc(az_event()), "vm1", NOW)
    assert n.deadline == NOW + 30
    (started,), _ = azure.notices(
        azure_doc(az_event(NotBefore="", EventStatus="Started")), "vm1", NOW
    )
    assert started.deadline is None


@pytest.mark.parametrize(
    "body",
    ["{}", "[]", '{"Events": 3}', '{"Events": [{"EventType": "Preempt"}]}', "<html/>"],
)
def test_azure_malformed(body: str) -> None:
    with pytest.raises(MetadataError):
        azure.notices(body, "vm1", NOW)


# -- which cloud ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dmi", "cloud"),
    [
        ({}, Cloud.OFF),
        ({"sys_vendor": "QEMU", "product_name": "Standard PC (Q35 + ICH9, 2009)"}, Cloud.OFF),
        ({"sys_vendor": "Amazon EC2", "product_name": "m7g.large"}, Cloud.AWS),
        ({"sys_vendor": "Xen", "bios_version": "4.11.amazon"}, Cloud.AWS),
        ({"sys_vendor": "Google", "product_name": "Google Compute Engine"}, Cloud.GCP),
        (
            {"sys_vendor": "Microsoft Corporation", "chassis_asset_tag": detect.AZURE_ASSET_TAG},
            Cloud.AZURE,
        ),
        # Hyper-V elsewhere says Microsoft too, without Azure's asset tag.
        ({"sys_vendor": "Microsoft Corporation", "product_name": "Virtual Machine"}, Cloud.OFF),
    ],
)
def test_cloud_of(dmi: dict[str, str], cloud: Cloud) -> None:
    assert detect.cloud_of(dmi) is cloud


# -- the drain's time -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline", "left", "drain", "final"),
    [
        (120.0, None, 120.0, False),  # no time said: the configured deadline
        (120.0, 3600.0, 120.0, False),  # time to spare: the configured deadline
        (120.0, 120.0, 120.0 - 10 - 3, True),  # a Spot notice: ends before the cloud acts
        (60.0, 120.0, 60.0, False),
        (120.0, 5.0, 1.0, True),  # too late: the shortest drain, still final
    ],
)
def test_warning_budget(deadline: float, left: float | None, drain: float, final: bool) -> None:
    b = budgets.warning(100.0, deadline, left)
    assert b.drain_until - 100.0 == pytest.approx(drain)
    assert b.final is final


# -- the fence --------------------------------------------------------------------------

FREE = NodeFence(False, False, "", "", "", "")
PERSON = NodeFence(True, False, "", "", "", "")


def fence(reason: str, result: str = "", warning_id: str = "") -> NodeFence:
    return NodeFence(
        True, True, reason, "t1", "boot-2", result, warning_id=warning_id, tainted=True
    )


def seen(occasion: Occasion = Occasion.NODE, f: NodeFence = FREE, **kw: object) -> Observed:
    return replace(Observed(occasion, f, "boot-2"), **kw)  # type: ignore[arg-type]


DRAIN = Warned(SPOT, Policy.DRAIN)
CORDON = Warned(REBAL, Policy.CORDON)
REPORT = Warned(REBAL, Policy.NONE)


@pytest.mark.parametrize(
    ("o", "want"),
    [
        (seen(warning=DRAIN), (Step.DRAIN, Reason.WARNING)),
        (seen(warning=CORDON), (Step.CORDON, Reason.WARNING)),
        (seen(warning=REPORT), (Step.NOTHING, None)),
        # Drained for this very warning: nothing more; for another one: drain again.
        (seen(f=fence("warning", "drained", SPOT.event_id), warning=DRAIN), (Step.NOTHING, None)),
        (seen(f=fence("warning", "drained", "other"), warning=DRAIN), (Step.DRAIN, Reason.WARNING)),
        (
            seen(f=fence("warning", "timed-out", SPOT.event_id), warning=DRAIN),
            (Step.DRAIN, Reason.WARNING),
        ),
        (
            seen(f=fence("warning", "timed-out", SPOT.event_id), warning=DRAIN, retry_pending=True),
            (Step.NOTHING, None),
        ),
        # A rebalance cordon, then the Spot notice: the drain.
        (seen(f=fence("warning", "", REBAL.event_id), warning=DRAIN), (Step.DRAIN, Reason.WARNING)),
        (seen(f=fence("warning", "", REBAL.event_id), warning=CORDON), (Step.NOTHING, None)),
        # A person's cordon stays theirs; the drain goes on under it.
        (seen(f=PERSON, warning=CORDON), (Step.NOTHING, None)),
        (seen(f=PERSON, warning=DRAIN), (Step.DRAIN, Reason.WARNING)),
        # The warning gone: its fence goes, only once the endpoint was read.
        (seen(f=fence("warning", "drained", SPOT.event_id)), (Step.UNCORDON, None)),
        (
            seen(f=fence("warning", "drained", SPOT.event_id), warnings_known=False),
            (Step.NOTHING, None),
        ),
        (seen(f=fence("warning"), warning=REPORT), (Step.UNCORDON, None)),
        # ... or is handed to the evacuate taint that is there too.
        (
            seen(f=fence("warning", "drained"), taint="nodeagent.io/evacuate"),
            (Step.DRAIN, Reason.EVACUATE),
        ),
        # An evacuation's cordon, then a warning: the warning's drain takes it over.
        (
            seen(f=fence("evacuate", "drained"), taint="t", warning=DRAIN),
            (Step.DRAIN, Reason.WARNING),
        ),
        # Another reason's fence is never undone by a warning's end.
        (seen(f=fence("evacuate", "drained"), taint="t"), (Step.NOTHING, None)),
        (seen(f=replace(fence("poweroff", "drained"), tainted=False)), (Step.NOTHING, None)),
        # A shutdown owns the node whatever the cloud says.
        (seen(warning=DRAIN, shutdown=Reason.POWEROFF), (Step.NOTHING, None)),
        # A shutdown called off while the warning holds: the warning's cordon.
        (seen(Occasion.CANCELLED, fence("poweroff"), warning=DRAIN), (Step.CORDON, Reason.WARNING)),
        (seen(Occasion.CANCELLED, fence("poweroff"), warning=REPORT), (Step.UNCORDON, None)),
        # After boot, a shutdown's cordon stays while a warning holds the node.
        (
            seen(Occasion.SETTLED, fence("reboot", "drained"), started_at="t1", warning=DRAIN),
            (Step.NOTHING, None),
        ),
    ],
)
def test_decision_with_warnings(o: Observed, want: tuple[Step, Reason | None]) -> None:
    d = decide(o)
    assert (d.step, d.reason) == want
    if d.reason is Reason.WARNING:
        # A shutdown called off hands its cordon to the warning whole: the warning's end
        # must undo it, so nothing of the shutdown's marker is kept.
        kept = frozenset() if o.occasion is Occasion.CANCELLED else GOING_DOWN
        assert d.keep == kept and d.warning is not None


# -- a warning whose departure happened ----------------------------------------------

# Azure keeps an approved Reboot listed as Started (NotBefore empty) for minutes after the
# VM is back; the fence for it was taken in boot-1, the Node now shows boot-2.
STARTED = Notice(Cloud.AZURE, WarningKind.MAINTENANCE, "ev-reboot", "Reboot", None, NOW)
REBOOTED = Warned(STARTED, Policy.DRAIN)


def carried(
    reason: str, boot: str = "boot-1", result: str = "drained", *, n: Notice = STARTED
) -> NodeFence:
    """The agent's marker for `reason` carrying the warning `n` (a shutdown keeps it), as
    the agent sees it after start: a shutdown's taint went at once (Step.UNTAINT)."""
    what = f"{n.cloud} {n.kind}"
    return NodeFence(True, True, reason, "t1", boot, result, warning_id=n.event_id, warning=what)


@pytest.mark.parametrize(
    ("fence_", "boot", "departed"),
    [
        (carried("reboot"), "boot-2", "ev-reboot"),
        (carried("warning"), "boot-2", "ev-reboot"),  # a hard reset: no shutdown marker
        (carried("reboot", result=""), "boot-2", "ev-reboot"),  # gone, drained or not
        (carried("reboot", "boot-2"), "boot-2", ""),  # this boot: still to come
        (carried("reboot"), "", ""),  # the Node's boot ID unknown
        (replace(carried("reboot"), boot_id=""), "boot-2", ""),
        (replace(carried("reboot"), warning_id=""), "boot-2", ""),
        (carried("reboot", n=SPOT), "boot-2", SPOT.event_id),
        (carried("reboot", n=replace(SPOT, kind=WarningKind.TERMINATION)), "boot-2", SPOT.event_id),
        # A rebalance recommendation or a live migration never departs.
        (carried("warning", n=REBAL), "boot-2", ""),
        (carried("warning", n=replace(SPOT, kind=WarningKind.MIGRATION)), "boot-2", ""),
        (replace(carried("reboot"), warning="azure"), "boot-2", ""),  # not this version's
    ],
)
def test_fence_departed(fence_: NodeFence, boot: str, departed: str) -> None:
    assert fence_.departed(boot) == departed


def departed_row(o: Observed, want: tuple[Step, Reason | None]) -> tuple[Observed, object]:
    return (replace(o, warning_ids=frozenset({STARTED.event_id})), want)


@pytest.mark.parametrize(
    ("o", "want"),
    [
        # After the boot: the reboot's cordon is undone as after any reboot, though the
        # endpoint still lists the event; no drain for it meanwhile.
        departed_row(
            seen(Occasion.SETTLED, carried("reboot"), started_at="t1", warning=REBOOTED),
            (Step.UNCORDON, None),
        ),
        departed_row(seen(f=carried("reboot"), warning=REBOOTED), (Step.NOTHING, None)),
        departed_row(seen(f=carried("reboot", result=""), warning=REBOOTED), (Step.NOTHING, None)),
        # Uncordoned: the Node's note remembers it while the endpoint lists it.
        departed_row(seen(warning=REBOOTED, warning_departed="ev-reboot"), (Step.NOTHING, None)),
        # ... and forgets it once the endpoint, read, lists it no more.
        (seen(warning_departed="ev-reboot"), (Step.FORGET, None)),
        (seen(warning_departed="ev-reboot", warnings_known=False), (Step.NOTHING, None)),
        # The window before the Node shows the new boot ID: the shutdown's marker carries
        # the warning, drained: no new drain (nor a cordon, for policy cordon).
        departed_row(seen(f=carried("reboot", "boot-2"), warning=REBOOTED), (Step.NOTHING, None)),
        departed_row(
            seen(f=carried("reboot", "boot-2", ""), warning=Warned(STARTED, Policy.CORDON)),
            (Step.NOTHING, None),
        ),
        # A hard reset (no shutdown marker): the warning's fence of boot-1 is over.
        departed_row(seen(f=carried("warning"), warning=REBOOTED), (Step.UNCORDON, None)),
        # A new warning (another ID) fences as usual, the note or the marker regardless.
        (seen(warning=DRAIN, warning_departed="ev-reboot"), (Step.DRAIN, Reason.WARNING)),
        (seen(f=carried("reboot"), warning=DRAIN), (Step.DRAIN, Reason.WARNING)),
        # Kinds that never depart fence though their ID is the note (AWS's "rebalance").
        (
            seen(
                warning=CORDON,
                warning_departed=REBAL.event_id,
                warning_ids=frozenset({"rebalance-x"}),
            ),
            (Step.CORDON, Reason.WARNING),
        ),
        # A soft-reboot keeps the boot ID: the warning is still to come, its fence stays.
        departed_row(
            seen(
                Occasion.SETTLED,
                carried("soft-reboot", "boot-2"),
                started_at="t1",
                warning=REBOOTED,
            ),
            (Step.NOTHING, None),
        ),
        # A shutdown called off in the same boot: the warning takes its cordon back.
        departed_row(
            seen(Occasion.CANCELLED, carried("reboot", "boot-2", ""), warning=REBOOTED),
            (Step.CORDON, Reason.WARNING),
        ),
    ],
)
def test_decision_after_the_warnings_departure(
    o: Observed, want: tuple[Step, Reason | None]
) -> None:
    assert (decide(o).step, decide(o).reason) == want


@pytest.mark.parametrize(
    ("o", "carries"),
    [
        (
            seen(
                Occasion.SHUTDOWN,
                shutdown=Reason.REBOOT,
                shutdown_policy=Policy.DRAIN,
                warning=DRAIN,
            ),
            SPOT,
        ),
        (
            seen(
                Occasion.SHUTDOWN,
                shutdown=Reason.REBOOT,
                shutdown_policy=Policy.CORDON,
                warning=DRAIN,
            ),
            SPOT,
        ),
        (
            seen(
                Occasion.SHUTDOWN,
                shutdown=Reason.REBOOT,
                shutdown_policy=Policy.DRAIN,
                warning=REPORT,
            ),
            None,
        ),
        (seen(Occasion.SHUTDOWN, shutdown=Reason.REBOOT, shutdown_policy=Policy.DRAIN), None),
        (
            seen(
                Occasion.SHUTDOWN,
                shutdown=Reason.REBOOT,
                shutdown_policy=Policy.DRAIN,
                warning=REBOOTED,
                warning_departed="ev-reboot",
            ),
            None,
        ),
    ],
)
def test_a_shutdown_carries_the_fencing_warning(o: Observed, carries: Notice | None) -> None:
    """The shutdown's marker keeps the warning's keys, so the next boot knows it departed;
    its drain is the shutdown's own (reason, condition)."""
    from nodeagent.departure.executor import describe

    d = decide(o)
    assert d.reason is Reason.REBOOT and d.warning == carries
    assert describe(d) == "reboot"


def test_the_marker_write_that_drops_a_departed_warning_keeps_its_id() -> None:
    from nodeagent.fence import marker

    def node(boot: str, **ann: str) -> dict[str, object]:
        annotations = {marker.BOOT_ID: "boot-1", **marker_notes(STARTED), **ann}
        return {
            "metadata": {"annotations": annotations},
            "spec": {},
            "status": {"nodeInfo": {"bootID": boot}},
        }

    assert marker._departed_note(node("boot-2")) == {marker.WARNING_DEPARTED: "ev-reboot"}
    assert marker._departed_note(node("boot-1")) == {}
    assert marker.departed_note(node("boot-1", **{marker.WARNING_DEPARTED: "x"})) == "x"
    assert marker.WARNING_DEPARTED not in marker.MARKER_KEYS  # an uncordon leaves it


def test_warning_undo_touches_only_the_warnings_fence() -> None:
    d = decide(seen(f=fence("warning", "drained", SPOT.event_id)))
    assert d.undo == frozenset({Reason.WARNING})


# -- the config -------------------------------------------------------------------------


def test_config_defaults_and_policies() -> None:
    cfg = load(environ={}).warnings
    assert cfg.cloud is Cloud.AUTO
    assert [cfg.policy(k) for k in WarningKind] == [
        Policy.DRAIN,
        Policy.DRAIN,
        Policy.DRAIN,
        Policy.NONE,
        Policy.NONE,
    ]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NODEAGENT_WARNINGS_CLOUD": "openstack"}, "bad value 'openstack'"),
        ({"NODEAGENT_WARNINGS_CLOUD": ""}, "empty value"),
        ({"NODEAGENT_WARNINGS_REBALANCE": "evict"}, "bad value 'evict'"),
        ({"NODEAGENT_WARNINGS_METADATA_URL": "https://x"}, "not an http:// URL"),
        ({"NODEAGENT_WARNINGS_METADATA_URL": ""}, "empty value"),
        ({"NODEAGENT_WARNINGS_REBALANCE_LIFETIME": "0s"}, "at least 1s"),
    ],
)
def test_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(environ=env)


def test_config_url() -> None:
    cfg = load(environ={"NODEAGENT_WARNINGS_METADATA_URL": "http://127.0.0.1:1338"}).warnings
    assert cfg.metadata_url == "http://127.0.0.1:1338"
