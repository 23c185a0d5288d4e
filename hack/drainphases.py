"""The phases `nodeagent drain` names on its summary's "phases:" line, read back for the
drain benchmark and the tests that check the line (nodeagent/drain/phases.py writes it)."""

from __future__ import annotations

import re

_PHASES = re.compile(r"^\s*phases: (.*)$", re.MULTILINE)
_PHASE = re.compile(r"(\S.*?) (\d+\.\d+)s$")


def own_phases(output: str) -> tuple[tuple[str, float], ...]:
    """The phases a drain's summary names ("phases: start-up 0.21s, list 0.03s, ..."):
    nodeagent's (nodeagent/drain/phases.py); none for the others."""
    line = _PHASES.search(output)
    if not line:
        return ()
    found = (_PHASE.fullmatch(part.strip()) for part in line.group(1).split(","))
    return tuple((m.group(1), float(m.group(2))) for m in found if m)
