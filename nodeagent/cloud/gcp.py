"""GCP: the early warnings Compute Engine's metadata server shows the VM.

Two keys under ``/computeMetadata/v1/instance/``, read with ``Metadata-Flavor: Google``
(cloud.google.com/compute/docs/metadata/querying-metadata, .../getting-live-migration-notice):

- ``maintenance-event``: ``NONE``, ``MIGRATE_ON_HOST_MAINTENANCE`` (live migration: the VM
  pauses and stays) or ``TERMINATE_ON_HOST_MAINTENANCE`` (the VM stops; 60 s ahead, an
  hour for GPU VMs), back to ``NONE`` when over. It is long-polled
  (``?wait_for_change=true&last_etag=``), so a change is heard at once; Compute Engine
  sends the live-migration notice only to a VM that read the key since the last event.
- ``preempted``: ``TRUE`` once a Spot or preemptible VM is being preempted (ACPI soft
  off, then 30 s to hard off).
"""

from __future__ import annotations

from nodeagent.cloud.http import Error, MetadataError, Reply, request, unexpected
from nodeagent.cloud.reading import Item, read_item
from nodeagent.types import Cloud, Notice, WarningKind

BASE = "http://169.254.169.254"
MAINTENANCE = "/computeMetadata/v1/instance/maintenance-event"
PREEMPTED = "/computeMetadata/v1/instance/preempted"
HEADERS = {"Metadata-Flavor": "Google"}
WAIT_SECONDS = 5  # a long poll's own end: the preempted key is read between polls
TERMINATE_NOTICE = 60.0  # seconds from a TERMINATE maintenance event to the stop
PREEMPT_NOTICE = 30.0  # seconds from preemption to hard off
MAINTENANCE_VALUES = {
    "NONE": None,
    "MIGRATE_ON_HOST_MAINTENANCE": WarningKind.MIGRATION,
    "TERMINATE_ON_HOST_MAINTENANCE": WarningKind.MAINTENANCE,
    # The name Google's own sample code uses for the same event.
    "SHUTDOWN_ON_HOST_MAINTENANCE": WarningKind.MAINTENANCE,
}


def maintenance_notice(value: str, since: float) -> Notice | None:
    text = value.strip()
    if text not in MAINTENANCE_VALUES:
        raise MetadataError(Error.MALFORMED, f"{MAINTENANCE}: unknown value {text[:60]!r}")
    kind = MAINTENANCE_VALUES[text]
    if kind is None:
        return None
    deadline = since + TERMINATE_NOTICE if kind is WarningKind.MAINTENANCE else None
    return Notice(Cloud.GCP, kind, f"maintenance-{text.lower()}", text, deadline, since)


def preempted_notice(value: str, since: float) -> Notice | None:
    text = value.strip()
    if text not in ("TRUE", "FALSE"):
        raise MetadataError(Error.MALFORMED, f"{PREEMPTED}: unknown value {text[:60]!r}")
    if text == "FALSE":
        return None
    return Notice(
        Cloud.GCP,
        WarningKind.INTERRUPTION,
        "preempted",
        "preempted",
        since + PREEMPT_NOTICE,
        since,
    )


class GceMetadata:
    """Long-polls maintenance-event, reads preempted between polls; each key an item."""

    interval = 0.0  # the long poll is the wait
    timeout = 2.0  # a plain read's; a long poll's is its own end plus this
    items: tuple[str, ...] = ("maintenance-event", "preempted")

    def __init__(self, base: str = "") -> None:
        self.base = (base or BASE).rstrip("/")
        self._etag = ""
        self._since: dict[str, tuple[str, float]] = {}  # item -> (its value, first read)

    def read(self, now: float) -> list[Item]:
        return [
            read_item("maintenance-event", lambda: self._notices(self._maintenance(), now)),
            read_item("preempted", lambda: self._notices(self._get(PREEMPTED).body, now, True)),
        ]

    def _notices(self, value: str, now: float, preempted: bool = False) -> list[Notice]:
        """The key's notice, dated from the first reading of its value (a value gone and
        back later is a new event, with a new time)."""
        key = "preempted" if preempted else "maintenance-event"
        text = value.strip()
        seen, since = self._since.get(key, ("", now))
        if seen != text:
            since = now
        make = preempted_notice if preempted else maintenance_notice
        notice = make(value, since)  # raises for a value outside the contract
        self._since[key] = (text, since)
        return [notice] if notice is not None else []

    def _maintenance(self) -> str:
        path = MAINTENANCE
        timeout = self.timeout
        if self._etag:
            path += f"?wait_for_change=true&last_etag={self._etag}&timeout_sec={WAIT_SECONDS}"
            timeout += WAIT_SECONDS
        reply = self._get(path, timeout)
        self._etag = reply.headers.get("etag", "")
        return reply.body

    def _get(self, path: str, timeout: float | None = None) -> Reply:
        reply = request(self.base, path, headers=HEADERS, timeout=timeout or self.timeout)
        if reply.status != 200:
            if reply.status == 503:  # during maintenance itself (Google's sample retries)
                raise MetadataError(Error.HTTP, f"{path}: HTTP 503, the server is busy")
            raise unexpected(reply, path)
        return reply

    def approve(self, notice: Notice) -> None:
        """Compute Engine takes no approval from the VM."""
