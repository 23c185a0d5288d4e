"""dist/SHA256SUMS as the build commands leave it: `sha256sum -c` passes on every artifact
in dist/ and it lists each of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
BUILDS = {"build-deb": 1200, "build-image": 1800, "build-ignition": 900}


def test_sha256sums_check_after_the_builds() -> None:
    for script, timeout in BUILDS.items():
        done = subprocess.run(
            [str(ROOT / "hack" / script)], capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, done.stderr[-3000:]
    checked = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=DIST,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = {line.rsplit(": ", 1)[0] for line in checked.stdout.splitlines()}
    found = {
        str(p.relative_to(DIST))
        for pattern in ("*.deb", "*.oci.tar", "*.docker.tar", "ignition/*.ign", "*.tgz")
        for p in DIST.glob(pattern)
    }
    assert {n for n in found if n.endswith(".deb")}, sorted(found)
    assert {n for n in found if n.startswith("ignition/")}, sorted(found)
    assert listed == found
