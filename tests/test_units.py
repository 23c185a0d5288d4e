"""The shipped systemd files, checked by systemd's own tools.

`systemd-analyze` works without systemd running as PID 1 (as on a build container), so these
run everywhere the tests run. `verify` checks a unit inside a throwaway root: it needs the
ExecStart binary to exist and the units pulled in by default dependencies, which the real
/usr/bin/nodeagent and the host's unit directory would otherwise have to provide.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeagent.config import DrainConfig
from nodeagent.host.logindconf import required_delay

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "systemd" / "nodeagent.service"
LOGIND_DROPIN = REPO / "systemd" / "logind-nodeagent.conf"
SCOPE_DROPIN = REPO / "systemd" / "pod-scope-nodeagent.conf"
HOST_UNITS = Path("/usr/lib/systemd/system")
MAX_EXPOSURE = 2.0
VENDOR_LOGIND_DROPINS = ("99-kubelet.conf", "unattended-upgrades-logind-maxdelay.conf")


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Read a unit file into {section: {key: [values in order]}} (keys repeat in units)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def words(section: dict[str, list[str]], key: str) -> list[str]:
    return [w for value in section.get(key, []) for w in value.split()]


def systemd_analyze(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is needed (apt-get install systemd)"
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    """A root holding the host's units, our unit and a stand-in /usr/bin/nodeagent."""
    root = tmp_path / "root"
    shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system/nodeagent.service")
    binary = root / "usr/bin/nodeagent"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    return root


def test_systemd_analyze_verify_is_silent(fake_root: Path) -> None:
    result = systemd_analyze(
        "verify", f"--root={fake_root}", "/etc/systemd/system/nodeagent.service"
    )
    assert result.stderr == ""
    assert result.returncode == 0, result.stdout


def test_verify_catches_a_broken_unit(fake_root: Path) -> None:
    # Proves the test above can fail: a misspelt key is reported on stderr.
    unit = fake_root / "etc/systemd/system/nodeagent.service"
    unit.write_text(unit.read_text().replace("KillMode=", "KilMode="))
    result = systemd_analyze(
        "verify", f"--root={fake_root}", "/etc/systemd/system/nodeagent.service"
    )
    assert "KilMode" in result.stderr


def exposure(unit: Path) -> float:
    result = systemd_analyze("security", "--offline=true", "--no-pager", str(unit))
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert match, f"no exposure level in:\n{result.stdout}\n{result.stderr}"
    return float(match.group(1))


def test_security_exposure_is_low() -> None:
    assert exposure(UNIT) <= MAX_EXPOSURE


def test_security_exposure_is_measured(tmp_path: Path) -> None:
    # Proves the threshold bites: the same unit without its sandbox scores far worse.
    bare = tmp_path / "nodeagent.service"
    sections = parse_unit(UNIT)
    bare.write_text(
        "[Unit]\nDescription=x\n[Service]\n"
        + "".join(f"{k}={v}\n" for k in ("Type", "ExecStart") for v in sections["Service"][k])
    )
    assert exposure(bare) > MAX_EXPOSURE


def test_ordering_and_dependencies() -> None:
    unit = parse_unit(UNIT)["Unit"]
    after = words(unit, "After")
    for dep in (
        "kubelet.service",
        "containerd.service",
        "crio.service",
        "docker.service",
        "network-online.target",
        "dbus.service",
        "systemd-logind.service",
    ):
        assert dep in after
    assert words(unit, "Wants") == ["network-online.target"]
    # A kubelet or runtime restart must never stop (and so drain) the agent.
    for key in ("Requires", "BindsTo", "PartOf", "Requisite"):
        assert key not in unit
    assert unit.get("DefaultDependencies", ["yes"]) == ["yes"]


def test_service_lifecycle() -> None:
    service = parse_unit(UNIT)["Service"]
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["ExecStart"] == ["/usr/bin/nodeagent run --config /etc/nodeagent/config.toml"]
    assert service["KillMode"] == ["mixed"]
    assert service["Restart"] == ["on-failure"]
    # A bad configuration (exit 2) stops the unit; a missing right (exit 1) is retried.
    assert words(service, "RestartPreventExitStatus") == ["2"]
    assert service["EnvironmentFile"] == ["-/etc/nodeagent/env"]
    assert "WatchdogSec" in service
    # systemd must not kill a drain that is within its deadline.
    assert float(service["TimeoutStopSec"][0]) > DrainConfig().deadline
    assert parse_unit(UNIT)["Install"]["WantedBy"] == ["multi-user.target"]


def test_capabilities_are_the_documented_few() -> None:
    service = parse_unit(UNIT)["Service"]
    caps = set(words(service, "CapabilityBoundingSet"))
    assert caps == {"CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_FOWNER"}
    assert words(service, "AmbientCapabilities") == []


def test_logind_dropin_covers_the_drain_and_sorts_last() -> None:
    text = LOGIND_DROPIN.read_text()
    installed = re.search(r"/usr/lib/systemd/logind\.conf\.d/(\S+\.conf)", text)
    assert installed, "the drop-in should say where it is installed"
    name = installed.group(1)
    # logind applies drop-ins in file-name order (bytes) across directories: later wins. These
    # also set InhibitDelayMaxSec: the kubelet's, and Debian 12's unattended-upgrades (30 s).
    for other in VENDOR_LOGIND_DROPINS:
        assert name.encode() > other.encode(), other
    login = parse_unit(LOGIND_DROPIN)["Login"]
    # The whole default deadline, with the margins the agent keeps back from logind's delay.
    assert float(login["InhibitDelayMaxSec"][-1]) >= required_delay(DrainConfig().deadline)


def test_wipe_dropin_adds_only_ptrace_and_is_measured(tmp_path: Path) -> None:
    dropin = REPO / "systemd" / "optional" / "wipe-stops-holders.conf"
    added = parse_unit(dropin)["Service"]
    assert set(added) == {"CapabilityBoundingSet"}
    assert words(added, "CapabilityBoundingSet") == ["CAP_SYS_PTRACE"]
    # Installed as a drop-in beside the unit (offline analysis reads it from there too).
    (tmp_path / "nodeagent.service").write_text(UNIT.read_text())
    (tmp_path / "nodeagent.service.d").mkdir()
    (tmp_path / "nodeagent.service.d" / dropin.name).write_text(dropin.read_text())
    assert exposure(UNIT) < exposure(tmp_path / "nodeagent.service") <= 2.2


def test_container_scopes_are_ordered_before_the_agent_and_nothing_else() -> None:
    """Stop order is the reverse of start order: a scope Before= the agent stops after it.
    Only an ordering: no dependency that would pull the agent in or stop a scope with it."""
    unit = parse_unit(SCOPE_DROPIN)
    assert unit == {"Unit": {"Before": ["nodeagent.service"]}}
