"""hack/sha256sums on a directory of its own: what it covers, and that a changed artifact is
caught by `sha256sum -c` until the sums are written again."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ["a_1_amd64.deb", "a_1.oci.tar", "a_1.docker.tar", "ignition/n.ign", "c-1.tgz"]
NOT_ARTIFACTS = ["a_1_amd64.deb.key", "wheelhouse/w.whl", "ignition/.tools", "ignition/n.log"]


def sums(dist: Path) -> dict[str, str]:
    subprocess.run([str(ROOT / "hack" / "sha256sums"), str(dist)], check=True, timeout=60)
    lines = (dist / "SHA256SUMS").read_text().splitlines()
    return {line[66:]: line[:64] for line in lines}


def check(dist: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=dist,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sums_cover_the_artifacts_and_follow_their_changes(tmp_path: Path) -> None:
    for name in ARTIFACTS + NOT_ARTIFACTS:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    first = sums(tmp_path)
    assert sorted(first) == sorted(ARTIFACTS)
    assert check(tmp_path).returncode == 0

    (tmp_path / "a_1.oci.tar").write_text("rebuilt")
    failed = check(tmp_path)
    assert failed.returncode == 1 and "a_1.oci.tar: FAILED" in failed.stdout, failed.stdout
    second = sums(tmp_path)
    assert second["a_1.oci.tar"] != first["a_1.oci.tar"]
    assert check(tmp_path).returncode == 0

    (tmp_path / "c-1.tgz").unlink()
    assert sorted(sums(tmp_path)) == sorted(set(ARTIFACTS) - {"c-1.tgz"})
    assert check(tmp_path).returncode == 0
