"""The one vocabulary of why the node is fenced, and what each reason asks for.

A reason is written into the Node's marker (``nodeagent.io/drain-reason``), chosen by
logind's shutdown type or systemd's job queue, and keyed into the ``[shutdown]`` policy
table. Each member says whether it means the node is going down, so no caller spells a reason
or keeps its own list of them; ``ShutdownConfig.policy`` maps each to its policy.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why the node (or the agent) is going away, or why it is fenced."""

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


class FinishedPods(StrEnum):
    """What a drain does with Succeeded and Failed pods (nodeagent/drain/podfilter.py)."""

    KEEP = "keep"  # leave them (default)
    DELETE = "delete"  # evict them, as kubectl drain does


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
