"""Reading API objects as the server returns them (plain JSON): the one reader of a
condition by type, for pods and Nodes alike. The lowest layer, below kube: every part
may import it (docs/architecture.md, "Layers")."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def condition(obj: Obj, cond_type: str) -> Obj | None:
    """A copy of the object's status condition of that type, or None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == cond_type:
            return dict(cond)
    return None


def is_ready(obj: Obj) -> bool:
    """A Node or Pod whose Ready condition is True."""
    return (condition(obj, "Ready") or {}).get("status") == "True"
