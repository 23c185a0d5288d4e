"""Azure: Scheduled Events from the instance metadata service.

``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true``
(learn.microsoft.com/azure/virtual-machines/linux/scheduled-events) answers
``{"DocumentIncarnation": n, "Events": [...]}``; each event has ``EventId``,
``EventType`` (Reboot, Redeploy, Freeze, Preempt, Terminate), ``Resources`` (the VM names
it touches: one event may reach every VM of an availability set or scale set),
``EventStatus`` (Scheduled, Started) and ``NotBefore`` (``Mon, 19 Sep 2016 18:29:47 GMT``,
empty once Started). An event ends by leaving the list: there is no completed state, and
a canceled event leaves it too.

Approving an event (``POST`` of ``{"StartRequests": [{"EventId": ...}]}``) starts it for
every VM it names, so the agent approves only events naming this VM alone, and only once
its drain is done (the departure worker calls `approve`).
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import logging
from typing import Any

from nodeagent import metrics
from nodeagent.cloud.http import Error, MetadataError, request, unexpected
from nodeagent.types import Cloud, Notice, WarningKind

log = logging.getLogger(__name__)

BASE = "http://169.254.169.254"
EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
VM_NAME = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
HEADERS = {"Metadata": "true"}
KINDS = {
    "Preempt": WarningKind.INTERRUPTION,
    "Terminate": WarningKind.TERMINATION,
    "Reboot": WarningKind.MAINTENANCE,
    "Redeploy": WarningKind.MAINTENANCE,
    "Freeze": WarningKind.MIGRATION,
}


def not_before(text: Any) -> float | None:
    """'Mon, 19 Sep 2016 18:29:47 GMT' -> epoch seconds; '' (Started) -> None."""
    if text in ("", None):
        return None
    if not isinstance(text, str):
        raise ValueError(f"not a time: {text!r}")
    return email.utils.parsedate_to_datetime(text).timestamp()


def notices(body: str, vm_name: str, now: float) -> tuple[list[Notice], list[str]]:
    """The events naming this VM, and the IDs of those naming only others."""
    try:
        doc = json.loads(body)
        events = doc["Events"]
        if not isinstance(events, list):
            raise TypeError("Events is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise MetadataError(Error.MALFORMED, f"scheduled events: {exc} in {body[:80]!r}") from None
    ours: list[Notice] = []
    others: list[str] = []
    for event in events:
        try:
            notice = _notice(event, vm_name, now)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise MetadataError(Error.MALFORMED, f"scheduled event {event!r}: {exc}") from None
        if notice is None and event.get("EventType") in KINDS:
            others.append(str(event["EventId"]))
        elif notice is not None:
            ours.append(notice)
    return ours, others


def _notice(event: dict[str, Any], vm_name: str, now: float) -> Notice | None:
    kind = KINDS.get(event["EventType"])
    resources = [str(r).lower() for r in event["Resources"]]
    if kind is None or vm_name.lower() not in resources:
        return None
    return Notice(
        Cloud.AZURE,
        kind,
        str(event["EventId"]),
        f"{event['EventType']} ({event.get('EventStatus', '')})",
        not_before(event.get("NotBefore", "")),
        now,
        approvable=resources == [vm_name.lower()],
    )


class ScheduledEvents:
    """Polls the events every second, as Azure recommends; approves this VM's alone."""

    interval = 1.0
    # The service starts on a VM's first call and may take two minutes to answer it.
    timeout = 30.0

    def __init__(self, base: str = "") -> None:
        self.base = (base or BASE).rstrip("/")
        self._vm_name = ""
        self._first_seen: dict[str, float] = {}
        self._others_seen: set[str] = set()

    def read(self, now: float) -> list[Notice]:
        name = self.vm_name()
        reply = request(self.base, EVENTS, headers=HEADERS, timeout=self.timeout)
        if reply.status != 200:
            raise unexpected(reply, EVENTS)
        ours, others = notices(reply.body, name, now)
        for event_id in set(others) - self._others_seen:
            self._others_seen.add(event_id)
            metrics.METADATA_ERRORS.labels(Cloud.AZURE, Error.OTHER_VM).inc()
            log.info("scheduled event %s names other VMs, not %s: not acted on", event_id, name)
        return [self._dated(n, now) for n in ours]

    def _dated(self, notice: Notice, now: float) -> Notice:
        return dataclasses.replace(notice, since=self._first_seen.setdefault(notice.event_id, now))

    def vm_name(self) -> str:
        """This VM's name, as events name it in Resources (read once)."""
        if not self._vm_name:
            reply = request(self.base, VM_NAME, headers=HEADERS, timeout=self.timeout)
            if reply.status != 200 or not reply.body.strip():
                raise unexpected(reply, VM_NAME)
            self._vm_name = reply.body.strip()
        return self._vm_name

    def approve(self, notice: Notice) -> None:
        """Start the event now: the drain is done, and the event names this VM alone."""
        if not notice.approvable:
            return
        body = json.dumps({"StartRequests": [{"EventId": notice.event_id}]})
        reply = request(
            self.base,
            EVENTS,
            method="POST",
            headers={**HEADERS, "Content-Type": "application/json"},
            body=body,
            timeout=self.timeout,
        )
        if reply.status != 200:
            raise unexpected(reply, EVENTS)
        log.info("approved scheduled event %s: the node is drained", notice.event_id)
