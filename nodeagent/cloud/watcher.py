"""The loop that reads the cloud's early warnings and hands them on.

Which cloud: the ``[warnings] cloud`` setting, or with ``auto`` the node's DMI strings
(nodeagent/cloud/detect.py); off a cloud the loop logs one line and ends. On one, it reads
the cloud's metadata endpoint at its cadence and hands every reading to `heard` (the
departure worker's `warned`). An answer that cannot be believed (no answer, an error
status, a body outside the contract, a time far from the node's clock) is logged once per
streak and counted (`nodeagent_cloud_metadata_errors_total`), and changes nothing: the
last reading stands, so a flaky endpoint neither drains a node nor undoes a drain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from nodeagent import metrics
from nodeagent.cloud import detect
from nodeagent.cloud.http import Error, MetadataError
from nodeagent.config import WarningsConfig
from nodeagent.context import Context
from nodeagent.fence.warning import implausible
from nodeagent.types import Cloud, Notice

log = logging.getLogger(__name__)

ERROR_WAIT = 5.0  # seconds between reads while the endpoint fails


class Source(Protocol):
    interval: float

    def read(self, now: float) -> list[Notice]: ...
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
        self._doubted: set[str] = set()  # notices already logged as not believed

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
        self.source = source = source_for(cloud, self.cfg.metadata_url)
        log.info("cloud warnings: reading %s's metadata endpoint", cloud)
        failing = ""
        while not ctx.cancelled:
            try:
                notices = self._believed(cloud, source.read(time.time()))
            except MetadataError as exc:
                metrics.METADATA_ERRORS.labels(cloud, exc.error).inc()
                if str(exc) != failing:
                    log.warning("cloud warnings: %s; the last reading stands", exc)
                failing = str(exc)
                beat()
                ctx.wait(max(self.error_wait, source.interval))
                continue
            if failing:
                log.info("cloud warnings: the metadata endpoint answers again")
                failing = ""
            self.heard(tuple(notices))
            succeeded()
            if source.interval:
                ctx.wait(source.interval)

    def _believed(self, cloud: Cloud, notices: list[Notice]) -> list[Notice]:
        now = time.time()
        kept = []
        for notice in notices:
            why = implausible(notice, now)
            if not why:
                kept.append(notice)
                continue
            if notice.event_id not in self._doubted:
                self._doubted.add(notice.event_id)
                metrics.METADATA_ERRORS.labels(cloud, Error.IMPLAUSIBLE).inc()
                log.warning("cloud warnings: not acting on %s: %s", notice.describe(), why)
        return kept

    def approve(self, notice: Notice) -> None:
        """The node is drained for `notice`: let the cloud start it now, where it asks."""
        if self.source is not None:
            self.source.approve(notice)
