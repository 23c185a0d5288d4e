"""The Kubernetes releases the harness can run: each one's wrapper module, the API server's
and the kubelet's picked apart, and hack/matrix's pairs."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from hack import k8sversion as kv
from hack.versionmatrix.cli import default_pairs, parse_pair
from hack.versionmatrix.suites import Pair

REPO = Path(__file__).resolve().parent.parent


def _requires(gomod: Path) -> str:
    return next(
        line.split()[2]
        for line in gomod.read_text().splitlines()
        if line.startswith("require k8s.io/kubernetes ")
    )


@pytest.mark.parametrize("version", kv.available())
def test_each_release_maps_every_staging_module_to_its_own_tag(version: str) -> None:
    gomod = kv.module_dir(version) / "go.mod"
    assert _requires(gomod) == version
    replaced = re.findall(r"^\s+(k8s\.io/\S+) => \1 (v\S+)$", gomod.read_text(), re.M)
    assert len(replaced) >= 31, replaced  # 1.34 and 1.35 have 31 staging modules, 1.37 33
    assert {tag for _, tag in replaced} == {"v0." + version.removeprefix("v1.")}
    assert (gomod.parent / "go.sum").stat().st_size > 0


def test_the_oldest_and_newest_releases_are_buildable() -> None:
    assert {"v1.34.4", "v1.35.4", "v1.37.2"} <= set(kv.available())
    assert kv.default_version() == _requires(REPO / "hack" / "go" / "k8s" / "go.mod")


def test_unset_both_are_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kv.API_ENV, raising=False)
    monkeypatch.delenv(kv.KUBELET_ENV, raising=False)
    assert kv.api_version() == kv.kubelet_version() == kv.default_version()


def test_the_kubelet_follows_the_api_server_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kv.API_ENV, "1.37.2")
    monkeypatch.delenv(kv.KUBELET_ENV, raising=False)
    assert kv.kubelet_version() == "v1.37.2"
    monkeypatch.setenv(kv.KUBELET_ENV, "v1.34.4")
    assert (kv.api_version(), kv.kubelet_version()) == ("v1.37.2", "v1.34.4")


@pytest.mark.parametrize(
    ("version", "said"),
    [("1.33.1", "hack/go/new-k8s-wrapper.sh v1.33.1"), ("latest", "not a Kubernetes release")],
)
def test_an_unknown_release_is_one_line(version: str, said: str) -> None:
    with pytest.raises(kv.VersionError, match=said):
        kv.known(version)


def test_a_build_script_refuses_a_release_without_a_module() -> None:
    env = {"PATH": "/usr/bin:/bin", "NODEAGENT_KUBELET_VERSION": "1.33.1"}
    out = subprocess.run(
        [str(REPO / "hack" / "build-kubelet.sh")], env=env, capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "hack/go/k8s-v1.33.1" in out.stderr, out.stderr


def test_matrix_pairs() -> None:
    assert parse_pair("1.37.2/v1.34.4") == Pair("v1.37.2", "v1.34.4")
    with pytest.raises(argparse.ArgumentTypeError, match="API/KUBELET"):
        parse_pair("1.37.2")
    newest, oldest, usual = kv.available()[-1], kv.available()[0], kv.default_version()
    reference = [] if usual in (newest, oldest) else [Pair(usual, usual)]
    assert default_pairs() == [
        Pair(newest, newest),
        Pair(newest, oldest),
        Pair(oldest, oldest),
        *reference,
    ]
