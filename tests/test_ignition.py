"""The Ignition configs in ignition/, checked with the tools their users run.

``hack/build-ignition`` compiles the Butane sources with ``butane --strict`` and checks them with
``ignition-validate`` (both built from the Go module proxy). Here: both tools stay silent, no
file or unit lands under /usr (read-only on Flatcar and Fedora CoreOS), every plain unit the
configs write passes ``systemd-analyze verify``, and podman's Quadlet generator turns the
``.container`` file into a unit that does too.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from hack.deb import hack
from nodeagent.agent.logs import JOURNAL_SOCKET
from tests.test_units import HOST_UNITS, parse_unit, systemd_analyze

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted((REPO / "ignition").glob("*.bu"))
QUADLET_DIR = "/etc/containers/systemd/"
UNIT_DIR = "/etc/systemd/system/"
SCOPES = ("cri-containerd", "crio", "docker")  # each runtime's container scopes


@pytest.fixture(scope="module")
def built() -> Path:
    return hack("build-ignition", 900)[-1]


@pytest.fixture(scope="module")
def tools(built: Path) -> Path:
    return Path((built / ".tools").read_text().strip())


def config(built: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((built / f"{name}.ign").read_text()))


def contents(entry: dict[str, Any]) -> str:
    """The text of a storage.files entry (a data: URL, maybe gzip-compressed)."""
    source = entry["contents"]["source"]
    header, _, data = source.partition(",")
    if header.endswith(";base64"):
        raw = base64.b64decode(data)
    else:
        raw = urllib.parse.unquote_to_bytes(data)
    if entry["contents"].get("compression") == "gzip":
        raw = gzip.decompress(raw)
    return raw.decode()


def files(built: Path, name: str) -> dict[str, str]:
    return {f["path"]: contents(f) for f in config(built, name)["storage"].get("files", [])}


def test_both_variants_are_built() -> None:
    assert [p.stem for p in SOURCES] == ["fcos", "flatcar"]
    variants = {p.stem: p.read_text() for p in SOURCES}
    assert "variant: flatcar\nversion: 1.1.0" in variants["flatcar"]
    assert "variant: fcos\nversion: 1.6.0" in variants["fcos"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_butane_strict_and_ignition_validate_say_nothing(
    tools: Path, source: Path, tmp_path: Path
) -> None:
    out = tmp_path / f"{source.stem}.ign"
    butane = subprocess.run(
        [tools / "butane", "--strict", "--files-dir", REPO, "--output", out, source],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (butane.returncode, butane.stdout, butane.stderr) == (0, "", "")
    validate = subprocess.run(
        [tools / "ignition-validate", out], capture_output=True, text=True, timeout=60, check=False
    )
    assert (validate.returncode, validate.stdout, validate.stderr) == (0, "", "")


def test_butane_strict_reports_a_mistake(tools: Path, tmp_path: Path) -> None:
    # Proves the silence above means something: a misspelt key is reported and fails.
    bad = tmp_path / "bad.bu"
    bad.write_text((REPO / "ignition" / "flatcar.bu").read_text().replace("mode:", "mdoe:", 1))
    out = subprocess.run(
        [tools / "butane", "--strict", "--files-dir", REPO, bad],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0 and "mdoe" in out.stderr


@pytest.mark.parametrize("name", ["flatcar", "fcos"])
def test_nothing_under_usr(built: Path, name: str) -> None:
    ign = config(built, name)
    storage = ign.get("storage", {})
    paths = [e["path"] for kind in ("files", "directories", "links") for e in storage.get(kind, [])]
    assert paths
    assert [p for p in paths if p == "/usr" or p.startswith("/usr/")] == []
    # Ignition writes units and their drop-ins under /etc/systemd/system.
    for unit in ign.get("systemd", {}).get("units", []):
        assert "/" not in unit["name"]


def stub(root: Path, *paths: str) -> None:
    for path in paths:
        binary = root / path.lstrip("/")
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("#!/bin/sh\nexit 0\n")
        binary.chmod(0o755)


# Units of the target OS that Debian lacks, as stand-ins for verify.
OS_UNITS = {"docker.service": "[Service]\nExecStart=/usr/bin/dockerd\n"}


def verify(tmp_path: Path, units: dict[str, str], *binaries: str) -> None:
    """``systemd-analyze verify`` each unit in a throwaway root with the host's units."""
    root = tmp_path / "root"
    shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for name, text in {**OS_UNITS, **units}.items():
        (root / "etc/systemd/system" / name).write_text(text)
    stub(root, "/usr/bin/dockerd", *binaries)
    for name in units:
        out = systemd_analyze("verify", f"--root={root}", f"/etc/systemd/system/{name}")
        assert (out.returncode, out.stderr) == (0, ""), f"{name}: {out.stdout}{out.stderr}"


@pytest.mark.parametrize("name", ["flatcar", "fcos"])
def test_plain_units_pass_systemd_analyze_verify(built: Path, name: str, tmp_path: Path) -> None:
    units = {
        path.removeprefix(UNIT_DIR): text
        for path, text in files(built, name).items()
        if path.startswith(UNIT_DIR) and "/" not in path.removeprefix(UNIT_DIR)
    }
    if name == "flatcar":
        assert sorted(units) == ["nodeagent-image.service", "nodeagent.service"]
        # verify looks for the agent's command on the host, not in its RootDirectory (the
        # image's root, where tests/test_image.py runs this same unit).
        service = parse_unit_text(units["nodeagent.service"], tmp_path)["Service"]
        assert service["RootDirectory"] == ["/var/lib/nodeagent-image/rootfs"]
        verify(tmp_path, units, "/opt/nodeagent/unpack-image", "/usr/bin/nodeagent")
    else:
        assert units == {}  # Fedora CoreOS gets its unit from Quadlet, below


@pytest.mark.parametrize("name", ["flatcar", "fcos"])
def test_container_scopes_stop_after_the_agent(built: Path, name: str) -> None:
    """Each runtime's container scopes get the shipped drop-in, under /etc."""
    shipped = (REPO / "systemd" / "pod-scope-nodeagent.conf").read_text()
    dropins = {
        p: t for p, t in files(built, name).items() if p.endswith(".scope.d/50-nodeagent.conf")
    }
    assert sorted(dropins) == [f"{UNIT_DIR}{rt}-.scope.d/50-nodeagent.conf" for rt in SCOPES]
    assert set(dropins.values()) == {shipped}


def parse_unit_text(text: str, tmp_path: Path) -> dict[str, dict[str, list[str]]]:
    path = tmp_path / "parsed.unit"
    path.write_text(text)
    return parse_unit(path)


def quadlet_unit(built: Path, tools: Path, tmp_path: Path) -> str:
    """The nodeagent.service podman's Quadlet generator makes of the FCOS config's file."""
    quadlets = {
        path.removeprefix(QUADLET_DIR): text
        for path, text in files(built, "fcos").items()
        if path.startswith(QUADLET_DIR)
    }
    assert list(quadlets) == ["nodeagent.container"]
    source = tmp_path / "quadlet"
    source.mkdir()
    (source / "nodeagent.container").write_text(quadlets["nodeagent.container"])
    out = subprocess.run(
        [tools / "quadlet", "-dryrun"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "QUADLET_UNIT_DIRS": str(source)},
    )
    assert out.returncode == 0, out.stderr
    assert "---nodeagent.service---" in out.stdout, out.stdout + out.stderr
    return out.stdout.split("---nodeagent.service---", 1)[1]


def test_quadlet_generates_a_unit_that_verifies(built: Path, tools: Path, tmp_path: Path) -> None:
    unit = quadlet_unit(built, tools, tmp_path)
    service = parse_unit_text(unit, tmp_path)["Service"]
    assert service["Type"] == ["notify"]
    start = service["ExecStart"][-1]
    for arg in (
        "--network host",
        "--pid=host",
        "--sdnotify=container",
        "--stop-timeout 140",
        "label=type:spc_t",
        "-v /run/dbus:/run/dbus ",
        "-v /etc/nodeagent:/etc/nodeagent:ro",
        "-v /var/lib/nodeagent:/var/lib/nodeagent",
    ):
        assert arg in start, (arg, start)
    verify(tmp_path, {"nodeagent.service": unit}, "/usr/bin/podman", "/usr/bin/mkdir")


def test_both_image_forms_log_to_journald_with_fields(
    built: Path, tools: Path, tmp_path: Path
) -> None:
    """The agent sends its records to journald's socket when its stderr is the unit's
    journal stream ($JOURNAL_STREAM, nodeagent/agent/logs.py): without that, the milestones'
    NODEAGENT_* fields never reach the journal. tests/test_image.py reads them from a
    running Flatcar unit; podman does not run here, so the quadlet's podman run is read."""
    flatcar = parse_unit_text(files(built, "flatcar")[f"{UNIT_DIR}nodeagent.service"], tmp_path)
    binds = " ".join(flatcar["Service"].get("BindReadOnlyPaths", [])).split()
    assert JOURNAL_SOCKET in binds  # stdio and $JOURNAL_STREAM are the unit's own there

    start = parse_unit_text(quadlet_unit(built, tools, tmp_path), tmp_path)["Service"]
    args = start["ExecStart"][-1].split()
    # conmon's default log driver gives the container a pipe and writes plain lines.
    assert "--log-driver" in args and args[args.index("--log-driver") + 1] == "passthrough"
    # The variable from podman's environment (no value), where systemd set it.
    assert "--env=JOURNAL_STREAM" in args, args
    mounts = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
    assert f"{JOURNAL_SOCKET}:{JOURNAL_SOCKET}:ro" in mounts, mounts
