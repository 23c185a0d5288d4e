"""systemd's manager over D-Bus: why the agent is being stopped, and two other questions.

SIGTERM arrives without a warning from logind when a shutdown bypassed logind, on
``systemctl stop``, and on a package upgrade's restart: :func:`why_stopping` reads systemd's
queued jobs and says which of those it is (logind's warning comes through
nodeagent/host/logind.py). :func:`userspace_started` says when this boot's userspace began,
and :func:`reload_logind` makes logind re-read its drop-ins.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.host.dbus import START_TIMEOUT, STOP_PATH_TIMEOUT, Bus, describe
from nodeagent.types import Reason

SYSTEMD_NAME = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
SYSTEMD_IFACE = "org.freedesktop.systemd1.Manager"

# Units whose start job names the kind of shutdown. A request through logind or systemctl
# queues the target; the service is what `systemctl --force poweroff`-style paths reach.
_SHUTDOWN_UNITS: dict[str, Reason] = {
    "poweroff.target": Reason.POWEROFF,
    "systemd-poweroff.service": Reason.POWEROFF,
    "halt.target": Reason.HALT,
    "systemd-halt.service": Reason.HALT,
    "reboot.target": Reason.REBOOT,
    "systemd-reboot.service": Reason.REBOOT,
    "kexec.target": Reason.KEXEC,
    "systemd-kexec.service": Reason.KEXEC,
    "soft-reboot.target": Reason.SOFT_REBOOT,
    "systemd-soft-reboot.service": Reason.SOFT_REBOOT,
}

# Units every shutdown starts but which do not say which kind. Power-off is the assumption
# that drains: the node is going away and may not come back.
_GENERIC_SHUTDOWN_UNITS = frozenset(
    {"shutdown.target", "final.target", "umount.target", "exit.target", "systemd-exit.service"}
)

# The package's prerm creates this before it stops the unit on removal: Debian's convention
# reaches the agent as a plain `systemctl stop`, which alone would mean maintenance (drain).
# It lives in the unit's RuntimeDirectory, which systemd deletes when the unit stops, so it
# cannot outlive the stop it was made for.
REMOVAL_FLAG = "/run/nodeagent/removing"

# Job types that bring our unit back after stopping it (systemd collapses the requested
# reload-or-restart/try-restart into these when queueing).
_RESTART_JOBS = frozenset({"restart", "try-restart"})


def classify_jobs(jobs: Iterable[tuple[str, str]], unit: str, *, removing: bool = False) -> Reason:
    """Say why ``unit`` is being stopped, from systemd's queued ``(unit, job_type)`` pairs.

    A shutdown target's start job wins over anything about our own unit, because a shutdown
    also queues a stop of every unit. Then a restart of ``unit`` (an upgrade: no drain),
    then a stop of ``unit``: the package's removal when ``removing`` (the prerm's flag),
    else maintenance. No telling job at all gives ``UNKNOWN``.
    """
    jobs = list(jobs)
    starts = {u for u, t in jobs if t == "start"}
    for shutdown_unit, kind in _SHUTDOWN_UNITS.items():
        if shutdown_unit in starts:
            return kind
    if starts & _GENERIC_SHUTDOWN_UNITS:
        return Reason.POWEROFF
    own = {t for u, t in jobs if u == unit}
    if own & _RESTART_JOBS:
        return Reason.RESTART
    if "stop" in own:
        return Reason.REMOVE if removing else Reason.STOP
    return Reason.UNKNOWN


@dataclass(frozen=True)
class StopEvidence:
    """The answer of :func:`why_stopping`, with the jobs it was read from.

    ``jobs`` reads like ``("start poweroff.target", "stop nodeagent.service")``: the jobs that
    decided (shutdown units and our own unit), or the first few queued when none did. On an
    error it holds one ``"error: ..."`` entry instead. Meant for the log.
    """

    kind: Reason
    jobs: tuple[str, ...]


def why_stopping(
    unit: str = "nodeagent.service",
    bus_address: str | None = None,
    *,
    timeout: float = STOP_PATH_TIMEOUT,
    removal_flag: str = REMOVAL_FLAG,
) -> StopEvidence:
    """Ask systemd's job queue why ``unit`` is being stopped.

    Meant for the SIGTERM handler: it returns within about ``timeout`` seconds and never
    raises; a failure gives ``Reason.UNKNOWN`` with the error in ``jobs``.
    """
    result: list[StopEvidence] = []
    removing = os.path.exists(removal_flag)
    # A daemon thread bounds the whole exchange, including jeepney's connect and auth, which
    # a wedged bus could otherwise stall past systemd's stop timeout.
    worker = threading.Thread(
        target=lambda: result.append(_why_stopping(unit, bus_address, timeout, removing)),
        name="why-stopping",
        daemon=True,
    )
    worker.start()
    worker.join(timeout + 0.5)
    if result:
        return result[0]
    return StopEvidence(Reason.UNKNOWN, (f"error: no answer from systemd in {timeout}s",))


def _why_stopping(
    unit: str, bus_address: str | None, timeout: float, removing: bool
) -> StopEvidence:
    try:
        jobs = _list_jobs(bus_address, timeout)
    except Exception as exc:  # the shutdown path must go on whatever the bus did
        return StopEvidence(Reason.UNKNOWN, (f"error: {describe(exc)}",))
    kind = classify_jobs(jobs, unit, removing=removing)
    return StopEvidence(kind, _evidence(jobs, unit))


def _evidence(jobs: list[tuple[str, str]], unit: str, limit: int = 10) -> tuple[str, ...]:
    """The jobs worth logging: a shutdown queues a stop for every unit, which says nothing."""
    telling = set(_SHUTDOWN_UNITS) | _GENERIC_SHUTDOWN_UNITS | {unit}
    shown = [(u, t) for u, t in jobs if u in telling] or jobs[:limit]
    return tuple(f"{t} {u}" for u, t in shown)


def _list_jobs(bus_address: str | None, timeout: float) -> list[tuple[str, str]]:
    from jeepney import DBusAddress, new_method_call

    manager = DBusAddress(SYSTEMD_PATH, bus_name=SYSTEMD_NAME, interface=SYSTEMD_IFACE)
    deadline = time.monotonic() + timeout
    with Bus.open(bus_address, deadline) as bus:
        (rows,) = bus.call(new_method_call(manager, "ListJobs"), deadline)
    # Each row is (id, unit, job_type, state, job_path, unit_path).
    return [(str(row[1]), str(row[2])) for row in rows]


def userspace_started(bus_address: str | None = None, *, timeout: float = START_TIMEOUT) -> float:
    """When systemd began this boot's userspace (its Manager's ``UserspaceTimestamp``), in
    seconds since the epoch. Readable by anyone. In a container that is the container's
    boot, which the kernel's btime (shared with the host) is not.

    Raises whatever the bus raised, or ValueError if systemd has no such time.
    """
    deadline = time.monotonic() + timeout
    with Bus.open(bus_address, deadline) as bus:
        usec = bus.get_property(
            SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_IFACE, "UserspaceTimestamp", deadline
        )
    if not usec:
        raise ValueError("systemd reports no UserspaceTimestamp")
    return int(usec) / 1e6


def reload_logind(bus_address: str | None = None, *, timeout: float = START_TIMEOUT) -> None:
    """Make logind re-read its drop-ins: SIGHUP to its main process through systemd, as
    the kubelet does after writing 99-kubelet.conf (Debian 12's unit has no reload)."""
    from jeepney import DBusAddress, new_method_call

    manager = DBusAddress(SYSTEMD_PATH, bus_name=SYSTEMD_NAME, interface=SYSTEMD_IFACE)
    msg = new_method_call(
        manager, "KillUnit", "ssi", ("systemd-logind.service", "main", signal.SIGHUP)
    )
    deadline = time.monotonic() + timeout
    with Bus.open(bus_address, deadline) as bus:
        bus.call(msg, deadline)
