"""Why the agent is stopping, and logind's warning that the node is about to go down.

Two sources tell the agent that the node is shutting down:

* **logind**, before any unit is stopped. :class:`LogindInhibitor` holds a ``delay``
  inhibitor lock, so logind announces the shutdown with ``PrepareForShutdown`` (and, from
  systemd 255, ``PrepareForShutdownWithMetadata`` carrying the shutdown type) and then waits,
  up to ``InhibitDelayMaxSec``, until the lock is released.
* **systemd's job queue**, when SIGTERM arrives without a warning from logind (a shutdown that
  bypassed logind, ``systemctl stop``, a package upgrade's restart). :func:`why_stopping`
  reads the queued jobs and says which of those it is.

Both talk D-Bus through jeepney, imported lazily: this module is loaded on the shutdown path,
where start-up time counts.

Usage::

    inhibitor = LogindInhibitor(on_prepare=lambda active, kind: queue.put((active, kind)))
    inhibitor.start()
    ...
    inhibitor.release()          # drained: let logind proceed
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.fence.reason import Reason

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"

LOGIND_NAME = "org.freedesktop.login1"
LOGIND_PATH = "/org/freedesktop/login1"
LOGIND_IFACE = "org.freedesktop.login1.Manager"
SYSTEMD_NAME = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
SYSTEMD_IFACE = "org.freedesktop.systemd1.Manager"

# Calls made while starting may bus-activate logind, which can take a while on a busy boot.
START_TIMEOUT = 10.0
# why_stopping() runs inside systemd's stop timeout; it must answer fast or not at all.
JOBS_TIMEOUT = 2.0


_LOGIND_TYPES: dict[str, Reason] = {
    "poweroff": Reason.POWEROFF,
    "power-off": Reason.POWEROFF,
    "reboot": Reason.REBOOT,
    "halt": Reason.HALT,
    "kexec": Reason.KEXEC,
    "soft-reboot": Reason.SOFT_REBOOT,
}

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


def kind_from_logind_type(t: str) -> Reason:
    """Map the ``type`` of ``PrepareForShutdownWithMetadata`` to a :class:`Reason`.

    Unknown types (a newer logind's) give :attr:`Reason.UNKNOWN`.
    """
    return _LOGIND_TYPES.get(t.strip().lower(), Reason.UNKNOWN)


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


def system_bus_address() -> str | None:
    """Return ``$DBUS_SYSTEM_BUS_ADDRESS`` if set (tests, containers), else ``None``."""
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or None


def why_stopping(
    unit: str = "nodeagent.service",
    bus_address: str | None = None,
    *,
    timeout: float = JOBS_TIMEOUT,
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
        return StopEvidence(Reason.UNKNOWN, (f"error: {_describe(exc)}",))
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
    with _Bus.open(bus_address, deadline) as bus:
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
    with _Bus.open(bus_address, deadline) as bus:
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
    with _Bus.open(bus_address, deadline) as bus:
        bus.call(msg, deadline)


def preparing_for_shutdown(
    bus_address: str | None = None, *, timeout: float = JOBS_TIMEOUT
) -> bool:
    """logind's ``PreparingForShutdown``: a shutdown is under way (readable by anyone).

    For a SIGTERM that may come from inside that shutdown; like :func:`why_stopping` it
    returns within about ``timeout`` seconds and never raises (False when unknown).
    """
    result: list[bool] = []

    def ask() -> None:
        deadline = time.monotonic() + timeout
        try:
            with _Bus.open(bus_address, deadline) as bus:
                value = bus.get_property(
                    LOGIND_NAME, LOGIND_PATH, LOGIND_IFACE, "PreparingForShutdown", deadline
                )
            result.append(bool(value))
        except Exception as exc:  # the stop path must go on whatever the bus did
            log.warning("cannot ask logind whether a shutdown is under way: %s", _describe(exc))

    worker = threading.Thread(target=ask, name="preparing-for-shutdown", daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return bool(result and result[0])


@dataclass(frozen=True)
class Inhibitor:
    """One row of logind's ``ListInhibitors``: who holds which lock, and how."""

    what: str  # colon-separated: "shutdown", "shutdown:sleep", ...
    who: str
    why: str
    mode: str  # "block" | "delay"
    uid: int
    pid: int

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> Inhibitor:
        what, who, why, mode, uid, pid = row
        return cls(str(what), str(who), str(why), str(mode), int(uid), int(pid))

    def delays_shutdown(self) -> bool:
        return self.mode == "delay" and "shutdown" in self.what.split(":")


class LogindUnavailableError(RuntimeError):
    """logind (or the system bus) could not be reached, or refused the inhibitor lock."""


class LogindInhibitor:
    """Holds a logind ``delay`` inhibitor lock for shutdown and reports PrepareForShutdown.

    ``on_prepare(active, kind)`` runs on the inhibitor's own thread: ``active=True`` when a
    shutdown begins (logind now waits for :meth:`release`), ``active=False`` when it was
    cancelled (call :meth:`retake` to be warned of the next one). Each change of ``active``
    is reported once, with the type from ``PrepareForShutdownWithMetadata`` where logind sends
    it. Keep the callback short: hand the work to another thread.

    ``on_lost(error)``, if given, runs when the bus connection breaks. The lock is released
    then, because a lock whose owner can no longer hear logind only delays the shutdown.
    """

    def __init__(
        self,
        on_prepare: Callable[[bool, Reason], None],
        who: str = "nodeagent",
        why: str = "Draining the node before shutdown",
        bus_address: str | None = None,
        *,
        on_lost: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._on_prepare = on_prepare
        self._on_lost = on_lost
        self._who = who
        self._why = why
        self._bus_address = bus_address
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._active = False
        self._closing = False
        self._conn: _Bus | None = None
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        """Whether the agent holds its delay lock now."""
        return self._fd is not None

    def start(self) -> None:
        """Listen for PrepareForShutdown, take the delay lock and start the listener thread.

        Raises :class:`LogindUnavailableError` if the bus or logind cannot be reached.
        """
        if self._conn is not None:
            raise RuntimeError("LogindInhibitor.start() called twice")
        deadline = time.monotonic() + START_TIMEOUT
        try:
            conn = _Bus.open(self._bus_address, deadline)
        except Exception as exc:
            raise LogindUnavailableError(
                f"cannot connect to the system bus at {_address(self._bus_address)}: "
                f"{_describe(exc)}"
            ) from exc
        try:
            pending = self._subscribe(conn, deadline)
            self.retake()
            pending += self._already_preparing(conn, deadline, pending)
        except BaseException as exc:
            conn.close()
            self.release()
            if isinstance(exc, Exception) and not isinstance(exc, LogindUnavailableError):
                raise LogindUnavailableError(
                    f"cannot listen to logind on {_address(self._bus_address)}: {_describe(exc)}"
                ) from exc
            raise
        self._closing = False
        self._conn = conn
        self._thread = threading.Thread(
            target=self._listen, args=(conn, pending), name="logind-inhibitor", daemon=True
        )
        self._thread.start()

    def release(self) -> None:
        """Close the lock's file descriptor, so logind goes on with the shutdown."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            log.info("released the logind delay lock")

    def retake(self) -> None:
        """Take the delay lock again (after a cancelled shutdown); a no-op while held.

        Raises :class:`LogindUnavailableError` if logind refuses or cannot be reached.
        """
        if self.held:
            return
        fd = self._inhibit()
        with self._lock:
            kept = self._fd is None
            if kept:
                self._fd = fd
        if not kept:  # another thread won the race; keep just one lock
            os.close(fd)
        log.info("holding a logind delay lock for shutdown")

    def inhibit_delay_max_seconds(self) -> float:
        """Return logind's ``InhibitDelayMaxUSec`` in seconds: how long it waits for us.

        Raises :class:`LogindUnavailableError` if logind cannot be asked.
        """
        deadline = time.monotonic() + START_TIMEOUT
        try:
            with _Bus.open(self._bus_address, deadline) as bus:
                usec = bus.get_property(
                    LOGIND_NAME, LOGIND_PATH, LOGIND_IFACE, "InhibitDelayMaxUSec", deadline
                )
        except Exception as exc:
            raise LogindUnavailableError(
                f"cannot read InhibitDelayMaxUSec from logind: {_describe(exc)}"
            ) from exc
        return int(usec) / 1e6

    def inhibitors(self) -> list[Inhibitor]:
        """Return every inhibitor lock logind holds now (``ListInhibitors``).

        Raises :class:`LogindUnavailableError` if logind cannot be asked.
        """
        from jeepney import DBusAddress, new_method_call

        manager = DBusAddress(LOGIND_PATH, bus_name=LOGIND_NAME, interface=LOGIND_IFACE)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            with _Bus.open(self._bus_address, deadline) as bus:
                (rows,) = bus.call(new_method_call(manager, "ListInhibitors"), deadline)
        except Exception as exc:
            raise LogindUnavailableError(
                f"cannot list logind's inhibitors: {_describe(exc)}"
            ) from exc
        return [Inhibitor.of(tuple(row)) for row in rows]

    def close(self) -> None:
        """Stop the listener thread, close the connection and release the lock."""
        self._closing = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.interrupt()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if conn is not None:
            conn.close()
        self.release()

    def __enter__(self) -> LogindInhibitor:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _subscribe(self, conn: _Bus, deadline: float) -> list[tuple[bool, Reason]]:
        """Add the match rules; return events that arrived while doing so."""
        from jeepney import MatchRule, message_bus

        stash: list[Any] = []
        for member in ("PrepareForShutdownWithMetadata", "PrepareForShutdown"):
            rule = MatchRule(
                type="signal",
                sender=LOGIND_NAME,
                path=LOGIND_PATH,
                interface=LOGIND_IFACE,
                member=member,
            )
            conn.call(message_bus.AddMatch(rule), deadline, stash=stash)
        return [event for event in map(_prepare_event, stash) if event is not None]

    def _already_preparing(
        self, conn: _Bus, deadline: float, pending: list[tuple[bool, Reason]]
    ) -> list[tuple[bool, Reason]]:
        """Catch a shutdown that began before we listened (say, the agent restarted in it).

        Asked on the listening connection, so a signal sent before the answer is seen first.
        """
        stash: list[Any] = []
        preparing = conn.get_property(
            LOGIND_NAME, LOGIND_PATH, LOGIND_IFACE, "PreparingForShutdown", deadline, stash=stash
        )
        events = [event for event in map(_prepare_event, stash) if event is not None]
        if preparing and not pending and not events:
            events.append((True, Reason.UNKNOWN))
        return events

    def _inhibit(self) -> int:
        from jeepney import DBusAddress, new_method_call

        manager = DBusAddress(LOGIND_PATH, bus_name=LOGIND_NAME, interface=LOGIND_IFACE)
        msg = new_method_call(
            manager, "Inhibit", "ssss", ("shutdown", self._who, self._why, "delay")
        )
        deadline = time.monotonic() + START_TIMEOUT
        try:
            with _Bus.open(self._bus_address, deadline, fds=True) as bus:
                (fd,) = bus.call(msg, deadline)
        except Exception as exc:
            raise LogindUnavailableError(
                f"logind refused a delay inhibitor lock on {_address(self._bus_address)}: "
                f"{_describe(exc)}"
            ) from exc
        raw = int(fd.to_raw_fd())
        # A child process that inherited the lock would hold up the shutdown after release().
        os.set_inheritable(raw, False)
        return raw

    def _listen(self, conn: _Bus, pending: list[tuple[bool, Reason]]) -> None:
        from jeepney.io.threading import ReceiveStopped

        for active, kind in pending:
            self._deliver(active, kind)
        while True:
            try:
                msg = conn.receive()
            except ReceiveStopped:
                return
            except Exception as exc:
                if not self._closing:
                    self._lost(exc)
                return
            event = _prepare_event(msg)
            if event is not None:
                self._deliver(*event)

    def _deliver(self, active: bool, kind: Reason) -> None:
        # logind sends WithMetadata first, then the plain signal for the same transition:
        # only a change of state is news, so the typed one is reported and its twin dropped.
        with self._lock:
            if active == self._active:
                return
            self._active = active
        log.info("logind: PrepareForShutdown(%s), type %s", active, kind.value)
        try:
            self._on_prepare(active, kind)
        except Exception:
            log.exception("on_prepare callback failed")

    def _lost(self, exc: BaseException) -> None:
        log.error("lost the system bus connection, releasing the delay lock: %s", _describe(exc))
        self.release()
        if self._on_lost is not None:
            try:
                self._on_lost(exc)
            except Exception:
                log.exception("on_lost callback failed")


def _prepare_event(msg: Any) -> tuple[bool, Reason] | None:
    """Turn a PrepareForShutdown(WithMetadata) signal into ``(active, kind)``; else None."""
    from jeepney import HeaderFields, MessageType

    header = msg.header
    if header.message_type is not MessageType.signal:
        return None
    if header.fields.get(HeaderFields.interface) != LOGIND_IFACE:
        return None
    return parse_prepare_signal(header.fields.get(HeaderFields.member, ""), msg.body)


def parse_prepare_signal(member: str, body: tuple[Any, ...]) -> tuple[bool, Reason] | None:
    """Read ``(active, kind)`` from a logind signal's member name and body, if it is one.

    ``PrepareForShutdownWithMetadata`` is ``(b, a{sv})`` with a ``type`` entry;
    ``PrepareForShutdown`` is ``(b)`` and says nothing of the kind.
    """
    if member == "PrepareForShutdown" and len(body) >= 1:
        return bool(body[0]), Reason.UNKNOWN
    if member == "PrepareForShutdownWithMetadata" and len(body) >= 2:
        return bool(body[0]), _metadata_kind(body[1])
    return None


def _metadata_kind(metadata: Mapping[str, Any]) -> Reason:
    variant = metadata.get("type") if isinstance(metadata, Mapping) else None
    # jeepney gives a variant as (signature, value).
    if isinstance(variant, tuple) and len(variant) == 2 and isinstance(variant[1], str):
        return kind_from_logind_type(variant[1])
    return Reason.UNKNOWN


def _address(bus_address: str | None) -> str:
    return bus_address or system_bus_address() or DEFAULT_SYSTEM_BUS


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"


class _Bus:
    """One jeepney connection whose every wait is bounded by a deadline.

    jeepney's own helpers say Hello without a time limit; on the shutdown path nothing may
    wait unbounded, so the handshake and each call here run against an explicit deadline.
    The connection is jeepney's thread-aware one, so :meth:`interrupt` can wake a reader
    blocked in :meth:`receive` from another thread.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @classmethod
    def open(cls, bus_address: str | None, deadline: float, *, fds: bool = False) -> _Bus:
        from jeepney import message_bus
        from jeepney.bus import get_bus
        from jeepney.io.blocking import prep_socket
        from jeepney.io.threading import DBusConnection

        sock = prep_socket(
            get_bus(_address(bus_address)), enable_fds=fds, timeout=_remaining(deadline)
        )
        bus = cls(DBusConnection(sock, enable_fds=fds))
        try:
            (bus._conn.unique_name,) = bus.call(message_bus.Hello(), deadline)
        except BaseException:
            bus.close()
            raise
        return bus

    def call(self, msg: Any, deadline: float, *, stash: list[Any] | None = None) -> tuple[Any, ...]:
        """Send a method call and return the reply's body; other messages go to ``stash``.

        Raises jeepney's ``DBusErrorResponse`` for an error reply, ``TimeoutError`` at the
        deadline.
        """
        from jeepney import HeaderFields
        from jeepney.wrappers import unwrap_msg

        serial = next(self._conn.outgoing_serial)
        self._conn.send(msg, serial=serial)
        while True:
            reply = self._conn.receive(timeout=_remaining(deadline))
            if reply.header.fields.get(HeaderFields.reply_serial) == serial:
                return tuple(unwrap_msg(reply))
            if stash is not None:
                stash.append(reply)

    def get_property(
        self,
        name: str,
        path: str,
        interface: str,
        prop: str,
        deadline: float,
        *,
        stash: list[Any] | None = None,
    ) -> Any:
        from jeepney import DBusAddress, Properties

        address = DBusAddress(path, bus_name=name, interface=interface)
        ((_signature, value),) = self.call(Properties(address).get(prop), deadline, stash=stash)
        return value

    def receive(self) -> Any:
        return self._conn.receive()

    def interrupt(self) -> None:
        self._conn.interrupt()

    def close(self) -> None:
        self._conn.close()
        # jeepney 0.9 leaves open the pipe behind interrupt(); close it, or every short-lived
        # connection leaks two descriptors.
        for name in ("_stop_r", "_stop_w"):
            fd = getattr(self._conn, name, None)
            if isinstance(fd, int):
                setattr(self._conn, name, None)
                os.close(fd)

    def __enter__(self) -> _Bus:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _remaining(deadline: float) -> float:
    # Never zero: jeepney treats a falsy timeout as "wait forever" in one place.
    return max(deadline - time.monotonic(), 0.001)
