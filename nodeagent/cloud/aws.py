"""AWS: the early warnings EC2's instance metadata service (IMDS) shows the instance.

Four items, each 404 while there is nothing to say (AWS EC2 User Guide:
spot-instance-termination-notices, rebalance-recommendations,
monitoring-instances-status-check_sched; EC2 Auto Scaling User Guide:
retrieving-target-lifecycle-state-through-imds):

- ``spot/instance-action``: ``{"action": "terminate|stop|hibernate", "time": RFC 3339}``,
  about two minutes ahead;
- ``events/recommendations/rebalance``: ``{"noticeTime": RFC 3339}``, a raised risk;
- ``events/maintenance/scheduled``: a list of ``{"Code", "EventId", "NotBefore",
  "NotAfter", "State"}``, dates as ``21 Jan 2019 09:00:43 GMT``; canceled and completed
  events stay listed with that State, and count as gone;
- ``autoscaling/target-lifecycle-state``: plain text, ``Terminated`` once the Auto
  Scaling group is taking the instance out.

IMDSv2: every read carries a session token from ``PUT /latest/api/token``, renewed
before it expires and once more on a 401. Where the PUT gets no answer (a pod on the pod
network behind the default hop limit of 1) the reads are tried without a token, as IMDSv1
allows; a 401 then says why in one line.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from nodeagent.cloud.http import Error, MetadataError, Reply, request, unexpected
from nodeagent.cloud.reading import Item, dated, entry_key, read_item
from nodeagent.types import Cloud, Notice, WarningKind

BASE = "http://169.254.169.254"
TOKEN_PATH = "/latest/api/token"
TOKEN_TTL = 3600  # seconds asked for; renewed with RENEW_BEFORE left
RENEW_BEFORE = 60.0
SPOT = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
SCHEDULED = "/latest/meta-data/events/maintenance/scheduled"
ASG = "/latest/meta-data/autoscaling/target-lifecycle-state"
# The items that come minutes to days ahead are read this often (the Spot notice, two
# minutes ahead, at every read): 0.6 s of CPU an hour per agent instead of 1.6 s.
SLOW_EVERY = 10.0
SLOW = (REBALANCE, SCHEDULED, ASG)
KEYS = {SPOT: "spot", REBALANCE: "rebalance", SCHEDULED: "scheduled", ASG: "asg"}
# The scheduled-event codes, all of which take the instance down or away for a while.
SCHEDULED_CODES = {
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
}
GONE_STATES = {"canceled", "completed"}
ASG_STATE = re.compile(r"[A-Za-z]+(:[A-Za-z]+)*")  # InService, Warmed:Terminated, ...
HOP_LIMIT_HINT = (
    "IMDSv2 needs a session token and none came: in a pod, run on the host network or "
    "raise the instance's metadata hop limit to 2"
)


def rfc3339(text: Any) -> float:
    """'2026-11-26T08:00:00Z' -> epoch seconds. Raises ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"not a time: {text!r}")
    return float(calendar.timegm(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%SZ")))


def event_time(text: Any) -> float:
    """A scheduled event's '21 Jan 2019 09:00:43 GMT' -> epoch seconds."""
    if not isinstance(text, str):
        raise ValueError(f"not a time: {text!r}")
    return float(calendar.timegm(time.strptime(text.strip(), "%d %b %Y %H:%M:%S GMT")))


def _json(body: str, path: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise MetadataError(Error.MALFORMED, f"{path}: not JSON: {body[:60]!r}") from None


def spot_notice(body: str) -> Notice:
    """The Spot interruption notice. Its ID is its action: the time in it may move
    between reads, the notice stays one."""
    doc = _json(body, SPOT)
    try:
        action = doc["action"]
        deadline = rfc3339(doc["time"])
    except (KeyError, TypeError, ValueError) as exc:
        raise MetadataError(Error.MALFORMED, f"{SPOT}: {exc!r} in {body[:80]!r}") from None
    if action not in ("terminate", "stop", "hibernate"):
        raise MetadataError(Error.MALFORMED, f"{SPOT}: unknown action {action!r}")
    return Notice(
        Cloud.AWS,
        WarningKind.INTERRUPTION,
        f"spot-itn-{action}",
        f"Spot interruption: {action}",
        deadline,
        deadline - 120.0,
    )


def rebalance_notice(body: str) -> Notice:
    doc = _json(body, REBALANCE)
    try:
        since = rfc3339(doc["noticeTime"])
    except (KeyError, TypeError, ValueError) as exc:
        raise MetadataError(Error.MALFORMED, f"{REBALANCE}: {exc!r} in {body[:80]!r}") from None
    # One per instance: its ID is its kind, and its time the first one read (a mock's
    # notice time may move with every read).
    return Notice(
        Cloud.AWS, WarningKind.REBALANCE, "rebalance", "rebalance recommendation", None, since
    )


def scheduled_items(body: str, now: float) -> list[Item]:
    """The list of scheduled events as items: the list, then each event it names (one
    canceled or completed, or of a code that takes nothing down, stands for nothing).
    Raises MetadataError for a list that cannot be read as one, or an entry without its
    EventId: then no event can be told apart."""
    doc = _json(body, SCHEDULED)
    if not isinstance(doc, list):
        raise MetadataError(Error.MALFORMED, f"{SCHEDULED}: not a list: {body[:80]!r}")
    try:
        ids = [str(event["EventId"]) for event in doc]
    except (KeyError, TypeError) as exc:
        raise MetadataError(Error.MALFORMED, f"{SCHEDULED}: {exc!r} in {body[:80]!r}") from None
    entries = [
        read_item(entry_key("scheduled", event_id), partial(_scheduled, event, now))
        for event_id, event in zip(ids, doc, strict=True)
    ]
    return [Item("scheduled", entries=tuple(e.key for e in entries)), *entries]


def _scheduled(event: dict[str, Any], now: float) -> list[Notice]:
    try:
        state = str(event.get("State", "active")).lower()
        code = event["Code"]
        not_before = event_time(event["NotBefore"])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise MetadataError(Error.MALFORMED, f"{SCHEDULED}: {exc!r} in {event!r}") from None
    if state in GONE_STATES or code not in SCHEDULED_CODES:
        return []
    kind = WarningKind.MAINTENANCE
    return [Notice(Cloud.AWS, kind, str(event["EventId"]), str(code), not_before, now)]


def scheduled_notices(body: str, now: float) -> list[Notice]:
    """The active scheduled events; raises MetadataError for any event not believed."""
    notices: list[Notice] = []
    for item in scheduled_items(body, now):
        if item.doubt is not None:
            raise item.doubt
        notices += item.notices
    return notices


def asg_notice(text: str, since: float) -> Notice | None:
    """The Auto Scaling group's target state: only `Terminated` is a departure. Anything
    but a state's name (InService, Warmed:Stopped, ...) is outside the contract: a page
    of a proxy read as "not Terminated" would end the warning."""
    state = text.strip()
    if not ASG_STATE.fullmatch(state):
        raise MetadataError(Error.MALFORMED, f"{ASG}: not a lifecycle state: {state[:60]!r}")
    if state != "Terminated":
        return None
    return Notice(
        Cloud.AWS,
        WarningKind.TERMINATION,
        "asg-terminated",
        "Auto Scaling target lifecycle state Terminated",
        None,
        since,
    )


class Imds:
    """Reads the four items, each at its own cadence, with an IMDSv2 session token."""

    interval = 2.0  # between readings: the Spot notice's cadence
    timeout = 2.0  # one request, whole (nodeagent/cloud/http.py)
    items: tuple[str, ...] = tuple(KEYS.values())

    def __init__(self, base: str = "") -> None:
        self.base = (base or BASE).rstrip("/")
        self._token = ""
        self._token_until = 0.0
        self._lock = threading.Lock()
        self._first_seen: dict[str, float] = {}
        self._due = dict.fromkeys(SLOW, 0.0)  # monotonic time each slow item is read next

    def read(self, now: float) -> list[Item]:
        """The items due: the Spot notice at every reading (two minutes is all it gives),
        the others every SLOW_EVERY seconds, and an item not believed again at the next
        reading (its last believed state stands meanwhile). Items due together are read
        at once, so a reading takes one request's deadline, not one per item."""
        token = self._session_token()
        slow = [path for path in SLOW if time.monotonic() >= self._due[path]]
        if not slow:
            return self._item(SPOT, token, now)
        with ThreadPoolExecutor(1 + len(slow), thread_name_prefix="imds") as pool:
            reads = list(pool.map(lambda path: self._item(path, token, now), [SPOT, *slow]))
        for path, read in zip(slow, reads[1:], strict=True):
            again = SLOW_EVERY if read[0].believed else self.interval
            self._due[path] = time.monotonic() + again
        return [item for read in reads for item in read]

    def _item(self, path: str, token: str, now: float) -> list[Item]:
        """The item at `path` (for the scheduled events: the list, then each event)."""
        key = KEYS[path]
        try:
            body = self._get(path, token)
            if path != SCHEDULED:
                return [Item(key, tuple(self._notices(path, body, now)))]
            if body is None:
                return [Item(key, entries=())]
            return [dated(item, self._first_seen, now) for item in scheduled_items(body, now)]
        except MetadataError as exc:
            return [Item(key, doubt=exc)]

    def _notices(self, path: str, body: str | None, now: float) -> list[Notice]:
        """A plain item's notices. A notice keeps the time it was first read (the ASG
        state's first sighting, a rebalance recommendation's first notice time) while
        it lasts; one read gone, a later one is new."""
        key = KEYS[path]
        notice = None
        if body is not None and path == SPOT:
            notice = spot_notice(body)
        elif body is not None and path == REBALANCE:
            notice = rebalance_notice(body)
            since = self._first_seen.setdefault(key, notice.since)
            notice = dataclasses.replace(notice, since=since)
        elif body is not None and path == ASG:
            notice = asg_notice(body, self._first_seen.get(key, now))
        if notice is None:
            self._first_seen.pop(key, None)
            return []
        self._first_seen.setdefault(key, notice.since)
        return [notice]

    def _get(self, path: str, token: str) -> str | None:
        """The item's text, None for 404; one more try with a new token on a 401 to a
        token held (it may have expired), none where no token came."""
        reply = self._read(path, token)
        if reply.status == 401 and token:
            self._forget_token()
            token = self._session_token()
            reply = self._read(path, token)
        if reply.status == 401:
            why = "" if token else f"; {HOP_LIMIT_HINT}"
            raise MetadataError(Error.TOKEN, f"{path}: HTTP 401{why}")
        if reply.status == 404:
            return None
        if reply.status != 200:
            raise unexpected(reply, path)
        return reply.body

    def _read(self, path: str, token: str) -> Reply:
        headers = {"X-aws-ec2-metadata-token": token} if token else {}
        return request(self.base, path, headers=headers, timeout=self.timeout)

    def _session_token(self) -> str:
        with self._lock:
            if self._token and time.monotonic() < self._token_until - RENEW_BEFORE:
                return self._token
        try:
            reply = request(
                self.base,
                TOKEN_PATH,
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL)},
                timeout=self.timeout,
            )
        except MetadataError:
            return ""  # no token (the hop limit): the read goes without, as IMDSv1 allows
        if reply.status != 200 or not reply.body.strip():
            return ""
        with self._lock:
            self._token = reply.body.strip()
            self._token_until = time.monotonic() + TOKEN_TTL
            return self._token

    def _forget_token(self) -> None:
        with self._lock:
            self._token = ""

    def approve(self, notice: Notice) -> None:
        """EC2 takes no approval from the instance (a lifecycle hook needs IAM)."""
