"""Opt-in: a logind drop-in that lets a shutdown wait for the whole drain.

logind waits for delay inhibitors at most `InhibitDelayMaxSec` (5 s by default). A node
image can ship a drop-in (the host form's package does); a DaemonSet cannot change the
image, so with `shutdown.logind_dropin` set the agent writes one on the host at start
and makes logind re-read it, as the kubelet does for its 99-kubelet.conf. logind sorts
drop-ins from every directory by file name and the last one wins, so the name must sort
after the others that set the delay (the chart's default is zz-nodeagent.conf).
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

from nodeagent.host.logind import DelayInhibitor, LogindUnavailableError
from nodeagent.host.systemd_manager import reload_logind

log = logging.getLogger(__name__)

LOGIND_MARGIN = 5.0  # seconds kept back from logind's delay for releasing the inhibitor
# After its deadline a shutdown drain gets this long to delete what is left and record
# the result: inside LOGIND_MARGIN, and inside TimeoutStopSec (150 s) after 120 s.
FINISH_GRACE = 3.0
RELOAD_WAIT = 5.0  # logind handles SIGHUP on its event loop, shortly after


def required_delay(deadline: float) -> int:
    """The delay that lets a drain use its whole deadline (nodeagent/departure/lockholder.py)."""
    return math.ceil(deadline + LOGIND_MARGIN + FINISH_GRACE)


def dropin_text(deadline: float) -> str:
    return (
        "# Written by nodeagent (shutdown.logind_dropin): logind waits this long for the\n"
        f"# node's drain at shutdown (drain deadline {deadline:.0f}s plus margins).\n"
        f"[Login]\nInhibitDelayMaxSec={required_delay(deadline)}\n"
    )


def ensure_dropin(path: str, deadline: float, bus_address: str | None = None) -> bool:
    """Write the drop-in if it differs and make logind apply it; True if it changed.

    Raises OSError (cannot write) or LogindUnavailableError (cannot reload).
    """
    target = Path(path)
    text = dropin_text(deadline)
    try:
        if target.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(target)
    try:
        reload_logind(bus_address)
    except Exception as exc:
        raise LogindUnavailableError(f"wrote {path} but could not reload logind: {exc}") from exc
    _wait_applied(required_delay(deadline), bus_address)
    return True


def _wait_applied(wanted: int, bus_address: str | None) -> None:
    """Until logind shows the new delay, so the agent's own check reads the new value."""
    reader = DelayInhibitor(lambda _active, _kind: None, bus_address=bus_address)
    until = time.monotonic() + RELOAD_WAIT
    seen = 0.0
    while time.monotonic() < until:
        seen = reader.inhibit_delay_max_seconds()
        if seen >= wanted:
            return
        time.sleep(0.2)
    log.warning(
        "logind still shows InhibitDelayMaxSec=%.0f after the reload, not %d: another "
        "drop-in sorts after ours, or logind ignored the signal",
        seen,
        wanted,
    )
