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
import threading
import time
from typing import Any

from nodeagent.cloud.http import Error, MetadataError, Reply, request, unexpected
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
# The scheduled-event codes, all of which take the instance down or away for a while.
SCHEDULED_CODES = {
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
}
GONE_STATES = {"canceled", "completed"}
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


def scheduled_notices(body: str, now: float) -> list[Notice]:
    """The active scheduled events (canceled and completed ones are gone)."""
    doc = _json(body, SCHEDULED)
    if not isinstance(doc, list):
        raise MetadataError(Error.MALFORMED, f"{SCHEDULED}: not a list: {body[:80]!r}")
    notices = []
    for event in doc:
        try:
            state = str(event.get("State", "active")).lower()
            code = event["Code"]
            event_id = event["EventId"]
            not_before = event_time(event["NotBefore"])
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise MetadataError(Error.MALFORMED, f"{SCHEDULED}: {exc!r} in {event!r}") from None
        if state in GONE_STATES or code not in SCHEDULED_CODES:
            continue
        kind = WarningKind.MAINTENANCE
        notices.append(Notice(Cloud.AWS, kind, str(event_id), str(code), not_before, now))
    return notices


def asg_notice(text: str, since: float) -> Notice | None:
    """The Auto Scaling group's target state: only `Terminated` is a departure."""
    if text.strip() != "Terminated":
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
    """Reads the four items, with an IMDSv2 session token."""

    interval = 2.0  # aws-node-termination-handler polls every 2 s; AWS suggests 5 s
    timeout = 2.0

    def __init__(self, base: str = "") -> None:
        self.base = (base or BASE).rstrip("/")
        self._token = ""
        self._token_until = 0.0
        self._lock = threading.Lock()
        self._first_seen: dict[str, float] = {}
        self._slow: list[Notice] = []
        self._slow_at = 0.0

    def read(self, now: float) -> list[Notice]:
        """The Spot notice at every read (two minutes is all it gives); the others, which
        come minutes to days ahead, every SLOW_EVERY seconds."""
        notices: list[Notice] = []
        spot = self._get(SPOT)
        if spot is not None:
            notices.append(spot_notice(spot))
        if time.monotonic() >= self._slow_at:
            self._slow = self._read_slow(now)
            self._slow_at = time.monotonic() + SLOW_EVERY
        return [self._since(n, now) for n in notices + self._slow]

    def _read_slow(self, now: float) -> list[Notice]:
        notices: list[Notice] = []
        rebalance = self._get(REBALANCE)
        if rebalance is not None:
            notices.append(rebalance_notice(rebalance))
        scheduled = self._get(SCHEDULED)
        if scheduled is not None:
            notices += scheduled_notices(scheduled, now)
        asg = self._get(ASG)
        if asg is not None:
            notice = asg_notice(asg, self._first_seen.setdefault(ASG, now))
            notices += [notice] if notice else []
        return notices

    def _since(self, notice: Notice, now: float) -> Notice:
        """A notice keeps the time first read: a scheduled event's first sighting (the
        endpoint says nothing), a rebalance recommendation's first notice time."""
        if notice.kind is WarningKind.MAINTENANCE:
            since = self._first_seen.setdefault(notice.event_id, now)
        elif notice.kind is WarningKind.REBALANCE:
            since = self._first_seen.setdefault(notice.event_id, notice.since)
        else:
            return notice
        return dataclasses.replace(notice, since=since)

    def _get(self, path: str) -> str | None:
        """The item's text, None for 404; one more try with a new token on a 401."""
        reply = self._read(path, self._session_token())
        if reply.status == 401:
            self._forget_token()
            reply = self._read(path, self._session_token())
            if reply.status == 401:
                raise MetadataError(Error.TOKEN, f"{path}: HTTP 401; {HOP_LIMIT_HINT}")
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
