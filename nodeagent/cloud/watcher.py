"""The loop that reads the cloud's early warnings and hands them on.

Which cloud: the ``[warnings] cloud`` setting, or with ``auto`` the node's DMI strings
(nodeagent/cloud/detect.py); off a cloud the loop logs one line and ends. On one, it reads
the cloud's metadata endpoint at its cadence and hands what stands to `heard` (the
departure worker's `warned`).

A reading is all or nothing per item (nodeagent/cloud/reading.py). An item that cannot
be believed (no whole answer within its request's deadline, an error status, a body
outside the contract, a time far from the node's clock) keeps its last believed state,
whether a warning stood or nothing did: a flaky endpoint neither drains a node nor undoes
a drain. Its doubt is logged and counted (`nodeagent_cloud_metadata_errors_total`) once
per streak of doubts of one kind of that item; a believed reading of it ends the streak.
Nothing is handed on until every item was believed once: an item not yet read is not
"nothing", and a restarted agent must not undo a warning's drain on a first bad reading. The time of
the last reading in which every item was believed is
`nodeagent_cloud_metadata_last_reading_timestamp_seconds` (the loop's start until the
first), which the chart's NodeAgentCloudWarningsUnread alert watches.

The cadence, per cloud and item, and why (every request is whole within its deadline,
nodeagent/cloud/http.py, so a reading never takes longer than its requests' deadlines):

- AWS, the Spot notice: 2 s after the last reading ended, whatever its answer. It gives
  two minutes, so a few seconds matter (aws-node-termination-handler reads every 2 s; AWS
  suggests 5 s). A request's deadline is 2 s: while the endpoint does not answer (or
  trickles), readings start 4 s apart.
- AWS, scheduled events, the rebalance recommendation, the Auto Scaling target state:
  every 10 s, read together with the Spot notice when due (at once, so the reading still
  takes one deadline at most); one not believed is read again at the next reading. They
  come minutes to days ahead (scheduled events days, a rebalance recommendation typically
  10 to 20 minutes before an interruption, an Auto Scaling termination held by its
  lifecycle hook), and reading them every 2 s cost 1.6 s of CPU an hour per agent
  against 0.6 s.
  The IMDSv2 token is fetched once per reading when it is due (an hour's token, renewed
  a minute before it ends); where none comes (a hop limit of 1) the reads go tokenless,
  each reading then taking the PUT's 2 s deadline too.
- Azure, the scheduled events document: every 1 s after the last reading ended, as Azure
  recommends (Preempt gives 30 s); 2 s apart while no answer is believed. A request's
  deadline is 30 s until the service's first answer (it starts on the VM's first call and
  may take minutes), 5 s after.
- GCP, maintenance-event: a long poll that answers at once on a change and otherwise
  after 5 s (deadline 7 s); preempted is read (deadline 2 s) after each poll, so at least
  every 5 s (Spot preemption gives 30 s). While neither is believed, readings are 2 s
  apart (a refused connection would otherwise spin).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from nodeagent import metrics
from nodeagent.cloud import detect
from nodeagent.cloud.http import Error, MetadataError
from nodeagent.config import WarningsConfig
from nodeagent.context import Context
from nodeagent.fence.warning import implausible
from nodeagent.types import Cloud, Notice

if TYPE_CHECKING:
    from nodeagent.cloud.reading import Item

log = logging.getLogger(__name__)

ERROR_WAIT = 2.0  # seconds between readings in which no item was believed
# The clouds whose loop started reading in this process: a loop restarted after a failure
# must not make its last reading look recent.
_READING: set[Cloud] = set()
# Doubts of these kinds are the endpoint's, not an item's: one line for all the items
# that start doubting with the same one in a reading.
ENDPOINT_ERRORS = (Error.TIMEOUT, Error.UNREACHABLE, Error.TOKEN)


class Source(Protocol):
    interval: float
    items: tuple[str, ...]  # every item a reading may hold (entries of lists aside)

    def read(self, now: float) -> list[Item]: ...
    def approve(self, notice: Notice) -> None: ...


def source_for(cloud: Cloud, base: str) -> Source:
    """The reader of `cloud`'s endpoint. Imported here, on a cloud only: off the clouds the
    agent carries none of them (their HTTP and date modules cost every node 1 MB)."""
    if cloud is Cloud.AWS:
        from nodeagent.cloud.aws import Imds

        return Imds(base)
    if cloud is Cloud.GCP:
        from nodeagent.cloud.gcp import GceMetadata

        return GceMetadata(base)
    from nodeagent.cloud.azure import ScheduledEvents

    return ScheduledEvents(base)


class WarningWatcher:
    """Reads one cloud's warnings for as long as the agent runs."""

    def __init__(
        self,
        cfg: WarningsConfig,
        heard: Callable[[tuple[Notice, ...]], None],
        dmi_root: str = detect.DMI_DIR,
        error_wait: float = ERROR_WAIT,
    ) -> None:
        self.cfg = cfg
        self.heard = heard
        self.dmi_root = dmi_root
        self.error_wait = error_wait
        self.source: Source | None = None

    def cloud(self) -> Cloud:
        if self.cfg.cloud is not Cloud.AUTO:
            return self.cfg.cloud
        return detect.cloud_of(detect.read_dmi(self.dmi_root))

    def run(self, ctx: Context, succeeded: Callable[[], None], beat: Callable[[], None]) -> None:
        """Loop body: read until `ctx` is cancelled; return at once off the clouds."""
        cloud = self.cloud()
        if cloud is Cloud.OFF:
            how = "set off" if self.cfg.cloud is Cloud.OFF else "no cloud in the node's DMI"
            log.info("cloud warnings: off (%s)", how)
            self.heard(())  # nothing will come: a warning's old fence may go
            return
        from nodeagent.cloud.reading import Standing

        self.source = source = source_for(cloud, self.cfg.metadata_url)
        log.info("cloud warnings: reading %s's metadata endpoint", cloud)
        last_reading = metrics.CLOUD_LAST_READING.labels(cloud)
        if cloud not in _READING:  # readings are due from now on (not from a restart)
            _READING.add(cloud)
            last_reading.set_to_current_time()
        standing = Standing(source.items)
        while not ctx.cancelled:
            now = time.time()
            reading = [self._judged(item, now) for item in source.read(now)]
            started, ended = standing.take(reading)
            self._say(cloud, started, ended)
            if standing.known():
                self.heard(standing.notices())
            if all(item.believed for item in reading):
                last_reading.set_to_current_time()
                succeeded()
            else:
                beat()
            believed = any(item.believed for item in reading)
            wait = source.interval if believed else max(self.error_wait, source.interval)
            if wait:
                ctx.wait(wait)

    @staticmethod
    def _judged(item: Item, now: float) -> Item:
        """`item`, or a doubt of it where a notice's time is far from the node's clock."""
        from nodeagent.cloud.reading import doubted

        for notice in item.notices:
            why = implausible(notice, now)
            if why:
                return doubted(
                    item, MetadataError(Error.IMPLAUSIBLE, f"{notice.describe()}: {why}")
                )
        return item

    @staticmethod
    def _say(cloud: Cloud, started: list[Item], ended: list[str]) -> None:
        """One count per item starting a streak of doubts, one line per doubt (per kind
        for the endpoint's own failures); one line for the items believed again."""
        said: set[Error] = set()
        for item in started:
            assert item.doubt is not None
            metrics.METADATA_ERRORS.labels(cloud, item.doubt.error).inc()
            error = item.doubt.error
            if error in said:
                continue
            keys = [item.key]
            if error in ENDPOINT_ERRORS:
                said.add(error)
                keys = [i.key for i in started if i.doubt is not None and i.doubt.error is error]
            log.warning(
                "cloud warnings: not believed (%s): %s; the last believed reading stands",
                ", ".join(keys),
                item.doubt,
            )
        if ended:
            log.info("cloud warnings: the metadata endpoint answers again (%s)", ", ".join(ended))

    def approve(self, notice: Notice) -> None:
        """The node is drained for `notice`: let the cloud start it now, where it asks."""
        if self.source is not None:
            self.source.approve(notice)
