"""The entry point (nodeagent/agent/launch.py): `nodeagent run` with the shared options goes
to the daemon without click, read exactly as click reads it; anything else goes to click."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.launch import daemon_params
from nodeagent.cli import run as run_command

REPO = Path(__file__).resolve().parent.parent

ACCEPTED = [
    ["run"],
    ["run", "--config", "/etc/nodeagent/config.toml"],  # the units' and the chart's
    ["run", "--config=/etc/x.toml", "-vv", "--log-format", "json"],
    ["run", "-v", "--verbose", "-v", "--node", "n1", "--kubeconfig", "/k"],
    ["run", "--log-format=text", "-vvv"],
    ["run", "--node", "a", "--node", "b"],  # the last one wins
    ["run", "--node=a=b"],
]
TO_CLICK = [
    [],
    ["--version"],
    ["drain", "--config", "/etc/x.toml"],
    ["run", "--help"],
    ["run", "-h"],
    ["run", "--config"],  # no value
    ["run", "--log-format", "xml"],  # not a choice
    ["run", "--config", "/tmp"],  # a directory
    ["run", "extra"],
    ["run", "--node", "-v"],
    ["run", "--node", ""],
    ["run", "--dry-run"],
    ["run", "-x"],
    ["run", "--"],
    ["run", "-vx"],
]


def clicks(argv: list[str]) -> dict[str, Any]:
    ctx = run_command.make_context("run", list(argv[1:]))
    return dict(ctx.params)


@pytest.mark.parametrize("argv", ACCEPTED, ids=" ".join)
def test_accepted_command_lines_read_as_click_reads_them(argv: list[str]) -> None:
    assert daemon_params(argv) == clicks(argv)


@pytest.mark.parametrize("argv", TO_CLICK, ids=" ".join)
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert daemon_params(argv) is None


CLICK_ONLY = "import sys; from nodeagent.cli import main; main()"


@pytest.mark.parametrize(
    "args",
    [
        ["--config", "/nonexistent/config.toml"],
        ["--log-format", "json", "--node", "bad_name!"],
    ],
)
def test_both_ways_fail_alike(args: list[str]) -> None:
    """The same error line and exit code whether click parsed the command line or not."""
    fast = subprocess.run(
        [sys.executable, "-m", "nodeagent", "run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    slow = subprocess.run(
        [sys.executable, "-c", CLICK_ONLY, "run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert fast.returncode == slow.returncode == 2, (fast, slow)
    assert fast.stderr == slow.stderr and fast.stderr.count("\n") == 1, (fast, slow)
