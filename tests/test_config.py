"""Configuration: precedence, validation, and one-line errors that touch nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from nodeagent.config import ConfigError, load, parse_duration
from nodeagent.kube.client import Kube


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("2m", 120.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("1.5s", 1.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "2x", "s", "1m 30s", "-1s", "1s2"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration(text)


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    cfg_file = ku.write(
        tmp_path / "c.toml",
        '[drain]\ndeadline = "30s"\nconcurrency = 4\n[shutdown]\nreboot = "cordon"\n',
    )
    env = {"NODEAGENT_DRAIN_DEADLINE": "45s", "NODE_NAME": "from-env"}
    cfg = load(str(cfg_file), env)
    assert (cfg.drain.deadline, cfg.drain.concurrency, cfg.shutdown.reboot) == (45, 4, "cordon")
    assert cfg.node_name == "from-env"
    cfg = load(str(cfg_file), env, {"drain.deadline": "1m", "node": "flag"})
    assert (cfg.drain.deadline, cfg.node_name) == (60, "flag")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[drain]\ndeadlin = "3s"\n', "drain.deadlin: unknown key"),
        ("bogus = 1\n", "bogus: unknown key"),
        ('[drain]\ndeadline = "3x"\n', "drain.deadline: bad duration '3x'"),
        ("[drain]\ndeadline = 3\n", "drain.deadline: bad duration 3"),
        (
            '[shutdown]\nreboot = "drian"\n',
            "shutdown.reboot: bad value 'drian' (one of: drain, cordon",
        ),
        ("[drain]\nconcurrency = 0\n", "drain.concurrency: must be at least 1"),
        ('[drain]\nforce_after_deadline = "yes"\n', "drain.force_after_deadline: expected true"),
        ("drain = 3\n", "drain: expected a table"),
        ("[drain\n", "config file"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + __import__("re").escape(message)):
        load(str(ku.write(tmp_path / "c.toml", toml)), {})


def test_bad_env_value_names_the_variable_key() -> None:
    with pytest.raises(ConfigError, match=r"^NODEAGENT_DRAIN_DEADLINE: bad duration"):
        load(None, {"NODEAGENT_DRAIN_DEADLINE": "soon"})


@pytest.mark.parametrize("toml", ['[drain]\ndeadline = "3x"\n', "[nope]\n", 'log_format = "xml"\n'])
def test_cli_rejects_bad_config_and_touches_nothing(
    toml: str, tmp_path: Path, cluster: Any, kube: Kube, admin_kubeconfig: str
) -> None:
    name = ku.unique("cfg")
    cluster.add_node(name, {})
    rv = ku.node(kube, name)["spec"]
    res = ku.run_agent(
        "drain",
        "--node",
        name,
        "--kubeconfig",
        admin_kubeconfig,
        "--config",
        str(ku.write(tmp_path / "c.toml", toml)),
    )
    assert res.returncode == 2
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("nodeagent: error: ")
    node = ku.node(kube, name)
    assert node["spec"] == rv
    assert not any(k.startswith("nodeagent.io/") for k in node["metadata"].get("annotations", {}))


def test_cli_rejects_bad_flag_duration() -> None:
    res = ku.run_agent("drain", "--node", "x", "--deadline", "soon")
    assert res.returncode == 2
    assert res.stderr == (
        "nodeagent: error: --deadline: bad duration 'soon' (use e.g. 90s, 2m, 1m30s, 500ms)\n"
    )


def test_version_and_help() -> None:
    assert ku.run_agent("version").stdout.startswith("nodeagent ")
    out = ku.run_agent("--help").stdout
    for command in ("drain", "uncordon", "version"):
        assert command in out


@pytest.mark.parametrize(
    ("rejection", "message"),
    [
        ('state_roots = ["relative"]', "state root 'relative' ignored: must be absolute"),
        (
            'state_roots = ["/var/lib/app"]\nstate_paths = ["/var/lib/app/{podname}"]',
            "unknown placeholder {podname}",
        ),
        (
            'state_roots = ["/var/lib/app"]\nstate_paths = ["/etc/{uid}"]',
            "not beneath a state root",
        ),
        ('hooks = ["/bin/release {pod}"]', "unknown placeholder {pod}"),
    ],
)
@pytest.mark.parametrize("command", ["run", "wipe"])
def test_bad_rejection_paths_fail_at_start(
    rejection: str, message: str, command: str, tmp_path: Path, admin_kubeconfig: str
) -> None:
    cfg = ku.write(tmp_path / "c.toml", f"[rejection]\n{rejection}\n")
    extra = ["--pod", "default/x"] if command == "wipe" else []
    res = ku.run_agent(
        command, "--node", "n", "--kubeconfig", admin_kubeconfig, "--config", str(cfg), *extra
    )
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("nodeagent: error: rejection: ") and message in res.stderr
