"""hack/release's decisions (tables) and its bad input: one line, exit 2, nothing built,
pushed or written. The release itself, against a real registry and a real node:
tests/test_release.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import publish
from hack.agentproc import free_port
from hack.publish import ReleaseError, Target

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "packaging" / "helm" / "nodeagent"
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("ghcr.io/you", Target("ghcr.io", "you")),
        ("oci://ghcr.io/you/charts/", Target("ghcr.io", "you/charts")),
        ("127.0.0.1:5000/a/b", Target("127.0.0.1:5000", "a/b")),
        ("localhost:5000", Target("localhost:5000", "")),
        ("[::1]:5000/x", Target("[::1]:5000", "x")),
        ("registry.example.com/team_a/agent", Target("registry.example.com", "team_a/agent")),
    ],
)  # fmt: skip
def test_registry_parsed(text: str, target: Target) -> None:
    assert publish.parse_registry(text) == target


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "--registry is empty"),
        ("  ", "--registry is empty"),
        ("you/nodeagent", "'you' is not a registry host"),
        ("ghcr.io/You", "'You' is not a repository path component"),
        ("ghcr.io/a//b", "'' is not a repository path component"),
        ("ghcr.io:x/a", "is not a registry host"),
    ],
)
def test_registry_rejected(text: str, says: str) -> None:
    with pytest.raises(ReleaseError) as err:
        publish.parse_registry(text)
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:5000", True),
        ("127.1.2.3", True),
        ("localhost:5000", True),
        ("[::1]:5000", True),
        ("10.0.0.1:5000", False),
        ("ghcr.io", False),
        ("localhost.example.com", False),
    ],
)
def test_plain_http_only_on_loopback(host: str, loopback: bool) -> None:
    assert publish.loopback(host) is loopback
    assert Target(host, "p").api.startswith("http://" if loopback else "https://")


def test_names_of_what_is_pushed() -> None:
    target = Target("127.0.0.1:5000", "rel")
    assert target.image == "127.0.0.1:5000/rel/nodeagent"
    assert target.chart == "oci://127.0.0.1:5000/rel/charts"
    assert Target("ghcr.io", "").image == "ghcr.io/nodeagent"


@pytest.mark.parametrize("version", ["0.1.0", "1.2.3-rc.1", "10.0.0-alpha-2"])
def test_version_accepted(version: str) -> None:
    assert publish.check_version(version) == version


@pytest.mark.parametrize("version", ["", "1.0", "v1.0.0", "1.0.0+build.5", "01.0.0", "1.0.0-"])
def test_version_rejected(version: str) -> None:
    with pytest.raises(ReleaseError, match="not a SemVer version"):
        publish.check_version(version)


def index(*refs: str) -> dict[str, Any]:
    entries = [
        {"digest": f"sha256:{i}", "annotations": {publish.REF_NAME: ref}}
        for i, ref in enumerate(refs)
    ]
    return {"schemaVersion": 2, "manifests": entries}


def test_single_index_keeps_the_version_entry_only() -> None:
    kept = publish.single_index(index("0.1.0", "0.1.0-amd64", "0.1.0-arm64"), "0.1.0")
    assert [m["annotations"][publish.REF_NAME] for m in kept["manifests"]] == ["0.1.0"]
    assert kept["schemaVersion"] == 2
    with pytest.raises(ReleaseError, match=r"0 entries named 0\.2\.0"):
        publish.single_index(index("0.1.0"), "0.2.0")


def test_the_chart_is_given_the_release_version_and_image() -> None:
    """On the chart's own files: its version lines and its image block, comments kept."""
    meta = yaml.safe_load(publish.chart_yaml((CHART / "Chart.yaml").read_text(), "0.2.0-rc.1"))
    assert (meta["version"], meta["appVersion"]) == ("0.2.0-rc.1", "0.2.0-rc.1")
    text = (CHART / "values.yaml").read_text()
    values = publish.chart_values(text, "ghcr.io/you/nodeagent", DIGEST)
    image = yaml.safe_load(values)["image"]
    assert image["repository"] == "ghcr.io/you/nodeagent" and image["digest"] == DIGEST
    assert values.count("\n#") == text.count("\n#")
    with pytest.raises(ReleaseError, match=r"image\.repository"):
        publish.chart_values(values, "again", DIGEST)


def test_the_source_chart_names_no_image() -> None:
    """No default any node could fail to pull: the chart's templates require one."""
    image = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    assert image["repository"] == "" and image["digest"] == ""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(image) == set(schema["properties"]["image"]["properties"])


def release(*args: str, dist: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(ROOT / "hack" / "release"), "--dist", str(dist), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "the following arguments are required: --registry"),
        (("--registry",), "argument --registry: expected one argument"),
        (("--registry", ""), "--registry is empty"),
        (("--registry=",), "--registry is empty"),
        (("--registry", "nodeagent"), "'nodeagent' is not a registry host"),
        (("--registry", "127.0.0.1:5000/x", "--version", ""), "--version '' is not a SemVer"),
        (("--registry", "127.0.0.1:5000/x", "--set", "hostPID"), "'hostPID' is not KEY=VALUE"),
        (("--registry", "127.0.0.1:{closed}/x",), "registry 127.0.0.1:{closed} unreachable at"),
        (("--registry", "release-test.invalid/x",), "registry release-test.invalid unreachable"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(args: tuple[str, ...], says: str, tmp_path: Path) -> None:
    closed = str(free_port())  # nothing listens there once the probe socket is closed
    dist = tmp_path / "dist"
    done = release(*[a.format(closed=closed) for a in args], dist=dist)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("hack/release: ") and says.format(closed=closed) in line, line
    assert not dist.exists()
