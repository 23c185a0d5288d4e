"""Who did what to the departing Node, from what the API server recorded: pure functions
over the Node's versions as its watch delivered them (trackers.NodeWatch), the pods bound to
it and the Events of the departure.

Who wrote a change is the Node's managedFields: the API server names each writer (its field
manager, the client's user agent unless it names one) and keeps one entry per manager and
operation, whose time and fields move with each of its writes. The entries that differ
between two versions of the Node are the writers of the change between them. An entry for
the status subresource is the kubelet's heartbeat, never a cordon, taint or label.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
# A Node's version as the watch delivered it, when; None: the Node was deleted.
Version = tuple[float, JSON | None]
# The labels every Node has from its kubelet: not a departure's.
KUBELET_LABELS = ("kubernetes.io/", "beta.kubernetes.io/", "node.kubernetes.io/instance-type")


@dataclass
class Witnessed:
    """What one departure did to its Node and who did it (a SceneResult's)."""

    scheduled_onto_departing: list[str] = field(default_factory=list)  # namespace/name
    node_changes: list[str] = field(default_factory=list)  # Change.row, in time
    final_state: JSON = field(default_factory=dict)  # final_state()
    duplicate_events: list[str] = field(default_factory=list)  # duplicate_events()


def _entries(node: JSON) -> dict[tuple[str, str], JSON]:
    """The Node's managedFields entries but the status subresource's, by manager and
    operation."""
    return {
        (e["manager"], e.get("operation", "")): e
        for e in node["metadata"].get("managedFields") or []
        if not e.get("subresource") and e.get("manager")
    }


def _paths(fields: JSON, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every path of a fieldsV1 set ({"f:spec": {"f:unschedulable": {}}} and so on)."""
    out = {prefix} if prefix else set()
    for key, sub in (fields or {}).items():
        if key != ".":
            out |= _paths(sub, (*prefix, key))
    return out


def writers(before: JSON | None, after: JSON) -> str:
    """Who wrote the change from `before` to `after`: the managers whose entry is new, or
    whose time moved, or which own a field they did not before ("+"-joined; "?" when none:
    a write that only took fields away leaves its writer no entry). A manager that only
    lost fields (another took them over, or they went) did not write."""
    old = _entries(before) if before is not None else {}
    names = set()
    for key, e in _entries(after).items():
        was = old.get(key)
        grew = _paths(e.get("fieldsV1") or {}) - _paths((was or {}).get("fieldsV1") or {})
        if was is None or was.get("time") != e.get("time") or grew:
            names.add(key[0])
    return "+".join(sorted(names)) or "?"


def owners(node: JSON, path: tuple[str, ...]) -> str:
    """The managers owning `path` (fieldsV1 keys) in the Node's managedFields, "+"-joined;
    "" when none does. Who owns a field is who set its value."""
    names = {
        key[0]
        for key, e in _entries(node).items()
        if path in _paths(e.get("fieldsV1") or {})
    }  # fmt: skip
    return "+".join(sorted(names))


def _taint_path(node: JSON, key: str) -> tuple[str, ...]:
    """A taint's path: its item where the list is keyed, else the list (an atomic list is
    owned whole by whoever last set it)."""
    for e in _entries(node).values():
        items = ((e.get("fieldsV1") or {}).get("f:spec") or {}).get("f:taints") or {}
        for item in items:
            if item.startswith("k:") and json.loads(item[2:]).get("key") == key:
                return ("f:spec", "f:taints", item)
    return ("f:spec", "f:taints")


def setter(before: JSON, after: JSON, what: str) -> str:
    """Who made one change (`what`, as _diff names it): the owner of the field it set,
    where it set one; else (a removal) the writers of the version."""
    head, _, rest = what.partition(" ")
    path: tuple[str, ...] | None = None
    if what == "cordon":
        path = ("f:spec", "f:unschedulable")
    elif head == "taint+":
        path = _taint_path(after, rest)
    elif head == "label+":
        path = ("f:metadata", "f:labels", "f:" + rest.split("=")[0])
    return (owners(after, path) if path else "") or writers(before, after)


def _taints(node: JSON) -> dict[str, str]:
    return {t["key"]: t.get("effect", "") for t in (node.get("spec") or {}).get("taints") or []}


def _labels(node: JSON) -> dict[str, str]:
    return {
        k: v
        for k, v in (node["metadata"].get("labels") or {}).items()
        if not k.startswith(KUBELET_LABELS)
    }


def _cordoned(node: JSON) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


@dataclass(frozen=True)
class Change:
    """One change of the cordon, a taint, a label or the Node's existence, and its writer."""

    at: float
    what: str  # "cordon", "uncordon", "taint+ KEY", "taint- KEY", "label+ K=V", ...
    by: str

    def row(self, t0: float) -> str:
        return f"{self.at - t0:+.1f}s {self.what} by {self.by}"


def _diff(before: JSON, after: JSON) -> list[str]:
    what = []
    if _cordoned(before) != _cordoned(after):
        what.append("cordon" if _cordoned(after) else "uncordon")
    old_t, new_t = _taints(before), _taints(after)
    what += [f"taint+ {k}" for k in new_t if k not in old_t]
    what += [f"taint- {k}" for k in old_t if k not in new_t]
    old_l, new_l = _labels(before), _labels(after)
    what += [f"label+ {k}={v}" for k, v in new_l.items() if old_l.get(k) != v]
    what += [f"label- {k}" for k in old_l if k not in new_l]
    if after["metadata"].get("deletionTimestamp") and not before["metadata"].get(
        "deletionTimestamp"
    ):
        what.append("deletion requested")
    return what


def changes(versions: Sequence[Version]) -> list[Change]:
    """Every change of the cordon, the taints, the labels (but the kubelet's) and the
    Node's existence between its versions, each with its writers. A Node created again
    (a new UID) after its deletion counts from its first version."""
    out: list[Change] = []
    last: JSON | None = None
    for at, node in versions:
        if node is None:
            if last is not None:
                out.append(Change(at, "deleted", "?"))
            last = None
            continue
        if last is None or last["metadata"].get("uid") != node["metadata"].get("uid"):
            if out:  # not the first version: the Node was registered again
                out.append(Change(at, "registered again", writers(None, node)))
            last = node
            continue
        out += [Change(at, w, setter(last, node, w)) for w in _diff(last, node)]
        last = node
    return out


def final_state(versions: Sequence[Version]) -> JSON:
    """The Node's cordon, taints and departure labels as last seen, each with who set it
    (the writer of the change that set it; "before" when it was so from the start), and
    whether the Node was deleted at the end."""
    seen = [(at, n) for at, n in versions if n is not None]
    if not seen:
        return {"node": "never seen"}
    setter: dict[str, str] = {}
    for c in changes(versions):
        head, _, rest = c.what.partition(" ")
        if c.what in ("cordon", "uncordon"):
            setter["cordon"] = c.by
        elif head in ("taint+", "label+"):
            setter[f"{head[:-1]} {rest.split('=')[0]}"] = c.by
    node = seen[-1][1]
    deleted = versions[-1][1] is None
    cordon = _cordoned(node)
    return {
        "node": "deleted" if deleted else "present",
        "cordoned": cordon,
        "cordon_by": setter.get("cordon", "before") if cordon else None,
        "taints": {k: setter.get(f"taint {k}", "before") for k in sorted(_taints(node))},
        "labels": {
            f"{k}={v}": setter.get(f"label {k}", "before") for k, v in sorted(_labels(node).items())
        },
    }


@dataclass(frozen=True)
class Binding:
    """A pod first seen bound to the departing node, when."""

    at: float
    uid: str
    name: str  # namespace/name


def scheduled_onto(
    bound: Iterable[Binding], before: set[str], start: float, end: float
) -> list[str]:
    """The pods bound to the departing node after the departure began (`start`) and before
    `end` (a rebooted node's return: later pods are its own again), that were not on it
    when the departure began."""
    return sorted(
        {b.name for b in bound if b.uid not in before and start <= b.at <= end}
    )  # fmt: skip


def _component(event: JSON) -> str:
    return str(
        (event.get("source") or {}).get("component")
        or event.get("reportingComponent")
        or event.get("reportingController")
        or "?"
    )


def _stamp(event: JSON) -> str:
    meta = event["metadata"]
    return str(event.get("lastTimestamp") or event.get("eventTime") or meta["creationTimestamp"])


# The kubelet's probe results repeat by nature (each failed readiness probe of a pod that
# is stopping): not a departure's Event told twice.
PROBE_REASONS = ("Unhealthy", "ProbeWarning")


def duplicate_events(events: Iterable[JSON], since: str, objects: set[str]) -> list[str]:
    """The departure's duplicate Events: on one object (`objects`: "Kind/name"), one reason
    from two components, or from one component more than once (its count or several
    Events). `since`: the departure's start as an API timestamp (RFC 3339, UTC, which
    sorts as text). Each: "Kind/name Reason: component xN, ..."."""
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for e in events:
        obj = e.get("involvedObject") or e.get("regarding") or {}
        key = f"{obj.get('kind')}/{obj.get('name')}"
        if key not in objects or _stamp(e) < since or e.get("reason") in PROBE_REASONS:
            continue
        counts[(key, str(e.get("reason")))][_component(e)] += int(e.get("count") or 1)
    out = []
    for (key, reason), by in sorted(counts.items()):
        if len(by) > 1 or sum(by.values()) > 1:
            parts = ", ".join(f"{c} x{n}" for c, n in sorted(by.items()))
            out.append(f"{key} {reason}: {parts}")
    return out
