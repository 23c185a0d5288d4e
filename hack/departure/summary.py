"""What one departure cost the clients: pure functions over the client's results."""

from __future__ import annotations

from typing import Any

ERRORS = ("refused", "reset", "timeout", "unreachable", "5xx", "other")
# Failures closer together than this are one outage.
EPISODE_GAP_S = 2.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def longest_failure(rows: list[dict[str, Any]]) -> float:
    """The longest outage: failures less than EPISODE_GAP_S apart, first start to last end."""
    fails = sorted((r["start"], r["start"] + r["seconds"]) for r in rows if not r["ok"])
    longest, begin, end = 0.0, None, 0.0
    for start, stop in fails:
        if begin is None or start - end > EPISODE_GAP_S:
            begin = start
            end = stop
        else:
            end = max(end, stop)
        longest = max(longest, end - begin)
    return longest


def summarize(departure: Any) -> dict[str, Any]:
    """One cell of the table (departure: hack.departure.scene.SceneResult)."""
    steady = departure.steady
    ok_ms = [r["seconds"] * 1000 for r in steady if r["ok"]]
    failed = [r for r in steady if not r["ok"]]
    longs = departure.long
    t0 = departure.started
    leaving = set(departure.leaving_pods)
    cell: dict[str, Any] = {
        "kind": departure.kind,
        "config": departure.config,
        "shape": departure.shape,
        "cgroup_driver": departure.cgroup_driver,
        "sent": len(steady),
        "failed": len(failed),
        "failed_pct": round(100.0 * len(failed) / len(steady), 2) if steady else None,
        **{f"failed_{e}": sum(1 for r in failed if r["error"] == e) for e in ERRORS},
        "served_by_departed": sum(1 for r in steady if r.get("served_by") in leaving),
        "retried_keepalive": sum(1 for r in steady if r.get("retried")),
        "long_sent": len(longs),
        "long_completed": sum(1 for r in longs if r["ok"]),
        "long_cut": sum(1 for r in longs if not r["ok"]),
        "longest_failure_s": round(longest_failure(steady), 2),
        "p50_ms": _round(percentile(ok_ms, 0.50)),
        "p99_ms": _round(percentile(ok_ms, 0.99)),
        "release_s": _since(departure.released, t0),
        "off_s": _since(departure.off, t0),
        "first_failure_s": _since(min((r["start"] for r in failed), default=None), t0),
        "last_failure_s": _since(max((r["start"] for r in failed), default=None), t0),
        "routed_to_departed_until_s": _since(_last_routed(departure), t0),
        "notes": departure.notes,
        # From the stateful pod's old incarnation leaving the API to its replacement Ready.
        "stateful_ready_s": _between(departure.stateful_deleted, departure.stateful_ready),
        "multi_attach_events": departure.multi_attach_events,
        # The agent's own times: the cloud's warning heard and its drain's end (from the
        # departure's start), whether that drain ended before the poweroff, and the
        # seconds from logind's PrepareForShutdown to the agent releasing its lock.
        "warning_heard_s": _since(departure.warning_heard, t0),
        "warning_drained_s": _since(departure.warning_drained, t0),
        "drained_before_off": _before(departure.warning_drained, departure.poweroff_at),
        "lock_release_s": _round(departure.lock_held_s, 2),
        # Who did what to the departing Node (witness.py): the pods bound to it after the
        # departure began, its cordon, taints and labels at the end with who set each,
        # every change with its writers, and the Events one departure had twice.
        "scheduled_onto_departing": len(departure.witnessed.scheduled_onto_departing),
        "scheduled_pods": departure.witnessed.scheduled_onto_departing,
        "final_state": departure.witnessed.final_state,
        "node_changes": departure.witnessed.node_changes,
        "duplicate_events": departure.witnessed.duplicate_events,
    }
    if longs:
        cell["long_errors"] = sorted({r["error"] for r in longs if not r["ok"]})
    return cell


def _last_routed(departure: Any) -> float | None:
    """When kube-proxy stopped routing to the departed node's pods (None: never did)."""
    ips = set(departure.leaving_ips)
    for when, endpoints in departure.endpoints:
        if not ips & {e.split(":")[0] for e in endpoints}:
            return float(when)
    return None


def _between(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 1)


def _since(when: float | None, t0: float) -> float | None:
    return None if when is None else round(when - t0, 1)


def _before(first: float | None, then: float | None) -> bool | None:
    return None if first is None or then is None else first < then


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
