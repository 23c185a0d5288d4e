"""logind's warning that the node is about to go down, and the agent's delay inhibitor.

:class:`DelayInhibitor` holds the agent's ``delay`` inhibitor for shutdown, so logind
announces a shutdown with ``PrepareForShutdown`` (and, from systemd 255,
``PrepareForShutdownWithMetadata`` carrying the shutdown type) before any unit is stopped,
then waits, up to ``InhibitDelayMaxSec``, until the agent releases it. logind calls these
inhibitor *locks*; here "the delay inhibitor" is always the agent's own, "the kubelet's
inhibitor" the kubelet's (nodeagent/host/kubeletshutdown.py), and the one-agent-per-node
file is the node claim (nodeagent/host/nodeclaim.py). A SIGTERM without logind's warning
is explained by systemd's job queue instead (nodeagent/host/systemd_manager.py).

Usage::

    inhibitor = DelayInhibitor(on_prepare=lambda active, kind: queue.put((active, kind)))
    inhibitor.start()
    ...
    inhibitor.release()          # drained: let logind proceed
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.host.dbus import START_TIMEOUT, STOP_PATH_TIMEOUT, Bus, address, describe
from nodeagent.types import Milestone, Reason, milestone

log = logging.getLogger(__name__)

LOGIND_NAME = "org.freedesktop.login1"
LOGIND_PATH = "/org/freedesktop/login1"
LOGIND_IFACE = "org.freedesktop.login1.Manager"


_LOGIND_TYPES: dict[str, Reason] = {
    "poweroff": Reason.POWEROFF,
    "power-off": Reason.POWEROFF,
    "reboot": Reason.REBOOT,
    "halt": Reason.HALT,
    "kexec": Reason.KEXEC,
    "soft-reboot": Reason.SOFT_REBOOT,
}


def kind_from_logind_type(t: str) -> Reason:
    """Map the ``type`` of ``PrepareForShutdownWithMetadata`` to a :class:`Reason`.

    Unknown types (a newer logind's) give :attr:`Reason.UNKNOWN`.
    """
    return _LOGIND_TYPES.get(t.strip().lower(), Reason.UNKNOWN)


def preparing_for_shutdown(
    bus_address: str | None = None, *, timeout: float = STOP_PATH_TIMEOUT
) -> bool:
    """logind's ``PreparingForShutdown``: a shutdown is under way (readable by anyone).

    For a SIGTERM that may come from inside that shutdown; like ``why_stopping``
    (nodeagent/host/systemd_manager.py) it returns within about ``timeout`` seconds and
    never raises (False when unknown).
    """
    result: list[bool] = []

    def ask() -> None:
        deadline = time.monotonic() + timeout
        try:
            with Bus.open(bus_address, deadline) as bus:
                value = bus.get_property(
                    LOGIND_NAME, LOGIND_PATH, LOGIND_IFACE, "PreparingForShutdown", deadline
                )
            result.append(bool(value))
        except Exception as exc:  # the stop path must go on whatever the bus did
            log.warning("cannot ask logind whether a shutdown is under way: %s", describe(exc))

    worker = threading.Thread(target=ask, name="preparing-for-shutdown", daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return bool(result and result[0])


@dataclass(frozen=True)
class Inhibitor:
    """One row of logind's ``ListInhibitors``: who holds which inhibitor, and how."""

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
    """logind (or the system bus) could not be reached, or refused the delay inhibitor."""


class DelayInhibitor:
    """Holds the agent's logind ``delay`` inhibitor for shutdown and reports PrepareForShutdown.

    ``on_prepare(active, kind)`` runs on the inhibitor's own thread: ``active=True`` when a
    shutdown begins (logind now waits for :meth:`release`), ``active=False`` when it was
    cancelled (call :meth:`retake` to be warned of the next one). Each change of ``active``
    is reported once, with the type from ``PrepareForShutdownWithMetadata`` where logind sends
    it. Keep the callback short: hand the work to another thread.

    ``on_lost(error)``, if given, runs when the bus connection breaks. The inhibitor is released
    then, because an inhibitor whose owner can no longer hear logind only delays the shutdown.
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
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._active = False
        self._closing = False
        self._conn: Bus | None = None
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        """Whether the agent holds its delay inhibitor now."""
        return self._fd is not None

    def start(self) -> None:
        """Listen for PrepareForShutdown, take the delay inhibitor and start the listener thread.

        Raises :class:`LogindUnavailableError` if the bus or logind cannot be reached.
        """
        if self._conn is not None:
            raise RuntimeError("DelayInhibitor.start() called twice")
        deadline = time.monotonic() + START_TIMEOUT
        try:
            conn = Bus.open(self._bus_address, deadline)
        except Exception as exc:
            raise LogindUnavailableError(
                f"cannot connect to the system bus at {address(self._bus_address)}: {describe(exc)}"
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
                    f"cannot listen to logind on {address(self._bus_address)}: {describe(exc)}"
                ) from exc
            raise
        self._closing = False
        self._conn = conn
        self._thread = threading.Thread(
            target=self._listen, args=(conn, pending), name="logind-inhibitor", daemon=True
        )
        self._thread.start()

    def release(self) -> None:
        """Close the inhibitor's file descriptor, so logind goes on with the shutdown."""
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            log.info("released the logind delay lock")

    def retake(self) -> None:
        """Take the delay inhibitor again (after a cancelled shutdown); a no-op while held.

        Raises :class:`LogindUnavailableError` if logind refuses or cannot be reached.
        """
        if self.held:
            return
        fd = self._inhibit()
        with self._mutex:
            kept = self._fd is None
            if kept:
                self._fd = fd
        if not kept:  # another thread won the race; keep just one inhibitor
            os.close(fd)
        milestone(log, Milestone.LOCK_TAKEN, "holding a logind delay lock for shutdown")

    def inhibit_delay_max_seconds(self) -> float:
        """Return logind's ``InhibitDelayMaxUSec`` in seconds: how long it waits for us.

        Raises :class:`LogindUnavailableError` if logind cannot be asked.
        """
        deadline = time.monotonic() + START_TIMEOUT
        try:
            with Bus.open(self._bus_address, deadline) as bus:
                usec = bus.get_property(
                    LOGIND_NAME, LOGIND_PATH, LOGIND_IFACE, "InhibitDelayMaxUSec", deadline
                )
        except Exception as exc:
            raise LogindUnavailableError(
                f"cannot read InhibitDelayMaxUSec from logind: {describe(exc)}"
            ) from exc
        return int(usec) / 1e6

    def inhibitors(self) -> list[Inhibitor]:
        """Return every inhibitor logind holds now (``ListInhibitors``).

        Raises :class:`LogindUnavailableError` if logind cannot be asked.
        """
        from jeepney import DBusAddress, new_method_call

        manager = DBusAddress(LOGIND_PATH, bus_name=LOGIND_NAME, interface=LOGIND_IFACE)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            with Bus.open(self._bus_address, deadline) as bus:
                (rows,) = bus.call(new_method_call(manager, "ListInhibitors"), deadline)
        except Exception as exc:
            raise LogindUnavailableError(
                f"cannot list logind's inhibitors: {describe(exc)}"
            ) from exc
        return [Inhibitor.of(tuple(row)) for row in rows]

    def close(self) -> None:
        """Stop the listener thread, close the connection and release the inhibitor."""
        self._closing = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.interrupt()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if conn is not None:
            conn.close()
        self.release()

    def __enter__(self) -> DelayInhibitor:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _subscribe(self, conn: Bus, deadline: float) -> list[tuple[bool, Reason]]:
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
        self, conn: Bus, deadline: float, pending: list[tuple[bool, Reason]]
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
            with Bus.open(self._bus_address, deadline, fds=True) as bus:
                (fd,) = bus.call(msg, deadline)
        except Exception as exc:
            raise LogindUnavailableError(
                f"logind refused a delay inhibitor on {address(self._bus_address)}: {describe(exc)}"
            ) from exc
        raw = int(fd.to_raw_fd())
        # A child process that inherited the inhibitor would hold up the shutdown after release().
        os.set_inheritable(raw, False)
        return raw

    def _listen(self, conn: Bus, pending: list[tuple[bool, Reason]]) -> None:
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
        with self._mutex:
            if active == self._active:
                return
            self._active = active
        log.info("logind: PrepareForShutdown(%s), type %s", active, kind.value)
        try:
            self._on_prepare(active, kind)
        except Exception:
            log.exception("on_prepare callback failed")

    def _lost(self, exc: BaseException) -> None:
        with self._mutex:
            shutting_down = self._active
        if shutting_down and not self.held:
            # The bus stops with the machine once the lock is released: expected, not an
            # error a person should look into after every poweroff.
            log.info("the system bus went away with the shutdown: %s", describe(exc))
        else:
            log.error("lost the system bus connection, releasing the delay lock: %s", describe(exc))
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
