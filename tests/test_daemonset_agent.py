"""The agent in the DaemonSet form (`form = "pod"`), against a mock logind on a real
dbus-daemon and the real control plane: the pod's SIGTERM is not a shutdown, logind's
PrepareForShutdown still drains, and one agent per node holds the node-local lock."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack import milestones as ms
from hack.agentproc import AgentProcess, merged
from nodeagent.host.logind import LOGIND_IFACE, LOGIND_NAME, LOGIND_PATH
from nodeagent.host.systemd_manager import SYSTEMD_IFACE, SYSTEMD_NAME, SYSTEMD_PATH
from tests.test_shutdown_dbus import (
    Bus,
    cordoned,
    drained,
    emit_prepare,
    mock_call,
    node_with_a_pod,
    our_inhibitors,
    start_bus,
    wait_for,
)


@contextlib.contextmanager
def mock_logind(tmp_path: Path) -> Iterator[Bus]:
    """A private system bus with a mock logind that lets shutdowns wait 120 s."""
    bus = start_bus(tmp_path)
    try:
        bus.start_mock("logind", LOGIND_NAME)
        delay = (LOGIND_IFACE, "InhibitDelayMaxUSec", ("t", 120_000_000))
        mock_call(bus, LOGIND_PATH, "AddProperty", "ssv", delay)
        yield bus
    finally:
        bus.stop()


@pytest.fixture
def logind(tmp_path: Path) -> Iterator[Bus]:
    with mock_logind(tmp_path) as bus:
        yield bus


def start_agent(
    logind: Bus, workdir: Path, kubeconfig: str, node: str, form: str, lock: Path, **extra: Any
) -> AgentProcess:
    # unknown = drain: the host form would drain on a plain SIGTERM, so the pod form's
    # not draining is its own doing.
    plain_kill = extra.pop("plain_kill", "drain")
    shutdown = {"use_logind": True, "unknown": plain_kill, "stop": plain_kill}
    # JSON lines, as the DaemonSet form logs: its milestones are read as data from them.
    config = merged({"": {"log_format": "json"}, "shutdown": shutdown}, extra)
    env = {
        "DBUS_SYSTEM_BUS_ADDRESS": logind.address,
        "NODEAGENT_FORM": form,
        "NODEAGENT_LOCK_FILE": str(lock),
    }
    workdir.mkdir(parents=True, exist_ok=True)
    return AgentProcess.start(workdir, kubeconfig, node, config, env)


@contextlib.contextmanager
def agent_on(
    logind: Bus, tmp_path: Path, kubeconfig: str, node: str, form: str = "pod", **extra: Any
) -> Iterator[AgentProcess]:
    agent = start_agent(
        logind, tmp_path / form, kubeconfig, node, form, tmp_path / "agent.lock", **extra
    )
    try:
        wait_for(lambda: len(our_inhibitors(logind)) == 1, 15)
        yield agent
    finally:
        agent.kill()


def said(agent: AgentProcess, name: str, **fields: str) -> ms.Record | None:
    """The agent's last milestone `name` with these fields, read from its JSON lines."""
    return ms.last(ms.from_lines(agent.output().splitlines()), name, **fields)


def drain_finished(agent: AgentProcess, **fields: str) -> ms.Record | None:
    return said(agent, ms.DRAIN_FINISHED, **fields)


def evictions_blocked(agent: AgentProcess) -> float:
    """Pods whose eviction a PDB refused (each once per drain), from the agent's metrics."""
    return agent.metric("nodeagent_evictions_total", result="blocked")


def preparing(logind: Bus, value: bool) -> None:
    """What logind shows anyone while a shutdown waits on its delay locks."""
    props = {"PreparingForShutdown": ("b", value)}
    mock_call(logind, LOGIND_PATH, "UpdateProperties", "sa{sv}", (LOGIND_IFACE, props))


@pytest.mark.parametrize("form", ["pod", "host"])
def test_sigterm_without_a_shutdown(
    form: str, logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """A rollout, uninstall or eviction SIGTERMs the pod: it exits within its grace and
    nothing is cordoned. The host form, told a plain kill drains, does drain."""
    node = node_with_a_pod(cluster, kube, f"term-{form}")
    with agent_on(logind, tmp_path, admin_kubeconfig, node, form) as agent:
        started = time.monotonic()
        code = agent.stop(signal.SIGTERM, timeout=30)
        took = time.monotonic() - started
    if form == "host":
        assert cordoned(kube, node) and drained(kube, node), agent.output()
        return
    assert code == 0 and took < 10, (code, took, agent.output())
    assert not cordoned(kube, node) and not drained(kube, node), agent.output()
    assert "not a shutdown: no drain" in agent.output()


def test_prepare_for_shutdown_drains_and_releases_the_lock(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    node = node_with_a_pod(cluster, kube, "podprep")
    with agent_on(logind, tmp_path, admin_kubeconfig, node) as agent:
        started = time.monotonic()
        preparing(logind, True)
        emit_prepare(logind, True, "reboot")
        wait_for(lambda: not our_inhibitors(logind), 60)
        released = time.monotonic() - started
        assert cordoned(kube, node) and drained(kube, node), agent.output()
        assert drain_finished(agent, reason="reboot", outcome="drained"), agent.output()
        print(f"PrepareForShutdown(true) to lock release: {released:.2f}s")


@pytest.mark.parametrize("seen", ["signalled", "restarted"])
def test_sigterm_while_preparing_for_shutdown_finishes_the_drain(
    seen: str, logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """The kubelet's graceful shutdown SIGTERMs the agent's pod inside the shutdown: the
    drain completes first. `restarted`: the agent missed the signal (it came while the
    pod was starting over), and asks logind at SIGTERM."""
    node = node_with_a_pod(cluster, kube, f"podterm-{seen[:3]}")
    # A plain kill does not drain here: only logind's word does.
    with agent_on(logind, tmp_path, admin_kubeconfig, node, plain_kill="none") as agent:
        preparing(logind, True)
        if seen == "signalled":
            emit_prepare(logind, True, "poweroff")
            ku.wait_until(lambda: cordoned(kube, node), 15, "the drain under way")
        code = agent.stop(signal.SIGTERM, timeout=60)
        assert code == 0, agent.output()
        assert cordoned(kube, node) and drained(kube, node), agent.output()
        assert drain_finished(agent, reason="poweroff", outcome="drained"), agent.output()


def test_one_agent_per_node(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """A surge rollout: the new pod waits, saying who runs the node, and takes over
    (the logind lock included) when the old one exits; the node is never touched."""
    node = node_with_a_pod(cluster, kube, "surge")
    lock = tmp_path / "agent.lock"
    old = start_agent(logind, tmp_path / "old", admin_kubeconfig, node, "pod", lock)
    new: AgentProcess | None = None
    try:
        wait_for(lambda: len(our_inhibitors(logind)) == 1, 15)
        new = start_agent(logind, tmp_path / "new", admin_kubeconfig, node, "pod", lock)
        old_pid = str(old.proc.pid)
        standing = {"form": "pod", "pid": old_pid}  # the old agent's
        ku.wait_until(lambda: said(new, ms.STANDING_BY, **standing), 15, "the new one waits")
        assert new.healthz()[0] == 200  # alive for the liveness probe while it waits
        time.sleep(2)
        assert len(our_inhibitors(logind)) == 1
        assert old.stop(signal.SIGTERM, timeout=30) == 0
        ku.wait_until(lambda: said(new, ms.TOOK_OVER, **standing), 15, "the take-over")
        wait_for(lambda: len(our_inhibitors(logind)) == 1, 15)
        assert not cordoned(kube, node) and not drained(kube, node)
        # The new agent is the one logind now waits for.
        emit_prepare(logind, True, "reboot")
        wait_for(lambda: not our_inhibitors(logind), 60)
        assert drained(kube, node), new.output()
    finally:
        old.kill()
        if new is not None:
            new.kill()


def test_an_unusable_lock_file_is_one_line(admin_kubeconfig: str, tmp_path: Path) -> None:
    done = ku.run_agent(
        "run", "--node", "n1", "--kubeconfig", admin_kubeconfig,
        env={"NODEAGENT_LOCK_FILE": str(tmp_path / "missing" / "agent.lock"),
             "NODEAGENT_SHUTDOWN_USE_LOGIND": "false", "NODEAGENT_REPORTING_METRICS_ADDRESS": ""},
    )  # fmt: skip
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("No such file or directory (set lock_file, or NODEAGENT_LOCK_FILE)")
    ), done.stderr


def ready_reason(kube: Any, node: str) -> str:
    conds = ku.node(kube, node).get("status", {}).get("conditions") or []
    return next((c["reason"] for c in conds if c["type"] == "NodeAgentReady"), "")


@pytest.mark.parametrize("form", ["pod", "host"])
def test_a_pod_grace_shorter_than_the_deadline_is_reported_at_start(
    form: str, logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    node = node_with_a_pod(cluster, kube, f"grace-{form}")
    short = {"drain": {"deadline": "60s"}, "shutdown": {"termination_grace": "10s"}}
    with agent_on(logind, tmp_path, admin_kubeconfig, node, form, **short) as agent:
        ku.wait_until(lambda: ready_reason(kube, node) != "", 30, "the heartbeat")
        reported = agent.metric("nodeagent_termination_grace_too_short")
        reason = ready_reason(kube, node)
    if form == "host":  # no kubelet stops a systemd unit
        assert (reason, reported) == ("AgentRunning", 0), agent.output()
        return
    assert (reason, reported) == ("TerminationGraceTooShort", 1), agent.output()


def test_the_kubelet_stopping_the_pod_mid_drain_is_reported(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """The kubelet's graceful node shutdown SIGTERMs the agent while a PDB holds its
    drain: condition and metric say so before the kubelet's SIGKILL."""
    group, node, _spare = ku.node_pair(cluster, kube, "midgrace")
    ku.deployment(kube, group, "quorum", group, 2)
    ku.pdb(kube, group, "quorum", {"app": "quorum"}, minAvailable=2)  # never allows
    ku.wait_running(kube, node, 2)
    ku.wait_pdb_ready(kube, group, "quorum")
    config = {"drain": {"deadline": "40s"}, "shutdown": {"termination_grace": "45s"}}
    with agent_on(logind, tmp_path, admin_kubeconfig, node, **config) as agent:
        ku.wait_until(lambda: ready_reason(kube, node) == "AgentRunning", 30, "the heartbeat")
        preparing(logind, True)
        emit_prepare(logind, True, "poweroff")
        ku.wait_until(lambda: evictions_blocked(agent) >= 1, 15, "the drain under way")
        agent.proc.send_signal(signal.SIGTERM)
        ku.wait_until(
            lambda: ready_reason(kube, node) == "TerminationGraceTooShort", 15, "the report"
        )
        assert agent.metric("nodeagent_termination_grace_too_short") == 1
        assert agent.proc.poll() is None  # still draining inside its grace


def test_the_opt_in_logind_dropin_is_written_and_logind_told(
    logind: Bus, cluster: Any, kube: Any, admin_kubeconfig: str, tmp_path: Path
) -> None:
    """shutdown.logind_dropin: the drop-in fits the drain deadline, and systemd is asked
    to SIGHUP logind's main process; a restart with the same file changes nothing."""
    logind.start_mock("systemd", SYSTEMD_NAME)
    mock_call(
        logind, SYSTEMD_PATH, "AddMethod", "sssss", (SYSTEMD_IFACE, "KillUnit", "ssi", "", "")
    )
    node = node_with_a_pod(cluster, kube, "dropin")
    dropin = tmp_path / "logind.conf.d" / "zz-nodeagent.conf"
    dropin.parent.mkdir()
    config = {"drain": {"deadline": "60s"}, "shutdown": {"logind_dropin": str(dropin)}}
    for _restart in range(2):
        with agent_on(logind, tmp_path, admin_kubeconfig, node, **config):
            pass
    assert "InhibitDelayMaxSec=68\n" in dropin.read_text()  # 60 s + 5 s margin + 3 s
    assert oct(dropin.stat().st_mode & 0o777) == "0o644"
    (calls,) = mock_call(logind, SYSTEMD_PATH, "GetMethodCalls", "s", ("KillUnit",))
    sent = [tuple(value for _sig, value in args) for _ts, args in calls]
    assert sent == [("systemd-logind.service", "main", 1)]  # once: the restart wrote nothing
