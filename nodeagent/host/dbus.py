"""The system bus, through jeepney: one connection whose every wait has a deadline.

Shared by the systemd and logind clients (nodeagent/host/systemd_manager.py,
nodeagent/host/logind.py). jeepney is imported lazily: these modules are loaded on the
shutdown path, where start-up time counts.
"""

from __future__ import annotations

import os
import time
from typing import Any

DEFAULT_SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"

# Calls made while starting may bus-activate logind, which can take a while on a busy boot.
START_TIMEOUT = 10.0
# Calls on the stop path run inside systemd's stop timeout: they answer fast or not at all.
STOP_PATH_TIMEOUT = 2.0


def system_bus_address() -> str | None:
    """Return ``$DBUS_SYSTEM_BUS_ADDRESS`` if set (tests, containers), else ``None``."""
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or None


def address(bus_address: str | None) -> str:
    """The address a connection goes to: the given one, the environment's, or the default."""
    return bus_address or system_bus_address() or DEFAULT_SYSTEM_BUS


def describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"


class Bus:
    """One jeepney connection whose every wait is bounded by a deadline.

    jeepney's own helpers say Hello without a time limit; on the shutdown path nothing may
    wait unbounded, so the handshake and each call here run against an explicit deadline.
    The connection is jeepney's thread-aware one, so :meth:`interrupt` can wake a reader
    blocked in :meth:`receive` from another thread.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @classmethod
    def open(cls, bus_address: str | None, deadline: float, *, fds: bool = False) -> Bus:
        from jeepney import message_bus
        from jeepney.bus import get_bus
        from jeepney.io.blocking import prep_socket
        from jeepney.io.threading import DBusConnection

        sock = prep_socket(
            get_bus(address(bus_address)), enable_fds=fds, timeout=remaining(deadline)
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
            reply = self._conn.receive(timeout=remaining(deadline))
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

    def __enter__(self) -> Bus:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def remaining(deadline: float) -> float:
    # Never zero: jeepney treats a falsy timeout as "wait forever" in one place.
    return max(deadline - time.monotonic(), 0.001)
