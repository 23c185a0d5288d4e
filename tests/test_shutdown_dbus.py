"""nodeagent/host (logind, systemd_manager, kubeletshutdown) against a real dbus-daemon,
with python-dbusmock serving logind and systemd.

Each test gets its own private bus (a dbus-daemon with a minimal config) and its own mocks:
python-dbusmock runs as a separate process under the system interpreter (Debian's
python3-dbusmock; it needs dbus-python and GObject, which the venv does not have), and the
code under test reaches it over jeepney, exactly as it reaches the real logind.

The logind template already returns a real file descriptor from Inhibit() and drops the
inhibitor from ListInhibitors() when that descriptor is closed, so lock handling is observed
from logind's side. What the template lacks (PrepareForShutdownWithMetadata, the
InhibitDelayMaxUSec property, systemd's ListJobs) is added through dbusmock's own
org.freedesktop.DBus.Mock interface.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jeepney import DBusAddress, MessageType, new_method_call, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection

from hack import kubeutil as ku
from hack import milestones as ms
from hack.agentproc import AgentProcess
from nodeagent.fence.marker import CORDONED_BY
from nodeagent.host.dbus import system_bus_address
from nodeagent.host.kubeletshutdown import (
    KubeletShutdownReport,
    check_outvoted,
    kubelet_inhibitor,
    outvoted_message,
    requested_delay,
)
from nodeagent.host.kubeletshutdown import next_check as kubelet_check_after
from nodeagent.host.logind import (
    LOGIND_IFACE,
    LOGIND_NAME,
    LOGIND_PATH,
    DelayInhibitor,
    Inhibitor,
    LogindUnavailableError,
    kind_from_logind_type,
    parse_prepare_signal,
)
from nodeagent.host.systemd_manager import (
    SYSTEMD_IFACE,
    SYSTEMD_NAME,
    SYSTEMD_PATH,
    StopEvidence,
    classify_jobs,
    why_stopping,
)
from nodeagent.kube.client import JSON
from nodeagent.report.conditions import READY, find
from nodeagent.types import Reason

SYSTEM_PYTHON = "/usr/bin/python3"
MOCK_IFACE = "org.freedesktop.DBus.Mock"
WHY = "Draining the node before shutdown"

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


# -- fixtures -------------------------------------------------------------------------------


@dataclass
class Bus:
    """A private dbus-daemon and the mocks started on it."""

    address: str
    workdir: Path
    daemon: subprocess.Popen[bytes]
    mocks: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def connect(self) -> DBusConnection:
        return open_dbus_connection(self.address)

    def start_mock(self, template: str, name: str) -> None:
        """Run `python3 -m dbusmock --template` on this bus and wait until it owns `name`."""
        env = {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": self.address}
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        with (self.workdir / f"{template}.log").open("wb") as log:
            proc = subprocess.Popen(
                [SYSTEM_PYTHON, "-m", "dbusmock", "--system", "--template", template],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.mocks.append(proc)
        deadline = time.monotonic() + 20
        with self.connect() as conn:
            while not self._has_owner(conn, name):
                if proc.poll() is not None or time.monotonic() > deadline:
                    text = (self.workdir / f"{template}.log").read_text(errors="replace")
                    raise AssertionError(f"dbusmock {template} did not start:\n{text}")
                time.sleep(0.05)

    @staticmethod
    def _has_owner(conn: DBusConnection, name: str) -> bool:
        reply = conn.send_and_get_reply(message_bus.NameHasOwner(name), timeout=5)
        return bool(reply.body[0])

    def stop(self) -> None:
        for proc in [*self.mocks, self.daemon]:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def start_bus(tmp_path: Path) -> Bus:
    """A private dbus-daemon listening on tmp_path/bus.socket (replacing a dead one)."""
    for tool in ("dbus-daemon", SYSTEM_PYTHON):
        assert shutil.which(tool), f"{tool} is needed (apt-get install dbus python3-dbusmock)"
    socket = tmp_path / "bus.socket"
    socket.unlink(missing_ok=True)
    config = tmp_path / "bus.conf"
    config.write_text(BUS_CONFIG.format(socket=socket))
    # --print-address answers once the daemon accepts connections; the socket file alone
    # appears a moment before it listens.
    with (tmp_path / "dbus-daemon.log").open("wb") as log:
        daemon = subprocess.Popen(
            [
                "dbus-daemon",
                f"--config-file={config}",
                "--nofork",
                "--nopidfile",
                "--print-address",
            ],
            stdout=subprocess.PIPE,
            stderr=log,
        )
    assert daemon.stdout is not None
    printed = daemon.stdout.readline().decode().strip()
    log_text = (tmp_path / "dbus-daemon.log").read_text(errors="replace")
    assert printed.startswith("unix:path="), f"dbus-daemon did not start: {log_text}"
    return Bus(address=f"unix:path={socket}", workdir=tmp_path, daemon=daemon)


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[Bus]:
    b = start_bus(tmp_path)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def logind(bus: Bus) -> Iterator[Bus]:
    bus.start_mock("logind", LOGIND_NAME)
    yield bus


@pytest.fixture
def systemd(bus: Bus) -> Iterator[Bus]:
    bus.start_mock("systemd", SYSTEMD_NAME)
    yield bus


# -- helpers that drive the mocks -----------------------------------------------------------


def mock_call(bus: Bus, path: str, method: str, signature: str, body: tuple[Any, ...]) -> Any:
    """Call a method of dbusmock's control interface on object `path`."""
    name = LOGIND_NAME if path == LOGIND_PATH else SYSTEMD_NAME
    addr = DBusAddress(path, bus_name=name, interface=MOCK_IFACE)
    with bus.connect() as conn:
        reply = conn.send_and_get_reply(new_method_call(addr, method, signature, body), timeout=5)
    assert reply.header.message_type is MessageType.method_return, reply.body
    return reply.body


def logind_call(bus: Bus, method: str) -> Any:
    addr = DBusAddress(LOGIND_PATH, bus_name=LOGIND_NAME, interface=LOGIND_IFACE)
    with bus.connect() as conn:
        reply = conn.send_and_get_reply(new_method_call(addr, method), timeout=5)
    assert reply.header.message_type is MessageType.method_return, reply.body
    return reply.body[0]


def emit_prepare(bus: Bus, active: bool, shutdown_type: str | None) -> None:
    """Emit what logind emits: WithMetadata first (systemd >= 255), then the plain signal."""
    if shutdown_type is not None:
        metadata = {"type": ("s", shutdown_type)}
        args = [("b", active), ("a{sv}", metadata)]
        mock_call(
            bus,
            LOGIND_PATH,
            "EmitSignal",
            "sssav",
            (LOGIND_IFACE, "PrepareForShutdownWithMetadata", "ba{sv}", args),
        )
    mock_call(
        bus,
        LOGIND_PATH,
        "EmitSignal",
        "sssav",
        (LOGIND_IFACE, "PrepareForShutdown", "b", [("b", active)]),
    )


def our_inhibitors(bus: Bus) -> list[tuple[Any, ...]]:
    return [i for i in logind_call(bus, "ListInhibitors") if i[1] == "nodeagent"]


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def set_jobs(bus: Bus, jobs: list[tuple[str, str]]) -> None:
    """Make the systemd mock's ListJobs return `jobs` as (unit, job_type) pairs."""
    rows = [
        (n + 1, unit, jtype, "waiting", f"{SYSTEMD_PATH}/job/{n + 1}", f"{SYSTEMD_PATH}/unit/x")
        for n, (unit, jtype) in enumerate(jobs)
    ]
    mock_call(
        bus,
        SYSTEMD_PATH,
        "AddMethod",
        "sssss",
        (SYSTEMD_IFACE, "ListJobs", "", "a(usssoo)", f"ret = {rows!r}"),
    )


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class Recorder:
    """Collects on_prepare calls; waits for them."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, Reason]] = []
        self.event = threading.Condition()

    def __call__(self, active: bool, kind: Reason) -> None:
        with self.event:
            self.calls.append((active, kind))
            self.event.notify_all()

    def wait(self, n: int, timeout: float = 5.0) -> list[tuple[bool, Reason]]:
        with self.event:
            assert self.event.wait_for(lambda: len(self.calls) >= n, timeout), self.calls
            return list(self.calls)


# -- DelayInhibitor ------------------------------------------------------------------------


def test_start_takes_a_delay_lock_for_shutdown(logind: Bus) -> None:
    inhibitor = DelayInhibitor(on_prepare=Recorder(), bus_address=logind.address)
    inhibitor.start()
    try:
        assert inhibitor.held
        assert our_inhibitors(logind) == [("shutdown", "nodeagent", WHY, "delay", 1000, 123456)]
    finally:
        inhibitor.close()
    wait_for(lambda: our_inhibitors(logind) == [])


def test_release_lets_logind_go_and_retake_takes_the_lock_again(logind: Bus) -> None:
    with DelayInhibitor(on_prepare=Recorder(), bus_address=logind.address) as inhibitor:
        inhibitor.release()
        assert not inhibitor.held
        wait_for(lambda: our_inhibitors(logind) == [])
        inhibitor.release()  # idempotent
        inhibitor.retake()
        assert inhibitor.held
        assert len(our_inhibitors(logind)) == 1
        inhibitor.retake()  # a no-op while held: still one lock
        assert len(our_inhibitors(logind)) == 1


def test_a_child_process_does_not_inherit_the_lock(logind: Bus) -> None:
    with DelayInhibitor(on_prepare=Recorder(), bus_address=logind.address) as inhibitor:
        child = subprocess.Popen(["sleep", "30"], close_fds=False)
        try:
            inhibitor.release()
            # Had the child inherited the descriptor, logind would still see the lock.
            wait_for(lambda: our_inhibitors(logind) == [])
        finally:
            child.kill()
            child.wait()


def test_metadata_type_wins_and_each_transition_is_reported_once(logind: Bus) -> None:
    rec = Recorder()
    with DelayInhibitor(on_prepare=rec, bus_address=logind.address):
        emit_prepare(logind, True, "reboot")
        assert rec.wait(1) == [(True, Reason.REBOOT)]
        emit_prepare(logind, False, "reboot")
        assert rec.wait(2) == [(True, Reason.REBOOT), (False, Reason.REBOOT)]
        emit_prepare(logind, True, "poweroff")
        assert rec.wait(3)[-1] == (True, Reason.POWEROFF)
        settle_until_quiet(rec, 3)


def settle_until_quiet(rec: Recorder, expected: int) -> None:
    """Fail if more calls arrive than expected (the plain twin of a typed signal)."""
    time.sleep(0.3)
    assert len(rec.calls) == expected, rec.calls


def test_plain_prepare_for_shutdown_from_an_older_logind(logind: Bus) -> None:
    rec = Recorder()
    with DelayInhibitor(on_prepare=rec, bus_address=logind.address):
        emit_prepare(logind, True, None)
        assert rec.wait(1) == [(True, Reason.UNKNOWN)]
        emit_prepare(logind, True, None)  # a repeat is not a new transition
        emit_prepare(logind, False, None)
        assert rec.wait(2) == [(True, Reason.UNKNOWN), (False, Reason.UNKNOWN)]
        settle_until_quiet(rec, 2)


def test_cancelled_shutdown_then_retake(logind: Bus) -> None:
    rec = Recorder()
    with DelayInhibitor(on_prepare=rec, bus_address=logind.address) as inhibitor:
        emit_prepare(logind, True, "poweroff")
        rec.wait(1)
        inhibitor.release()
        wait_for(lambda: our_inhibitors(logind) == [])
        emit_prepare(logind, False, "poweroff")
        assert rec.wait(2)[-1] == (False, Reason.POWEROFF)
        inhibitor.retake()
        assert len(our_inhibitors(logind)) == 1
        emit_prepare(logind, True, "soft-reboot")
        assert rec.wait(3)[-1] == (True, Reason.SOFT_REBOOT)


def test_signals_from_anyone_but_logind_are_ignored(logind: Bus) -> None:
    rec = Recorder()
    with DelayInhibitor(on_prepare=rec, bus_address=logind.address), logind.connect() as conn:
        # Same path, interface and member as logind's, but sent by an impostor.
        addr = DBusAddress(LOGIND_PATH, interface=LOGIND_IFACE)
        conn.send(new_signal(addr, "PrepareForShutdown", "b", (True,)))
        time.sleep(0.3)
        assert rec.calls == []
        emit_prepare(logind, True, "halt")
        assert rec.wait(1) == [(True, Reason.HALT)]


def test_a_failing_callback_does_not_stop_the_listener(logind: Bus) -> None:
    rec = Recorder()

    def flaky(active: bool, kind: Reason) -> None:
        rec(active, kind)
        if len(rec.calls) == 1:
            raise RuntimeError("boom")

    with DelayInhibitor(on_prepare=flaky, bus_address=logind.address):
        emit_prepare(logind, True, "reboot")
        rec.wait(1)
        emit_prepare(logind, False, "reboot")
        assert rec.wait(2)[-1] == (False, Reason.REBOOT)


def test_a_shutdown_already_under_way_at_start_is_reported(logind: Bus) -> None:
    mock_call(
        logind,
        LOGIND_PATH,
        "UpdateProperties",
        "sa{sv}",
        (LOGIND_IFACE, {"PreparingForShutdown": ("b", True)}),
    )
    rec = Recorder()
    with DelayInhibitor(on_prepare=rec, bus_address=logind.address):
        assert rec.wait(1) == [(True, Reason.UNKNOWN)]


def test_inhibit_delay_max_seconds(logind: Bus) -> None:
    inhibitor = DelayInhibitor(on_prepare=Recorder(), bus_address=logind.address)
    with pytest.raises(LogindUnavailableError, match="InhibitDelayMaxUSec"):
        inhibitor.inhibit_delay_max_seconds()  # the stock template lacks the property
    mock_call(
        logind,
        LOGIND_PATH,
        "AddProperty",
        "ssv",
        (LOGIND_IFACE, "InhibitDelayMaxUSec", ("t", 120_000_000)),
    )
    assert inhibitor.inhibit_delay_max_seconds() == 120.0


def test_start_without_logind_raises_a_clear_error(bus: Bus) -> None:
    inhibitor = DelayInhibitor(on_prepare=Recorder(), bus_address=bus.address)
    with pytest.raises(LogindUnavailableError, match=r"logind refused .*ServiceUnknown"):
        inhibitor.start()
    assert not inhibitor.held


def test_start_without_a_bus_raises_a_clear_error(tmp_path: Path) -> None:
    address = f"unix:path={tmp_path}/nobody-listens"
    inhibitor = DelayInhibitor(on_prepare=Recorder(), bus_address=address)
    with pytest.raises(LogindUnavailableError, match="cannot connect to the system bus"):
        inhibitor.start()


def test_losing_the_bus_releases_the_lock_and_reports(logind: Bus) -> None:
    lost: list[BaseException] = []
    inhibitor = DelayInhibitor(
        on_prepare=Recorder(), bus_address=logind.address, on_lost=lost.append
    )
    inhibitor.start()
    try:
        assert inhibitor.held
        logind.daemon.terminate()
        logind.daemon.wait(5)
        wait_for(lambda: bool(lost))
        assert not inhibitor.held
    finally:
        inhibitor.close()


@pytest.mark.parametrize("shutdown", [False, True], ids=["while-running", "after-release"])
def test_losing_the_bus_is_an_error_unless_the_shutdown_took_it(
    logind: Bus, shutdown: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The bus stops with the machine after the agent let it go: no ERROR on every
    poweroff. Lost while the agent still holds its lock, it is one."""
    lost: list[BaseException] = []
    recorder = Recorder()
    inhibitor = DelayInhibitor(on_prepare=recorder, bus_address=logind.address, on_lost=lost.append)
    inhibitor.start()
    try:
        if shutdown:
            emit_prepare(logind, True, "poweroff")
            recorder.wait(1)
            inhibitor.release()
        with caplog.at_level(logging.INFO, logger="nodeagent.host.logind"):
            logind.daemon.terminate()
            logind.daemon.wait(5)
            wait_for(lambda: bool(lost))
    finally:
        inhibitor.close()
    bus_lines = [r for r in caplog.records if "system bus" in r.getMessage()]
    assert [r.levelno for r in bus_lines] == [logging.INFO if shutdown else logging.ERROR]


def test_close_leaves_no_thread_and_no_descriptor_behind(logind: Bus) -> None:
    before_fds = open_fds()
    before_threads = set(threading.enumerate())
    inhibitor = DelayInhibitor(on_prepare=Recorder(), bus_address=logind.address)
    inhibitor.start()
    inhibitor.release()
    inhibitor.retake()
    with pytest.raises(LogindUnavailableError):  # an error reply must not leak either
        inhibitor.inhibit_delay_max_seconds()
    inhibitor.close()
    inhibitor.close()  # idempotent
    assert not inhibitor.held
    assert set(threading.enumerate()) <= before_threads
    assert open_fds() <= before_fds


def test_the_system_bus_comes_from_the_environment(
    logind: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", logind.address)
    assert system_bus_address() == logind.address
    with DelayInhibitor(on_prepare=Recorder()) as inhibitor:
        assert inhibitor.held
        assert len(our_inhibitors(logind)) == 1
    monkeypatch.delenv("DBUS_SYSTEM_BUS_ADDRESS")
    assert system_bus_address() is None


# -- why_stopping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "kind"),
    [
        ([("poweroff.target", "start"), ("nodeagent.service", "stop")], Reason.POWEROFF),
        ([("reboot.target", "start"), ("nodeagent.service", "stop")], Reason.REBOOT),
        ([("nodeagent.service", "stop")], Reason.STOP),
        ([("nodeagent.service", "restart")], Reason.RESTART),
        ([("other.service", "stop")], Reason.UNKNOWN),
        ([], Reason.UNKNOWN),
    ],
)
def test_why_stopping_reads_systemds_jobs(
    systemd: Bus, jobs: list[tuple[str, str]], kind: Reason
) -> None:
    set_jobs(systemd, jobs)
    evidence = why_stopping("nodeagent.service", bus_address=systemd.address)
    assert evidence == StopEvidence(kind, tuple(f"{t} {u}" for u, t in jobs))


@pytest.mark.parametrize(
    ("jobs", "kind"),
    [
        # The prerm's flag turns our own stop into a removal, and nothing else.
        ([("nodeagent.service", "stop")], Reason.REMOVE),
        ([("nodeagent.service", "restart")], Reason.RESTART),
        ([("poweroff.target", "start"), ("nodeagent.service", "stop")], Reason.POWEROFF),
        ([], Reason.UNKNOWN),
    ],
)
def test_removal_flag_marks_only_a_stop_as_removal(
    systemd: Bus, tmp_path: Path, jobs: list[tuple[str, str]], kind: Reason
) -> None:
    flag = tmp_path / "removing"
    flag.touch()
    set_jobs(systemd, jobs)
    evidence = why_stopping(bus_address=systemd.address, removal_flag=str(flag))
    assert evidence.kind is kind
    assert classify_jobs(jobs, "nodeagent.service", removing=True) is kind


def test_why_stopping_reports_only_the_telling_jobs(systemd: Bus) -> None:
    # A real shutdown queues a stop for every unit; the evidence keeps what decided.
    set_jobs(
        systemd,
        [
            ("dbus.service", "stop"),
            ("shutdown.target", "start"),
            ("reboot.target", "start"),
            ("tmp.mount", "stop"),
            ("nodeagent.service", "stop"),
        ],
    )
    evidence = why_stopping(bus_address=systemd.address)
    assert evidence == StopEvidence(
        Reason.REBOOT,
        ("start shutdown.target", "start reboot.target", "stop nodeagent.service"),
    )


def test_why_stopping_without_systemd_says_unknown_and_why(bus: Bus) -> None:
    evidence = why_stopping(bus_address=bus.address)
    assert evidence.kind is Reason.UNKNOWN
    assert len(evidence.jobs) == 1
    assert evidence.jobs[0].startswith("error: ")
    assert "ServiceUnknown" in evidence.jobs[0]


def test_why_stopping_without_a_bus_says_unknown(tmp_path: Path) -> None:
    evidence = why_stopping(bus_address=f"unix:path={tmp_path}/none")
    assert evidence.kind is Reason.UNKNOWN
    assert evidence.jobs[0].startswith("error: ")


def test_why_stopping_gives_up_quickly_on_a_hung_systemd(systemd: Bus) -> None:
    mock_call(
        systemd,
        SYSTEMD_PATH,
        "AddMethod",
        "sssss",
        (SYSTEMD_IFACE, "ListJobs", "", "a(usssoo)", "import time; time.sleep(6); ret = []"),
    )
    started = time.monotonic()
    evidence = why_stopping(bus_address=systemd.address, timeout=1.0)
    elapsed = time.monotonic() - started
    assert evidence.kind is Reason.UNKNOWN
    assert "error: " in evidence.jobs[0]
    assert elapsed < 2.0


def test_why_stopping_leaks_no_descriptors(systemd: Bus) -> None:
    set_jobs(systemd, [("nodeagent.service", "stop")])
    why_stopping(bus_address=systemd.address)  # warm up lazy imports
    before = open_fds()
    for _ in range(20):
        assert why_stopping(bus_address=systemd.address).kind is Reason.STOP
    assert open_fds() <= before


# -- the pure parts, no bus needed ----------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "kind"),
    [
        ([("poweroff.target", "start")], Reason.POWEROFF),
        ([("systemd-poweroff.service", "start")], Reason.POWEROFF),
        ([("halt.target", "start")], Reason.HALT),
        ([("kexec.target", "start")], Reason.KEXEC),
        ([("soft-reboot.target", "start")], Reason.SOFT_REBOOT),
        ([("systemd-reboot.service", "start")], Reason.REBOOT),
        # Every shutdown starts shutdown.target; the kind-specific target wins when queued.
        ([("shutdown.target", "start"), ("reboot.target", "start")], Reason.REBOOT),
        ([("shutdown.target", "start"), ("nodeagent.service", "stop")], Reason.POWEROFF),
        ([("final.target", "start")], Reason.POWEROFF),
        # A shutdown beats what happens to our own unit.
        ([("nodeagent.service", "restart"), ("poweroff.target", "start")], Reason.POWEROFF),
        ([("nodeagent.service", "try-restart")], Reason.RESTART),
        ([("nodeagent.service", "stop"), ("rescue.target", "start")], Reason.STOP),
        # Someone else's stop or restart is not ours.
        ([("kubelet.service", "restart")], Reason.UNKNOWN),
        ([("kubelet.service", "stop")], Reason.UNKNOWN),
        # A stop job on a shutdown target is not a shutdown.
        ([("poweroff.target", "stop")], Reason.UNKNOWN),
        ([("nodeagent.service", "start")], Reason.UNKNOWN),
    ],
)
def test_classify_jobs(jobs: list[tuple[str, str]], kind: Reason) -> None:
    assert classify_jobs(jobs, "nodeagent.service") is kind


def test_classify_jobs_uses_the_given_unit() -> None:
    assert classify_jobs([("agent@x.service", "stop")], "agent@x.service") is Reason.STOP
    assert classify_jobs([("agent@x.service", "stop")], "nodeagent.service") is (Reason.UNKNOWN)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("poweroff", Reason.POWEROFF),
        ("power-off", Reason.POWEROFF),
        ("reboot", Reason.REBOOT),
        ("halt", Reason.HALT),
        ("kexec", Reason.KEXEC),
        ("soft-reboot", Reason.SOFT_REBOOT),
        ("suspend", Reason.UNKNOWN),
        ("", Reason.UNKNOWN),
    ],
)
def test_kind_from_logind_type(text: str, kind: Reason) -> None:
    assert kind_from_logind_type(text) is kind


def test_parse_prepare_signal() -> None:
    assert parse_prepare_signal("PrepareForShutdown", (True,)) == (True, Reason.UNKNOWN)
    assert parse_prepare_signal(
        "PrepareForShutdownWithMetadata", (False, {"type": ("s", "kexec")})
    ) == (False, Reason.KEXEC)
    assert parse_prepare_signal("PrepareForShutdownWithMetadata", (True, {})) == (
        True,
        Reason.UNKNOWN,
    )
    assert parse_prepare_signal("PrepareForSleep", (True,)) is None


def test_shutdown_kind_values_are_the_wire_strings() -> None:
    assert str(Reason.SOFT_REBOOT) == "soft-reboot"
    assert isinstance(Reason.SOFT_REBOOT, str)
    assert Reason("poweroff") is Reason.POWEROFF


# -- the daemon against the mock logind and the real control plane ---------------------


@contextlib.contextmanager
def logind_agent(
    logind: Bus, workdir: Path, kubeconfig: str, node: str, **config: dict[str, Any]
) -> Iterator[AgentProcess]:
    """`nodeagent run` on the mock logind's bus, holding its delay lock; killed after."""
    delay = (LOGIND_IFACE, "InhibitDelayMaxUSec", ("t", 120_000_000))
    mock_call(logind, LOGIND_PATH, "AddProperty", "ssv", delay)
    # JSON lines, as the DaemonSet form logs: the milestones are read from them as data.
    config = {**config, "": {"log_format": "json"}, "shutdown": {"use_logind": True}}
    env = {"DBUS_SYSTEM_BUS_ADDRESS": logind.address}
    agent = AgentProcess.start(workdir, kubeconfig, node, config, env)
    try:
        wait_for(lambda: len(our_inhibitors(logind)) == 1, 15)
        yield agent
    finally:
        agent.kill()


def said(agent: AgentProcess) -> list[ms.Record]:
    """The agent's milestones, read from its JSON lines."""
    return ms.from_lines(agent.output().splitlines())


def node_with_a_pod(cluster: Any, kube: Any, prefix: str) -> str:
    """A node running one Deployment pod, with an open spare to take it."""
    group, node, spare = ku.node_pair(cluster, kube, prefix)
    ku.deployment(kube, group, "web", group, 1)
    ku.wait_running(kube, node, 1)
    ku.open_node(kube, spare)
    return node


def pod_events(kube: Any, pod: JSON, reason: str) -> list[JSON]:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    query = {"fieldSelector": f"reason={reason},involvedObject.name={name}"}
    return list(kube.request("GET", f"/api/v1/namespaces/{ns}/events", query=query)["items"])


def drained(kube: Any, node: str) -> bool:
    return not ku.running(ku.pods_on(kube, node))


def cordoned(kube: Any, node: str) -> bool:
    return bool(ku.node(kube, node)["spec"].get("unschedulable"))


def test_a_shutdown_cancelled_mid_drain_keeps_a_lock_and_undoes_the_fence(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """PrepareForShutdown(false) while the drain still runs (a PDB holds it): the fence
    goes, the agent keeps a delay lock for the next shutdown, and that one drains again."""
    group, node, _spare = ku.node_pair(cluster, kube, "lc")
    ku.deployment(kube, group, "quorum", group, 2)
    ku.pdb(kube, group, "quorum", {"app": "quorum"}, minAvailable=2)  # never allows
    ku.wait_running(kube, node, 2)
    ku.wait_pdb_ready(kube, group, "quorum")
    deadline = {"deadline": "30s"}
    with logind_agent(logind, tmp_path, admin_kubeconfig, node, drain=deadline) as agent:
        emit_prepare(logind, True, "poweroff")
        ku.wait_until(
            lambda: agent.metric("nodeagent_evictions_total", result="blocked"),
            15,
            "the drain under way",
        )
        assert cordoned(kube, node)
        emit_prepare(logind, False, "poweroff")
        ku.wait_until(lambda: not cordoned(kube, node), 15, "the fence undone")
        assert CORDONED_BY not in (ku.node(kube, node)["metadata"].get("annotations") or {})
        ku.wait_until(lambda: "Uncordoned" in [e["reason"] for e in ku.node_events(kube, node)])
        # The cancelled drain has ended (it stops promptly); the lock is still there.
        ku.wait_until(
            lambda: ms.last(said(agent), ms.DRAIN_FINISHED, outcome="cancelled"),
            15,
            "the old drain ended",
        )
        time.sleep(0.5)
        assert len(our_inhibitors(logind)) == 1, agent.output()
        assert len(ku.running(ku.pods_on(kube, node))) == 2

        emit_prepare(logind, True, "reboot")
        ku.wait_until(lambda: cordoned(kube, node), 15, "the next shutdown drains again")
        assert ku.node(kube, node)["metadata"]["annotations"][CORDONED_BY] == "nodeagent"


def test_back_to_back_true_and_false_leave_the_agent_ready_for_the_next_shutdown(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """A cancel racing the start of its own shutdown must not wedge the agent."""
    node = node_with_a_pod(cluster, kube, "bb")
    with logind_agent(logind, tmp_path, admin_kubeconfig, node) as agent:
        for _ in range(3):
            emit_prepare(logind, True, "poweroff")
            emit_prepare(logind, False, "poweroff")
        ku.wait_until(
            lambda: sum(r.name == ms.SHUTDOWN_CANCELLED for r in said(agent)) == 3, 15, "3 cancels"
        )
        ku.wait_until(lambda: not cordoned(kube, node), 15, "no fence left")
        wait_for(lambda: len(our_inhibitors(logind)) == 1, 15)

        emit_prepare(logind, True, "reboot")
        ku.wait_until(lambda: drained(kube, node), 20, "drained")
        assert cordoned(kube, node)
        wait_for(lambda: our_inhibitors(logind) == [], 15)  # released once drained


def test_the_agent_takes_the_lock_again_after_the_bus_comes_back(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """dbus-daemon restarts (an upgrade, a crash): the next shutdown must still be heard."""
    node = node_with_a_pod(cluster, kube, "rb")
    with logind_agent(logind, tmp_path, admin_kubeconfig, node) as agent:
        for proc in [*logind.mocks, logind.daemon]:
            proc.terminate()
            proc.wait(5)
        fresh = start_bus(logind.workdir)  # the same socket path, a new daemon
        logind.daemon, logind.mocks = fresh.daemon, []
        logind.start_mock("logind", LOGIND_NAME)

        wait_for(lambda: len(our_inhibitors(logind)) == 1, 30)
        # Lost mid-start or once running, the logind loop noticed and started over.
        assert "loop logind failed" in agent.output()
        emit_prepare(logind, True, "poweroff")
        ku.wait_until(lambda: drained(kube, node), 20, "drained")


# -- the kubelet's graceful node shutdown ---------------------------------------------------


@contextlib.contextmanager
def kubelet_delay_lock(bus: Bus) -> Iterator[None]:
    """Take a shutdown delay lock as the kubelet's graceful node shutdown does."""
    addr = DBusAddress(LOGIND_PATH, bus_name=LOGIND_NAME, interface=LOGIND_IFACE)
    why = "Kubelet needs time to handle node shutdown"
    msg = new_method_call(addr, "Inhibit", "ssss", ("shutdown", "kubelet", why, "delay"))
    with open_dbus_connection(bus.address, enable_fds=True) as conn:
        reply = conn.send_and_get_reply(msg, timeout=5)
    assert reply.header.message_type is MessageType.method_return, reply.body
    fd = reply.body[0].to_raw_fd()
    try:
        yield
    finally:
        os.close(fd)


def test_inhibitors_lists_every_lock(logind: Bus) -> None:
    with (
        kubelet_delay_lock(logind),
        DelayInhibitor(on_prepare=Recorder(), bus_address=logind.address) as inhibitor,
    ):
        found = {(i.who, i.mode, i.what) for i in inhibitor.inhibitors()}
        assert found >= {("kubelet", "delay", "shutdown"), ("nodeagent", "delay", "shutdown")}
        assert kubelet_inhibitor(inhibitor.inhibitors()) is not None
    lister = DelayInhibitor(Recorder(), bus_address=logind.address)
    wait_for(lambda: kubelet_inhibitor(lister.inhibitors()) is None)


def _inhibitor(who: str, mode: str = "delay", what: str = "shutdown") -> Inhibitor:
    return Inhibitor(what, who, "why", mode, 0, 1)


@pytest.mark.parametrize(
    ("inhibitors", "found"),
    [
        ([], False),
        ([_inhibitor("nodeagent")], False),
        ([_inhibitor("nodeagent"), _inhibitor("kubelet")], True),
        ([_inhibitor("kubelet", what="sleep:shutdown")], True),
        ([_inhibitor("kubelet", mode="block")], False),  # not the graceful-shutdown lock
        ([_inhibitor("kubelet", what="sleep")], False),
        ([_inhibitor("kubelet-wrapper")], False),
    ],
)
def test_kubelet_inhibitor(inhibitors: list[Inhibitor], found: bool) -> None:
    assert (kubelet_inhibitor(inhibitors) is not None) is found


# What the kubelet writes (inhibit_linux.go, OverrideInhibitDelay), and what else may be there.
KUBELET_DROPIN_TEXT = "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=150\n"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (KUBELET_DROPIN_TEXT, 150.0),
        ("[Login]\nInhibitDelayMaxSec = 30\n", 30.0),
        ("[Login]\n", None),
        ("[Login]\nInhibitDelayMaxSec=2min\n", None),  # not what the kubelet writes
        ("", None),
    ],
)
def test_the_delay_the_kubelet_asked_for(text: str, seconds: float | None) -> None:
    assert requested_delay(text) == seconds


def test_a_shorter_logind_delay_than_the_kubelet_asked_for_is_said(tmp_path: Path) -> None:
    """logind's delay below the kubelet's request: its shutdown manager does not start."""
    dropin = tmp_path / "99-kubelet.conf"
    dropin.write_text(KUBELET_DROPIN_TEXT)
    said = check_outvoted(128.0, str(dropin))
    assert said is not None
    assert said.startswith("the kubelet asked logind for 150s (")
    assert "logind's delay is 128s" in said and "nodeagent drains this node alone" in said
    assert check_outvoted(150.0, str(dropin)) is None
    assert check_outvoted(128.0, str(tmp_path / "absent.conf")) is None
    assert outvoted_message(30.0, 128.0) is None


@pytest.mark.parametrize(
    ("since_start", "seen", "after"),
    [
        (0.0, False, 1.0),  # at start: every second until the kubelet's lock is seen
        (119.0, False, 1.0),
        (121.0, False, 30.0),  # the kubelet had its time: as usual from then on
        (5.0, True, 30.0),  # seen: nothing to hurry for
    ],
)
def test_the_kubelets_lock_is_looked_for_often_only_after_start(
    since_start: float, seen: bool, after: float
) -> None:
    assert kubelet_check_after(1000.0 + since_start, 1000.0, seen) == 1000.0 + since_start + after


def test_a_kubelet_outvoted_is_said_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    report = KubeletShutdownReport()
    said = outvoted_message(150.0, 128.0)
    for seen in (None, said, said, None, said):
        report.observe_outvoted(seen)
    warned = [r.getMessage() for r in caplog.records if "asked logind" in r.getMessage()]
    assert warned == [said, said]


def test_the_agent_says_when_the_kubelet_races_its_drain(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """With the kubelet's graceful shutdown on, PDBs are not guaranteed: the NodeAgentReady
    reason, a metric, a log line and `nodeagent status` say so."""
    node = node_with_a_pod(cluster, kube, "kgs")
    with (
        kubelet_delay_lock(logind),
        logind_agent(logind, tmp_path, admin_kubeconfig, node) as agent,
    ):
        ku.wait_until(
            lambda: (
                (find(ku.node(kube, node), READY) or {}).get("reason") == "KubeletGracefulShutdown"
            ),
            20,
            "the KubeletGracefulShutdown reason",
        )
        assert agent.metric("nodeagent_kubelet_graceful_shutdown") == 1
        assert "PDBs are not guaranteed at shutdown" in agent.output()
        shown = ku.run_agent("status", "--kubeconfig", admin_kubeconfig, "--node", node)
        assert shown.returncode == 0, shown.stderr
        assert "PDBs are not guaranteed" in shown.stdout
        # The agent still drains: the pod the kubelet is killing, whose budget refuses its
        # eviction, is deleted at once, so that it leaves its Services, and says so.
        (pod,) = ku.pods_on(kube, node)
        ns = pod["metadata"]["namespace"]
        ku.pdb(kube, ns, "web", {"app": "web"}, minAvailable=1)
        ku.wait_pdb_ready(kube, ns, "web")
        emit_prepare(logind, True, "poweroff")
        ku.wait_until(lambda: drained(kube, node), 20, "drained")
        # The pod shows its deletion once the API server has it; the agent says so only
        # after the delete's answer reached it, later on a loaded machine.
        ku.wait_until(
            lambda: "the kubelet's graceful shutdown is stopping it" in agent.output(),
            10,
            "the agent's line on the pod the kubelet is stopping",
        )
        events = ku.wait_until(
            lambda: pod_events(kube, pod, "DeletedForKubeletShutdown"), 10, "the pod's Event"
        )
        assert events[0]["involvedObject"]["uid"] == pod["metadata"]["uid"]
