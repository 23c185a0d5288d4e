"""Human summary of a drain: what went, what stayed and why, what blocks."""

from __future__ import annotations

from collections import Counter

from nodeagent.drain.engine import DrainResult, PodOutcome
from nodeagent.types import DrainOutcome


def _by_reason(pods: list[PodOutcome]) -> str:
    return ", ".join(f"{why}: {n}" for why, n in Counter(p.detail for p in pods).most_common())


def _lines(title: str, pods: list[PodOutcome]) -> list[str]:
    return [f"  {title}: {p.ref}" + (f" ({p.detail})" if p.detail else "") for p in pods]


def _kubelet_count(result: DrainResult) -> str:
    n = len(result.deleted_for_kubelet)
    return f" deleted for the kubelet's shutdown {n}," if n else ""


def render(result: DrainResult) -> str:
    if result.outcome is DrainOutcome.DRY_RUN:
        lines = [f"node {result.node}: dry run, nothing changed"]
        lines += _lines("would evict", result.evicted)
    else:
        lines = [
            f"node {result.node}: {result.outcome} in {result.seconds:.2f}s"
            f" (evicted {len(result.evicted)},{_kubelet_count(result)}"
            f" skipped {len(result.skipped)},"
            f" blocked {len(result.blocked)}, forced {len(result.forced)})"
        ]
    if result.phases.seconds:
        lines.append(f"  phases: {result.phases.render()}")
    if result.skipped:
        lines.append(f"  skipped: {_by_reason(result.skipped)}")
    if result.detach is not None and not result.detach.skipped:
        lines.append(f"  volumes: {result.detach.summary()}")
    lines += [
        f"  grace cut: {p.ref} ({p.grace_cut[0]}s to {p.grace_cut[1]}s)"
        for p in result.evicted
        if p.grace_cut
    ]
    lines += _lines(
        "deleted past its PDB (the kubelet's graceful shutdown was stopping it)",
        result.deleted_for_kubelet,
    )
    lines += _lines("warning", result.warnings)
    lines += _lines("blocked", result.blocked)
    lines += _lines("forced", result.forced)
    if result.blocking_pdbs:
        lines.append(f"  blocking PodDisruptionBudgets: {', '.join(result.blocking_pdbs)}")
    return "\n".join(lines)
