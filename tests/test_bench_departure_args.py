"""bench/departure.py's list-valued options (--only, --configs) on a bad command line: one
line naming the option, exit 2, no traceback, and nothing started (no work directory, no
cluster). Run as its users run it (tests do not import bench/); the command line is read
before the machine's needs, so this holds on any machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
USAGE = 2


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The bench with an empty PATH: a command line it wrongly accepts then stops at its
    preflight (exit 69, no tool found) instead of starting a cluster and real nodes."""
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "departure.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
        env={**os.environ, "PATH": ""},
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--configs", "none,"], "--configs 'none,': an empty config name"),  # trailing comma
        (["--configs", ""], "--configs '': an empty config name"),  # explicitly nothing
        (["--only", "poweroff,,evacuate"], "--only 'poweroff,,evacuate': an empty kind name"),
        (["--only", " , "], "an empty kind name"),  # blanks only
        (["--only", "poweroff,bogus"], "--only: unknown kind bogus; known: poweroff,"),
        (["--configs", "none,nope"], "--configs: unknown config nope; known: none,"),
    ],
)
def test_a_bad_list_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    out = run(*args)
    assert out.returncode == USAGE, out
    assert out.stdout == ""  # nothing started: no "work files in ..."
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]
