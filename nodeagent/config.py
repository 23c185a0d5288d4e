"""Typed configuration: defaults, then a TOML file, then NODEAGENT_* env, then flags.

Every value is validated where it enters; a bad one raises ConfigError naming what
the user wrote: the file key (`drain.deadline: bad duration '2x' ...`), the variable
(`NODEAGENT_DRAIN_DEADLINE: ...`) or the flag (`--deadline: ...`), before anything is
touched. A value given but empty (`--node "$UNSET"`, `NODEAGENT_NODE=`, `node = ""`)
is an error, never the default: a script with an unset variable must not drain
whatever node the default picks.

Env names are NODEAGENT_<SECTION>_<KEY> (NODEAGENT_DRAIN_DEADLINE=90s) or
NODEAGENT_<KEY> for top-level keys (NODEAGENT_NODE).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.types import (
    Cloud,
    EvacuatePolicy,
    FinishedPods,
    Handler,
    Policy,
    Reason,
    WarningKind,
)

LOG_FORMATS = ("text", "json")
# host: a systemd unit, whose SIGTERM may be the machine going down. pod: a DaemonSet's
# container, whose SIGTERM is a rollout, an uninstall or an eviction, never a shutdown.
FORMS = ("host", "pod")

# A Node name is a DNS subdomain (RFC 1123), as the API server validates it.
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_HTTP_URL = re.compile(r"http://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?/?")
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


def duration(default: str, minimum: str | None = None) -> Any:
    """A duration field. Without `minimum`, 0s is allowed and means "not at all"
    (no settle, no wait); with it, smaller values (0s included) are refused because
    they cannot work (a 0s drain deadline fails before the first request)."""
    meta: dict[str, Any] = {"type": "duration"}
    if minimum is not None:
        meta["minimum"] = (parse_duration(minimum), minimum)
    return field(default=parse_duration(default), metadata=meta)


def choice(default: str, choices: tuple[str, ...]) -> Any:
    return field(default=default, metadata={"choices": choices})


# The metadata of a field holding an enum: the text is parsed once, where it enters (load,
# or a constructor given the text), and the enum is what is stored.
POLICY: dict[str, Any] = {"enum": Policy}
EVACUATE_POLICY: dict[str, Any] = {"enum": EvacuatePolicy}
FINISHED_PODS: dict[str, Any] = {"enum": FinishedPods}
CLOUD: dict[str, Any] = {"enum": Cloud}
HANDLER: dict[str, Any] = {"enum": Handler}


def _enums(obj: Any) -> None:
    """Turn the text given to a constructor into the policy fields' enums."""
    for f in dataclasses.fields(obj):
        if "enum" in f.metadata:
            setattr(obj, f.name, f.metadata["enum"](getattr(obj, f.name)))


@dataclass
class DrainConfig:
    deadline: float = duration("120s", minimum="1s")
    do_not_disrupt_ceiling: float = duration("60s")
    force_after_deadline: bool = False
    concurrency: int = 32
    # Succeeded/Failed pods: keep them, or delete them as kubectl drain does.
    finished_pods: FinishedPods = field(default=FinishedPods.KEEP, metadata=FINISHED_PODS)

    def __post_init__(self) -> None:
        _enums(self)


@dataclass
class ShutdownConfig:
    """What to do per reason for stopping: drain | cordon | none."""

    poweroff: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    reboot: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    halt: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    kexec: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    soft_reboot: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    stop: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    restart: Policy = field(default=Policy.NONE, metadata=POLICY)
    unknown: Policy = field(default=Policy.NONE, metadata=POLICY)
    # The kubelet kills what is left anyway when the node goes down; deleting it
    # with the remaining grace lets it stop cleanly instead.
    force_after_deadline: bool = True
    use_logind: bool = True
    # The pod form's terminationGracePeriodSeconds (the chart sets it; 0s: not known). The
    # kubelet's graceful node shutdown, where on, stops the agent's pod mid-drain with at
    # most this much grace; shorter than the drain deadline is reported.
    termination_grace: float = duration("0s")
    # Opt-in: a logind drop-in (e.g. /etc/systemd/logind.conf.d/zz-nodeagent.conf)
    # written at start raising InhibitDelayMaxSec to fit the drain, logind then told to
    # re-read it. Unset is off; an explicit "" is refused like any empty value (it would
    # only repeat the default).
    logind_dropin: str = field(default="", metadata={"check": "absolute"})

    def __post_init__(self) -> None:
        _enums(self)

    def policy(self, reason: Reason) -> Policy:
        """What `reason` asks for. A removal never drains; an evacuation is not a shutdown."""
        table = {
            Reason.POWEROFF: self.poweroff,
            Reason.REBOOT: self.reboot,
            Reason.HALT: self.halt,
            Reason.KEXEC: self.kexec,
            Reason.SOFT_REBOOT: self.soft_reboot,
            Reason.STOP: self.stop,
            Reason.RESTART: self.restart,
            Reason.UNKNOWN: self.unknown,
        }
        return table.get(reason, Policy.NONE)


@dataclass
class UncordonConfig:
    settle: float = duration("10s")
    ready_timeout: float = duration("10m", minimum="1s")
    wait_for_daemonsets: list[str] = field(default_factory=list)  # "namespace/name"


@dataclass
class EvacuateConfig:
    taints: list[str] = field(default_factory=lambda: ["nodeagent.io/evacuate"])
    policy: EvacuatePolicy = field(default=EvacuatePolicy.EVACUATE, metadata=EVACUATE_POLICY)

    def __post_init__(self) -> None:
        _enums(self)


@dataclass
class WarningsConfig:
    """The cloud's early warnings, read from the node's own metadata endpoint
    (nodeagent/cloud/): what each kind asks for (drain | cordon | none; every warning is
    reported), and when."""

    cloud: Cloud = field(default=Cloud.AUTO, metadata=CLOUD)
    interruption: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    termination: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    maintenance: Policy = field(default=Policy.DRAIN, metadata=POLICY)
    migration: Policy = field(default=Policy.NONE, metadata=POLICY)
    rebalance: Policy = field(default=Policy.NONE, metadata=POLICY)
    # A scheduled event acts this long before its start, not when it is announced (days
    # ahead): the node serves until then.
    maintenance_lead: float = duration("10m")
    # A rebalance recommendation never ends by itself: its cordon lasts this long.
    rebalance_lifetime: float = duration("30m", minimum="1s")
    # The metadata endpoint's base URL; default the cloud's own link-local address.
    metadata_url: str = field(default="", metadata={"check": "url"})
    # Another handler of the same notices (its own drain, its uncordon on cancel): the
    # warnings then stand aside, the OS-shutdown path stays on. `auto`: where it writes
    # its marks on this Node (aws-node-termination-handler, AKS's remediator).
    other_handler: Handler = field(default=Handler.AUTO, metadata=HANDLER)

    def __post_init__(self) -> None:
        _enums(self)

    def policy(self, kind: WarningKind) -> Policy:
        return Policy(getattr(self, kind.value))


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
    wipe_timeout: float = duration("10s", minimum="100ms")
    # Re-create every rejected bare pod, not just those annotated
    # nodeagent.io/recreate-on-rejection: "true".
    recreate: bool = False
    recreate_backoff: float = duration("15s")
    recreate_limit: int = 3
    # Where the agent journals a re-creation between delete and create (survives restarts).
    journal_dir: str = "/var/lib/nodeagent/recreate"


@dataclass
class LeftoversConfig:
    """Pods an earlier boot's kubelet shutdown left Failed: delete them after boot."""

    enabled: bool = True  # ReplicaSet-owned pods, once replaced
    jobs: bool = False  # also Job pods (their history and logs go with them)
    bare: bool = False  # also bare pods (the failed object is their only record)


@dataclass
class ReportingConfig:
    # NodeAgentReady is refreshed when no condition was written for this long (the
    # kubelet's own full-status cadence); liveness at finer grain is the metrics' job.
    heartbeat_interval: float = duration("5m", minimum="1s")
    # "" is the one empty value with a meaning: no /metrics and /healthz server.
    metrics_address: str = field(
        default="127.0.0.1:9102", metadata={"empty_means": "off", "check": "address"}
    )


@dataclass
class AlongsideConfig:
    """What the agent reads of the other actors beyond its own Node (README, "Alongside
    other tools")."""

    # Opt-in: kured's DaemonSet ("namespace/name", kured's --ds-namespace/--ds-name, e.g.
    # kube-system/kured), whose annotation weave.works/kured-node-lock is kured's reboot
    # lock. The agent watches that one object (get, list and watch on it by resourceNames)
    # and counts kured's drain as another drainer's while the lock names this node. Unset:
    # kured is seen only by its --annotate-nodes annotation on the Node.
    kured_daemonset: str = field(default="", metadata={"check": "namespaced_name"})


@dataclass
class Config:
    node: str = field(default="", metadata={"check": "node_name"})
    kubeconfig: str = ""
    # Where the kubelet's kubeconfig is (default: the places kubeadm, EKS, GKE and k3s use).
    kubelet_kubeconfig: str = ""
    log_format: str = choice("text", LOG_FORMATS)
    form: str = choice("host", FORMS)
    # One agent per node: only the holder of this file's lock runs (takes logind's delay
    # lock, drains, reports); another agent on the node (a surge rollout, the host form
    # next to the DaemonSet) waits for it and says why.
    lock_file: str = field(default="/var/lib/nodeagent/agent.lock", metadata={"check": "absolute"})
    drain: DrainConfig = field(default_factory=DrainConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    uncordon: UncordonConfig = field(default_factory=UncordonConfig)
    evacuate: EvacuateConfig = field(default_factory=EvacuateConfig)
    warnings: WarningsConfig = field(default_factory=WarningsConfig)
    rejection: RejectionConfig = field(default_factory=RejectionConfig)
    leftovers: LeftoversConfig = field(default_factory=LeftoversConfig)
    reporting: ReportingConfig = field(default_factory=ReportingConfig)
    alongside: AlongsideConfig = field(default_factory=AlongsideConfig)

    @property
    def node_name(self) -> str:
        return self.node or socket.gethostname()


Namer = Callable[[str], str]  # dotted key -> what the user wrote: key, variable or flag


def env_var(key: str) -> str:
    """The variable that sets a dotted key: drain.deadline -> NODEAGENT_DRAIN_DEADLINE."""
    return "NODEAGENT_" + key.replace(".", "_").upper()


def _coerce(label: str, f: dataclasses.Field[Any], value: Any, from_env: bool) -> Any:
    try:
        if isinstance(value, str) and not value.strip():
            if value == "" and "empty_means" in f.metadata:
                return ""
            raise ValueError(f"empty value ({_empty_hint(label)})")
        return _check(f, _convert(f, value, from_env))
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def _empty_hint(label: str) -> str:
    if label.startswith("--"):
        return "give a value, or leave the flag out for the default"
    if label.isupper():
        return "give a value, or unset the variable for the default"
    return "give a value, or remove the key for the default"


def _convert(f: dataclasses.Field[Any], value: Any, from_env: bool) -> Any:
    want = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    if f.metadata.get("type") == "duration":
        return _to_duration(value, f.metadata.get("minimum"))
    if want == "bool":
        return _to_bool(value, from_env)
    if want == "int":
        return _to_int(value, from_env)
    if want.startswith("list"):
        return _to_list(value, from_env)
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    enum = f.metadata.get("enum")
    choices = tuple(enum) if enum else f.metadata.get("choices")
    if choices and value not in choices:
        raise ValueError(f"bad value {value!r} (one of: {', '.join(choices)})")
    return enum(value) if enum else value


def _check(f: dataclasses.Field[Any], value: Any) -> Any:
    if f.metadata.get("check") == "node_name" and not is_node_name(value):
        raise ValueError(
            f"{value!r} is not a node name (lowercase letters, digits, '-' and '.', "
            "at most 253 characters)"
        )
    if f.metadata.get("check") == "address" and value:
        _check_address(value)
    if f.metadata.get("check") == "absolute" and value and not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    if f.metadata.get("check") == "namespaced_name" and value:
        _check_namespaced_name(value)
    if f.metadata.get("check") == "url" and value and not _HTTP_URL.fullmatch(value):
        raise ValueError(f"{value!r} is not an http:// URL (e.g. http://169.254.169.254)")
    return value


def is_node_name(name: str) -> bool:
    return len(name) <= 253 and _NODE_NAME.fullmatch(name) is not None


def _check_namespaced_name(value: str) -> None:
    namespace, sep, name = value.partition("/")
    if not sep or not _NAMESPACE.fullmatch(namespace) or not is_node_name(name):
        raise ValueError(
            f"{value!r} is not NAMESPACE/NAME (lowercase letters, digits, '-' and '.'; "
            "e.g. kube-system/kured)"
        )


def _check_address(address: str) -> None:
    _host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad address {address!r} (HOST:PORT, e.g. 127.0.0.1:9102 or [::1]:9102)")


def _to_duration(value: Any, minimum: tuple[float, str] | None) -> float:
    if not isinstance(value, str):
        raise ValueError(f"bad duration {value!r} (a string such as 90s, 2m, 1m30s)")
    seconds = parse_duration(value)
    if minimum and seconds < minimum[0]:
        raise ValueError(f"must be at least {minimum[1]}, got {value.strip()!r}")
    return seconds


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
    items = value.split(",") if from_env and isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ValueError(f"expected a list of strings, got {value!r}")
    items = [v.strip() if from_env else v for v in items]
    if any(not v.strip() for v in items):
        raise ValueError(f"empty item in {value!r}")
    return list(items)


def _apply(target: Any, values: Mapping[str, Any], prefix: str, name: Namer) -> None:
    fields = {f.name: f for f in dataclasses.fields(target)}
    for key_name, value in values.items():
        key = f"{prefix}{key_name}"
        f = fields.get(key_name)
        if f is None:
            raise ConfigError(f"{name(key)}: unknown key")
        current = getattr(target, key_name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{name(key)}: expected a table")
            _apply(current, value, f"{key}.", name)
        else:
            from_env = name is not _file_key and isinstance(value, str)
            setattr(target, key_name, _coerce(name(key), f, value, from_env))


def _file_key(key: str) -> str:
    return key


def leaf_fields() -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """Every config key as (dotted key, field), read from the dataclasses."""
    for f in dataclasses.fields(Config):
        default = getattr(Config(), f.name)
        if dataclasses.is_dataclass(default):
            for sub in dataclasses.fields(default):
                yield f"{f.name}.{sub.name}", sub
        else:
            yield f.name, f


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """NODEAGENT_* variables as nested values, matched against the known keys."""
    out: dict[str, Any] = {}
    for dotted, _field in leaf_fields():
        if env_var(dotted) in environ:
            section, _, key = dotted.rpartition(".")
            (out.setdefault(section, {}) if section else out)[key] = environ[env_var(dotted)]
    return out


def load(
    path: str | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Config:
    """Defaults < file < env < overrides (flags, dotted keys: {"drain.deadline": "90s"}).

    `path` is the --config flag; `flags` names the flag behind each override, for
    messages. An override of None is a flag not given; "" is a flag given empty.
    """
    environ = os.environ if environ is None else environ
    flag_names = dict(flags or {})
    cfg = Config()
    if path is not None:
        if not path.strip():
            raise ConfigError("--config: empty value (give a file, or leave it out)")
        _apply(cfg, _read_file(path), "", _file_key)
    _apply(cfg, _env_values(environ), "", env_var)
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = dotted.split(".")
        nested: dict[str, Any] = {leaf: value}
        for parent in reversed(parents):
            nested = {parent: nested}
        _apply(cfg, nested, "", lambda key: flag_names.get(key, key))
    if not cfg.node and "NODE_NAME" in environ:
        # The DaemonSet form's downward-API variable: below NODEAGENT_NODE and --node.
        _apply(cfg, {"node": environ["NODE_NAME"]}, "", lambda _key: "NODE_NAME")
    return cfg


def _read_file(path: str) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path}: not a text file (invalid UTF-8 at byte {exc.start})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
