"""Typed configuration: defaults, then a TOML file, then NODEAGENT_* env, then flags.

Every value is validated where it enters; a bad one raises ConfigError naming the
key (`drain.deadline: bad duration '2x' ...`), before anything is touched.

Env names are NODEAGENT_<SECTION>_<KEY> (NODEAGENT_DRAIN_DEADLINE=90s) or
NODEAGENT_<KEY> for top-level keys (NODEAGENT_NODE).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POLICIES = ("drain", "cordon", "none")
LOG_FORMATS = ("text", "json")
EVACUATE_POLICIES = ("Ignore", "NoSchedule", "Evacuate")

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or malformed."""


def parse_duration(text: str) -> float:
    """'90s', '2m', '1m30s', '500ms', '1h' -> seconds. Raises ValueError."""
    text = text.strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ValueError(f"bad duration {text!r} (use e.g. 90s, 2m, 1m30s, 500ms)")
    return total


def duration(default: str) -> Any:
    return field(default=parse_duration(default), metadata={"type": "duration"})


def choice(default: str, choices: tuple[str, ...]) -> Any:
    return field(default=default, metadata={"choices": choices})


@dataclass
class DrainConfig:
    deadline: float = duration("120s")
    do_not_disrupt_ceiling: float = duration("60s")
    force_after_deadline: bool = False
    concurrency: int = 32


@dataclass
class ShutdownConfig:
    """What to do per reason for stopping: drain | cordon | none."""

    poweroff: str = choice("drain", POLICIES)
    reboot: str = choice("drain", POLICIES)
    halt: str = choice("drain", POLICIES)
    kexec: str = choice("drain", POLICIES)
    soft_reboot: str = choice("drain", POLICIES)
    stop: str = choice("drain", POLICIES)
    restart: str = choice("none", POLICIES)
    unknown: str = choice("none", POLICIES)
    # The kubelet kills what is left anyway when the node goes down; deleting it
    # with the remaining grace lets it stop cleanly instead.
    force_after_deadline: bool = True
    use_logind: bool = True


@dataclass
class UncordonConfig:
    settle: float = duration("10s")
    ready_timeout: float = duration("10m")
    wait_for_daemonsets: list[str] = field(default_factory=list)  # "namespace/name"


@dataclass
class EvacuateConfig:
    taints: list[str] = field(default_factory=lambda: ["nodeagent.io/evacuate"])
    policy: str = choice("Evacuate", EVACUATE_POLICIES)


@dataclass
class RejectionConfig:
    """Pods the kubelet rejected at admission: wipe their node-local state, maybe re-create."""

    enabled: bool = True
    # Directories the wipe may touch; a path that resolves outside them is refused.
    state_roots: list[str] = field(default_factory=list)
    # Per-pod paths under the roots, templates over {uid}, {namespace}, {name}.
    state_paths: list[str] = field(default_factory=list)
    # Commands run (no shell) during the wipe, same templates; each bounded by the wipe timeout.
    hooks: list[str] = field(default_factory=list)
    wipe_timeout: float = duration("10s")
    # Re-create every rejected bare pod, not just those annotated
    # nodeagent.io/recreate-on-rejection: "true".
    recreate: bool = False
    recreate_backoff: float = duration("15s")
    recreate_limit: int = 3
    # Where the agent journals a re-creation between delete and create (survives restarts).
    journal_dir: str = "/var/lib/nodeagent/recreate"


@dataclass
class ReportingConfig:
    heartbeat_interval: float = duration("60s")
    metrics_address: str = "127.0.0.1:9102"


@dataclass
class Config:
    node: str = ""
    kubeconfig: str = ""
    log_format: str = choice("text", LOG_FORMATS)
    drain: DrainConfig = field(default_factory=DrainConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    uncordon: UncordonConfig = field(default_factory=UncordonConfig)
    evacuate: EvacuateConfig = field(default_factory=EvacuateConfig)
    rejection: RejectionConfig = field(default_factory=RejectionConfig)
    reporting: ReportingConfig = field(default_factory=ReportingConfig)

    @property
    def node_name(self) -> str:
        return self.node or socket.gethostname()


def _coerce(key: str, f: dataclasses.Field[Any], value: Any, from_env: bool) -> Any:
    kind = f.metadata.get("type")
    want = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    try:
        if kind == "duration":
            return parse_duration(str(value)) if isinstance(value, str) else _bad(value)
        if want == "bool":
            return _to_bool(value, from_env)
        if want == "int":
            return _to_int(value, from_env)
        if want.startswith("list"):
            return _to_list(value, from_env)
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            raise ValueError(f"bad value {value!r} (one of: {', '.join(choices)})")
        return value
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _bad(value: Any) -> Any:
    raise ValueError(f"bad duration {value!r} (a string such as 90s, 2m, 1m30s)")


def _to_bool(value: Any, from_env: bool) -> bool:
    if isinstance(value, bool):
        return value
    if from_env and str(value).lower() in ("true", "1", "yes", "false", "0", "no"):
        return str(value).lower() in ("true", "1", "yes")
    raise ValueError(f"expected true or false, got {value!r}")


def _to_int(value: Any, from_env: bool) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or from_env):
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected an integer, got {value!r}") from None
    if number < 1:
        raise ValueError(f"must be at least 1, got {number}")
    return number


def _to_list(value: Any, from_env: bool) -> list[str]:
    if from_env and isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return list(value)


def _apply(target: Any, values: Mapping[str, Any], prefix: str, from_env: bool) -> None:
    fields = {f.name: f for f in dataclasses.fields(target)}
    for name, value in values.items():
        key = f"{prefix}{name}"
        f = fields.get(name)
        if f is None:
            raise ConfigError(f"{key}: unknown key")
        current = getattr(target, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{key}: expected a table")
            _apply(current, value, f"{key}.", from_env)
        else:
            setattr(target, name, _coerce(key, f, value, from_env))


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """NODEAGENT_* variables as nested values, matched against the known keys."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Config):
        default = getattr(Config(), f.name)
        if dataclasses.is_dataclass(default):
            for sub in dataclasses.fields(default):
                var = f"NODEAGENT_{f.name}_{sub.name}".upper()
                if var in environ:
                    out.setdefault(f.name, {})[sub.name] = environ[var]
        elif f"NODEAGENT_{f.name}".upper() in environ:
            out[f.name] = environ[f"NODEAGENT_{f.name}".upper()]
    return out


def load(
    path: str | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults < file < env < overrides (flags, dotted keys: {"drain.deadline": "90s"})."""
    environ = os.environ if environ is None else environ
    cfg = Config()
    if path:
        _apply(cfg, _read_file(path), "", from_env=False)
    _apply(cfg, _env_values(environ), "", from_env=True)
    if not cfg.node and environ.get("NODE_NAME"):
        cfg.node = environ["NODE_NAME"]
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = dotted.split(".")
        nested: dict[str, Any] = {leaf: value}
        for parent in reversed(parents):
            nested = {parent: nested}
        _apply(cfg, nested, "", from_env=isinstance(value, str))
    return cfg


def _read_file(path: str) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
