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

import email.utils
import json
import logging
from functools import partial
from typing import Any

from nodeagent import metrics
from nodeagent.cloud.http import Error, MetadataError, request, unexpected
from nodeagent.cloud.reading import Item, dated, entry_key, read_item
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


def events(body: str, vm_name: str, now: float) -> tuple[list[Item], list[str]]:
    """The document as items (the list, then each event: this VM's notice, or none for
    one naming only other VMs or of a type that takes nothing down), and the IDs of the
    events naming only others. Raises MetadataError for a document that cannot be read
    as one, or an event without its EventId: then no event can be told apart."""
    try:
        doc = json.loads(body)
        listed = doc["Events"]
        if not isinstance(listed, list):
            raise TypeError("Events is not a list")
        ids = [str(event["EventId"]) for event in listed]
    except (ValueError, KeyError, TypeError) as exc:
        raise MetadataError(Error.MALFORMED, f"scheduled events: {exc} in {body[:80]!r}") from None
    entries: list[Item] = []
    others: list[str] = []
    for event_id, event in zip(ids, listed, strict=True):
        entry = read_item(entry_key("events", event_id), partial(_notices, event, vm_name, now))
        entries.append(entry)
        if entry.believed and not entry.notices and event.get("EventType") in KINDS:
            others.append(event_id)
    return [Item("events", entries=tuple(e.key for e in entries)), *entries], others


def notices(body: str, vm_name: str, now: float) -> tuple[list[Notice], list[str]]:
    """The events naming this VM, and the IDs of those naming only others; raises
    MetadataError for any event not believed."""
    items, others = events(body, vm_name, now)
    ours: list[Notice] = []
    for item in items:
        if item.doubt is not None:
            raise item.doubt
        ours += item.notices
    return ours, others


def _notices(event: dict[str, Any], vm_name: str, now: float) -> list[Notice]:
    try:
        notice = _notice(event, vm_name, now)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise MetadataError(Error.MALFORMED, f"scheduled event {event!r}: {exc}") from None
    return [notice] if notice is not None else []


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
    # The service starts on a VM's first call and may take two minutes to answer it:
    # until its first answer a read may take this long; after it, a read is quick.
    first_timeout = 30.0
    timeout = 5.0
    items: tuple[str, ...] = ("events",)

    def __init__(self, base: str = "") -> None:
        self.base = (base or BASE).rstrip("/")
        self._vm_name = ""
        self._answered = False
        self._first_seen: dict[str, float] = {}
        self._others_seen: set[str] = set()

    def read(self, now: float) -> list[Item]:
        """The document, whole or not at all: the list, then each event in it."""
        try:
            items, others = self._events(now)
        except MetadataError as exc:
            return [Item("events", doubt=exc)]
        for event_id in set(others) - self._others_seen:
            self._others_seen.add(event_id)
            metrics.METADATA_ERRORS.labels(Cloud.AZURE, Error.OTHER_VM).inc()
            log.info(
                "scheduled event %s names other VMs, not %s: not acted on", event_id, self._vm_name
            )
        return [dated(item, self._first_seen, now) for item in items]

    def _events(self, now: float) -> tuple[list[Item], list[str]]:
        name = self.vm_name()
        reply = request(self.base, EVENTS, headers=HEADERS, timeout=self._timeout())
        if reply.status != 200:
            raise unexpected(reply, EVENTS)
        self._answered = True
        return events(reply.body, name, now)

    def _timeout(self) -> float:
        return self.timeout if self._answered else self.first_timeout

    def vm_name(self) -> str:
        """This VM's name, as events name it in Resources (read once)."""
        if not self._vm_name:
            reply = request(self.base, VM_NAME, headers=HEADERS, timeout=self._timeout())
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
            timeout=self._timeout(),
        )
        if reply.status != 200:
            raise unexpected(reply, EVENTS)
        log.info("approved scheduled event %s: the node is drained", notice.event_id)
