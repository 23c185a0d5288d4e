"""The program's entry point.

`nodeagent run` the way systemd and the DaemonSet start it (`run` and the options every
command shares, nothing else) goes straight to the daemon: click, and what it imports (uuid,
platform, gettext, locale), would cost every agent 1.4 MB of resident memory, on every node,
for parsing one command line once. Anything else, `run --help` or a mistyped option
included, goes to the click CLI in nodeagent/cli.py, which parses, explains and refuses as
it always has; tests/test_launch.py checks that both read every accepted command line alike.
What both ways share is in nodeagent/agent/command.py.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from nodeagent.agent.command import handle_errors, run_daemon

# `run`'s options that take a value (nodeagent/cli.py: common_options), by parameter name.
VALUE_OPTIONS = {
    "--kubeconfig": "kubeconfig",
    "--node": "node",
    "--config": "config_file",
    "--log-format": "log_format",
}
LOG_FORMATS = ("text", "json")
_VERBOSE = re.compile(r"-v+")


def daemon_params(argv: list[str]) -> dict[str, Any] | None:
    """`run`'s parameters as click would parse `argv`, when it is `run` with only the shared
    options and values click would take as they are; None for anything else."""
    if not argv or argv[0] != "run":
        return None
    params: dict[str, Any] = {name: None for name in VALUE_OPTIONS.values()}
    params["verbose"] = 0
    args = argv[1:]
    while args:
        arg = args.pop(0)
        if arg == "--verbose" or _VERBOSE.fullmatch(arg):
            params["verbose"] += 1 if arg == "--verbose" else len(arg) - 1
            continue
        flag, eq, value = arg.partition("=")
        if flag not in VALUE_OPTIONS:
            return None
        if not eq:
            if not args:
                return None
            value = args.pop(0)
        if not _plain_value(flag, value):
            return None
        params[VALUE_OPTIONS[flag]] = value
    return params


def _plain_value(flag: str, value: str) -> bool:
    """A value click takes unchanged (anything else: click says what is wrong with it)."""
    if not value or value.startswith("-"):
        return False
    if flag == "--log-format":
        return value in LOG_FORMATS
    if flag == "--config":
        return not os.path.isdir(value)  # click.Path(dir_okay=False)
    return True


def main() -> None:
    params = daemon_params(sys.argv[1:])
    if params is None:
        from nodeagent.cli import main as cli

        cli()
        return
    handle_errors(run_daemon)(params)
