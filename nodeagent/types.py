"""The agent's vocabulary: the words every part speaks, at the bottom of the package.

Producers (logind, SIGTERM, the Node's watch, the clouds' readers) and consumers (the
decision, the executor, the drain, the reports) all import down to this module, and it
imports nothing of the package (as node-problem-detector keeps its ``pkg/types``). So no
part has to import another part to name a reason, a cloud, a warning, an outcome or an exit
code, and the configuration, which stores these words, imports no part that reads it.

Only names, plain values and the `milestone` log helper live here; what is decided with
them lives with its part (nodeagent/fence/decision.py, nodeagent/fence/warning.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import Enum, IntEnum, StrEnum

# -- why the node is fenced -------------------------------------------------------------------


class Reason(StrEnum):
    """Why the node (or the agent) is going away, or why it is fenced.

    A reason is written into the Node's marker (``nodeagent.io/drain-reason``), chosen by
    logind's shutdown type or systemd's job queue, and keyed into the ``[shutdown]`` policy
    table (``ShutdownConfig.policy``). Each member says whether it means the node is going
    down, so no caller spells a reason or keeps its own list of them.
    """

    POWEROFF = "poweroff"
    REBOOT = "reboot"
    HALT = "halt"
    KEXEC = "kexec"
    SOFT_REBOOT = "soft-reboot"
    STOP = "stop"  # the agent's unit is stopped for maintenance
    RESTART = "restart"  # the agent's unit is restarted (an upgrade)
    REMOVE = "remove"  # the agent's package is being removed
    UNKNOWN = "unknown"  # nothing told why
    EVACUATE = "evacuate"  # an evacuate taint
    WARNING = "warning"  # the cloud's early warning (nodeagent/fence/warning.py)

    @property
    def going_down(self) -> bool:
        """The machine itself is going down (in the boot that wrote the marker)."""
        return self in GOING_DOWN

    @property
    def shutdown(self) -> bool:
        """A cordon taken for the node or the agent going away, undone after it."""
        return self in SHUTDOWN_REASONS

    @property
    def while_up(self) -> bool:
        """A fence the Node or the cloud asks for while the machine runs on: a shutdown
        pre-empts its drain, and its own undo is the taint's or the warning's end."""
        return self in WHILE_UP


GOING_DOWN = frozenset(
    {Reason.POWEROFF, Reason.REBOOT, Reason.HALT, Reason.KEXEC, Reason.SOFT_REBOOT}
)
SHUTDOWN_REASONS = GOING_DOWN | {Reason.STOP}
WHILE_UP = frozenset({Reason.EVACUATE, Reason.WARNING})


def marker_reason(text: str) -> Reason | None:
    """The reason a marker names, or None for one this version does not know (``manual``)."""
    try:
        return Reason(text)
    except ValueError:
        return None


class Policy(StrEnum):
    """What a shutdown reason asks of the agent (the ``[shutdown]`` table's values)."""

    DRAIN = "drain"
    CORDON = "cordon"
    NONE = "none"


class EvacuatePolicy(StrEnum):
    """What an evacuate taint asks of the agent."""

    EVACUATE = "Evacuate"
    NO_SCHEDULE = "NoSchedule"
    IGNORE = "Ignore"


class FinishedPods(StrEnum):
    """What a drain does with Succeeded and Failed pods (nodeagent/drain/podfilter.py)."""

    KEEP = "keep"  # leave them (default)
    DELETE = "delete"  # evict them, as kubectl drain does


# -- the cloud's early warnings ---------------------------------------------------------------


class Handler(StrEnum):
    """Another handler of the cloud's interruption notices on this node
    (``[warnings] other_handler``): nodeagent's warnings stand aside where one acts."""

    AUTO = "auto"  # told by what it writes on this Node (nodeagent/fence/others.py)
    NONE = "none"  # nodeagent alone handles them
    NTH = "aws-node-termination-handler"
    KARPENTER = "karpenter"  # its interruption queue
    AKS = "aks"  # AKS's node auto-drain


class Cloud(StrEnum):
    """Where the node runs, as far as its early warnings go (``[warnings] cloud``)."""

    AUTO = "auto"  # told by the node's own DMI strings (nodeagent/cloud/detect.py)
    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"
    OFF = "off"


class WarningKind(StrEnum):
    """What a cloud's early warning announces; each kind has its ``[warnings]`` policy."""

    INTERRUPTION = "interruption"  # AWS Spot interruption, GCP preemption, Azure Preempt
    TERMINATION = "termination"  # AWS Auto Scaling Terminated, Azure Terminate
    MAINTENANCE = "maintenance"  # AWS scheduled events, Azure Reboot/Redeploy, GCP terminate
    MIGRATION = "migration"  # GCP live migration, Azure Freeze: the VM pauses and stays
    REBALANCE = "rebalance"  # AWS rebalance recommendation: a risk, not a departure


# Kinds that announce the VM going away: once it went down and came back, such a warning
# has happened. A rebalance recommendation or a live migration never departs.
DEPARTING = frozenset({WarningKind.INTERRUPTION, WarningKind.TERMINATION, WarningKind.MAINTENANCE})


def stamp(epoch: float) -> str:
    """An epoch time as the clouds and the API write it (RFC 3339, UTC, seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@dataclass(frozen=True)
class Notice:
    """One warning the cloud's metadata endpoint shows now (nodeagent/cloud/ reads them;
    times are wall-clock epoch seconds, as the cloud states them)."""

    cloud: Cloud
    kind: WarningKind
    event_id: str  # the cloud's ID, or one derived from the notice (stable across polls)
    what: str  # the cloud's own words: "spot terminate", "system-reboot", "Preempt"
    deadline: float | None  # when the cloud acts (epoch seconds); None: not said
    since: float  # when the notice was issued, or first seen (epoch seconds)
    # Azure: the event names this VM alone, so approving it starts nothing for another VM.
    approvable: bool = False

    def describe(self) -> str:
        """For the condition, Events and the log: what, which event, by when."""
        at = f", at {stamp(self.deadline)}" if self.deadline is not None else ""
        return f"{self.cloud} {self.kind} warning ({self.what}, event {self.event_id}{at})"


# -- what happened, and what follows ----------------------------------------------------------


class Occasion(Enum):
    """What prompted a decision (a signal on the departure's queue)."""

    SHUTDOWN = "shutdown"  # logind's PrepareForShutdown(true), or SIGTERM
    CANCELLED = "cancelled"  # PrepareForShutdown(false)
    SETTLED = "settled"  # after start: the node is Ready (and settled) again
    NODE = "node"  # the Node changed, the cloud's warnings changed, or a retry came due


class Step(Enum):
    """The one fence step a decision names (nodeagent/fence/decision.py)."""

    NOTHING = "nothing"
    CORDON = "cordon"
    DRAIN = "drain"
    UNCORDON = "uncordon"
    FORGET = "forget"  # clear the Node's note of a departed warning the endpoint dropped
    REFENCE = "refence"  # put back what someone else undid of the agent's fence
    UNTAINT = "untaint"  # a shutdown's departure is over: its taint goes, the cordon stays


class DrainOutcome(StrEnum):
    """How a drain ended. A StrEnum: its value is what the node's drain-result
    annotation, the metrics' result label and the summary show."""

    DRAINED = "drained"
    FORCED = "forced"  # drained, some pods deleted after the deadline
    TIMED_OUT = "timed-out"  # the deadline came with pods still leaving
    INCOMPLETE = "incomplete"  # pods held by finalizers or stuck terminating
    CANCELLED = "cancelled"
    DRY_RUN = "dry-run"


# Drain results after which a node needs no new drain: compared with the marker's text too,
# hence a tuple (equality), not a set (an Enum member hashes by its name).
FINISHED = (DrainOutcome.DRAINED, DrainOutcome.FORCED)


class ExitCode(IntEnum):
    """The commands' exit codes (README: nodeagent drain)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    DEADLINE = 3
    REFUSED = 4


# -- milestones: what the harness and operators read as data ----------------------------------


class Milestone(Enum):
    """A moment of a departure written as data: a stable name (the value) and a fixed
    MESSAGE_ID (a random 128-bit id chosen once, as systemd's catalog ids are), so that
    ``journalctl MESSAGE_ID=...`` and the JSON logs find it whatever the log line says."""

    SHUTDOWN_ANNOUNCED = "shutdown-announced"  # source, reason, generation (logind)
    SHUTDOWN_CANCELLED = "shutdown-cancelled"  # generation
    WARNING_HEARD = "warning-heard"  # cloud, kind, event_id
    WARNING_OVER = "warning-over"  # cloud, kind, event_id
    CORDONED = "cordoned"  # reason
    UNCORDONED = "uncordoned"  # reason
    DRAIN_STARTED = "drain-started"  # reason, pods
    EVICTED = "evicted"  # reason, pod
    DRAIN_FINISHED = "drain-finished"  # reason, outcome, seconds, late
    LOCK_RELEASED = "lock-released"  # generation
    # The agent's own moments, which the harness waits on as it waits on a departure's.
    LOCK_TAKEN = "lock-taken"  # (none): logind waits for the agent from here on
    STOPPING = "stopping"  # reason: why the agent's SIGTERM came (host form)
    STANDING_BY = "standing-by"  # form, pid (of the agent that runs this node)
    TOOK_OVER = "took-over"  # form, pid (of the agent it stood by for, now gone)
    METRICS_FAILED = "metrics-failed"  # address: /metrics and /healthz are not served
    DRAIN_FAILED = "drain-failed"  # reason: a shutdown's drain ended by an API error
    # A drain's API server lost and found again (drain/partition.py), and what it costs.
    API_UNREACHABLE = "api-unreachable"  # seconds (since its last answer), pods (last seen)
    API_ANSWERS_AGAIN = "api-answers-again"  # (none)
    WATCH_RESTARTED = "watch-restarted"  # resource, seconds: a cut watch open again
    RESULT_KEPT = "result-kept"  # reason, outcome: not taken, written when it answers
    RESULT_WRITTEN = "result-written"  # reason, outcome, seconds, tries: the kept one
    RESULT_DROPPED = "result-dropped"  # reason, outcome, seconds, tries: given up on

    @property
    def message_id(self) -> str:
        return _MESSAGE_IDS[self]


# Chosen once (uuid4().hex); never change one: journal queries and dashboards name them.
_MESSAGE_IDS = {
    Milestone.SHUTDOWN_ANNOUNCED: "4326d38dba0a46d38f46596fe30e65c1",
    Milestone.SHUTDOWN_CANCELLED: "3a16114fa3404ab4a77299e0da36b6e2",
    Milestone.WARNING_HEARD: "8b59e038bfa54be28e22781b2049ff05",
    Milestone.WARNING_OVER: "621fdb66f70440a5a0ef35a9db7099d7",
    Milestone.CORDONED: "cd035efac55f4e09b32cb8b7fd1fb1b2",
    Milestone.UNCORDONED: "d2d80816dd3a4aa79bff6943f189e100",
    Milestone.DRAIN_STARTED: "b14c29e8434b4111bf26ef959117e74e",
    Milestone.EVICTED: "8e361cb6392c49f899a96d117b511646",
    Milestone.DRAIN_FINISHED: "6a15a7d036894b988b27cb654d80f2d2",
    Milestone.LOCK_RELEASED: "832259e787ea4f84bba0a1f7e1d309d5",
    Milestone.LOCK_TAKEN: "200ce09c354742dcaeff53058505620b",
    Milestone.STOPPING: "37d69e9f638c43188e4e052ec0feb071",
    Milestone.STANDING_BY: "3adeae4c411e466db721fb4ccb168ff6",
    Milestone.TOOK_OVER: "b2bc747b4d624a958325b564626ebc8c",
    Milestone.METRICS_FAILED: "cbcfea3a334643988e086f9e46db7348",
    Milestone.DRAIN_FAILED: "92c2ba5f4c494d75a813d62c93625fe8",
    Milestone.API_UNREACHABLE: "61d32c485ee2487d960c4d15aafa9b37",
    Milestone.API_ANSWERS_AGAIN: "181f2bdb18c948498024ea1bccd60cde",
    Milestone.WATCH_RESTARTED: "0bb16288d5d54242ad424d7d423f8b38",
    Milestone.RESULT_KEPT: "eea6f7f90b9d47719bee7e8be953c057",
    Milestone.RESULT_WRITTEN: "b1877d797db749008abb922aee917708",
    Milestone.RESULT_DROPPED: "0cf3e0dd1a70492ca95b30868f84b14a",
}

# The record attributes a milestone's `extra` sets (read by nodeagent/agent/logs.py).
MILESTONE_ATTR = "nodeagent_milestone"
FIELDS_ATTR = "nodeagent_fields"
# Keys a JSON log line has of its own: a field never takes one of them.
RESERVED_FIELDS = frozenset({"ts", "level", "logger", "msg", "milestone", "message_id"})


def milestone(
    log: logging.Logger,
    which: Milestone,
    message: str,
    *args: object,
    severity: int = logging.INFO,
    **fields: object,
) -> None:
    """Log `message % args` as usual (at `severity`), carrying `which` and its key `fields`
    (as strings) in the record, for the journal and the JSON logs to write as data. The
    daemon writes milestones at any verbosity (nodeagent/agent/logs.py)."""
    bad = RESERVED_FIELDS & fields.keys()
    assert not bad, f"milestone fields may not be named {sorted(bad)}"
    values = {key: str(value) for key, value in fields.items()}
    log.log(severity, message, *args, extra={MILESTONE_ATTR: which, FIELDS_ATTR: values})
