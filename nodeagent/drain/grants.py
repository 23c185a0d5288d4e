"""Evictions the API server granted but never carried out, finished safely.

The eviction handler (pkg/registry/core/pod/storage/eviction.go, Kubernetes 1.35)
first spends the PodDisruptionBudget (checkAndDecrement: `disruptionsAllowed - 1`,
`status.disruptedPods[pod] = now`), then writes the pod's `DisruptionTarget`
condition (reason `EvictionByEvictionAPI`), then deletes the pod, the last two with
the request's context. An agent killed (or a connection cut) between those writes
leaves a pod that the budget already counts as gone but that nobody deletes; until
the disruption controller gives up on the entry (DeletionTimeout, 2 minutes) the
budget refuses every other eviction it covers, and the drain stalls.

Finishing such an eviction is a DELETE of that pod, and it is safe because it spends
nothing the budget has not already spent:

- the grant is recognised from what the API server wrote: the pod's condition, which
  the handler writes only after the budget allowed the eviction, or the PDB's
  `disruptedPods` entry where PDBs are readable (the kubelet's identity cannot read
  them, the condition needs no extra permission);
- it is fresh, judged by the API server's clock (its own timestamps against its Date
  header), well inside the 2 minutes during which the disruption controller keeps
  counting the pod as disrupted; after that the pod counts as healthy again, and only
  a new eviction may take it;
- the pod is the one granted: no deletionTimestamp, the delete carries its UID and
  the resourceVersion the decision was made on (a pod changed since, e.g. turned
  Ready, fails the precondition and is judged again), and with the condition its
  readiness has not changed since the grant (the handler also lets an unready pod
  go without spending budget; once Ready again it is protected again);
- the delete uses the pod's own grace period, as the eviction would have.

The drain's own evictions carry the resourceVersion they were judged on, so a pod that
changed since (above all one that just finished: the handler lets any finished pod go
whatever its budget, and deletes it) gets a 409, not a delete. A 409 about the pod can
also come after the budget was spent, with nothing written to the pod: the handler
checks the precondition only when it writes the pod, after checkAndDecrement. Which one
it was shows in the copy the watch delivers next (`granted_despite_conflict`). (For an
unready pod under a healthy budget the handler replaces the version with its own read;
a pod finished by then still fails it.)
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent import objects
from nodeagent.drain import podfilter
from nodeagent.kube.client import JSON, ApiError, Kube, api_time, pods_path

DISRUPTION_TARGET = "DisruptionTarget"
BY_EVICTION_API = "EvictionByEvictionAPI"
# The disruption controller forgets a grant after 2 minutes (DeletionTimeout in
# pkg/controller/disruption); half of it leaves room for the delete to land.
FRESH_FOR = 60.0
# Timestamps and the Date header are whole seconds: a grant may look up to this much
# younger than the server's "now".
CLOCK_SLACK = 2.0


def _condition(pod: JSON, ctype: str) -> JSON:
    return objects.condition(pod, ctype) or {}


@dataclass(frozen=True)
class Grant:
    at: float  # API server time the eviction was granted
    source: str  # "condition" | "PDB <name>"


def grant_of(pod: JSON, pdb: JSON | None = None) -> Grant | None:
    """The latest granted eviction of `pod` that was never carried out, or None."""
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        return None  # carried out (or being carried out) already
    grants = []
    cond = _condition(pod, DISRUPTION_TARGET)
    at = api_time(cond.get("lastTransitionTime"))
    if cond.get("status") == "True" and cond.get("reason") == BY_EVICTION_API and at:
        ready_since = api_time(_condition(pod, "Ready").get("lastTransitionTime"))
        if ready_since is None or ready_since <= at:
            grants.append(Grant(at, "condition"))
    if pdb is not None:
        entry = api_time(((pdb.get("status") or {}).get("disruptedPods") or {}).get(meta["name"]))
        created = api_time(meta.get("creationTimestamp"))
        # Entries are keyed by name: one older than this pod was for a predecessor.
        if entry and created is not None and created <= entry:
            grants.append(Grant(entry, f"PDB {pdb['metadata']['name']}"))
    return max(grants, key=lambda g: g.at, default=None)


def is_fresh(grant: Grant, server_now: float) -> bool:
    return -CLOCK_SLACK <= server_now - grant.at < FRESH_FOR


def _ready_since(pod: JSON) -> str | None:
    """When the pod last turned Ready, if it is Ready (and says when)."""
    ready = _condition(pod, "Ready")
    since = ready.get("lastTransitionTime")
    return str(since) if ready.get("status") == "True" and since else None


def is_pod_conflict(exc: ApiError) -> bool:
    """A 409 about the pod itself (its UID or resourceVersion precondition failed).

    The eviction handler also answers 409 when its own retries of the PDB's status write
    run out under contention: nothing was spent or written then, and the eviction is
    simply retried."""
    details = exc.body.get("details") or {}
    kind = str(details.get("kind") or "").lower()
    about_pod = not details.get("group") and kind in ("pod", "pods")
    return exc.status == 409 and exc.reason == "Conflict" and about_pod


def granted_despite_conflict(sent: JSON, seen: JSON) -> bool:
    """Whether the eviction of `sent` that the API server refused with a 409 spent the
    budget, judged from `seen`, the next version of the same pod.

    The handler answers 409 to a stale resourceVersion in three ways: the pod could go
    without a budget (finished, pending, being deleted): nothing spent, and `seen` shows
    why; it was unready under a healthy budget: nothing spent, and the handler had
    replaced the precondition with its own read, so the pod changed after that; or the
    budget was spent first (a Ready pod), or no budget covered it. A pod Ready in both
    copies with the same Ready transition was Ready when the handler read it in between:
    the last case, and deleting it now spends nothing a budget has not granted.

    Transition times are whole seconds: a pod that turned unready and Ready again within
    the second it had turned Ready looks Ready throughout. Its eviction could then go
    without a budget spent; that takes two readiness flips inside one second during the
    eviction's round trip. `seen` at the version sent is no evidence of anything.
    """
    meta = seen["metadata"]
    if meta["uid"] != sent["metadata"]["uid"] or meta.get("deletionTimestamp"):
        return False
    if meta.get("resourceVersion") == sent["metadata"].get("resourceVersion"):
        return False
    if podfilter.is_finished(seen):
        return False
    since = _ready_since(seen)
    return since is not None and since == _ready_since(sent)


def complete(kube: Kube, pod: JSON, grace: int | None = None) -> None:
    """Delete the granted pod: same UID, same resourceVersion, its own grace period
    unless `grace` (the eviction's) is given.
    Raises ApiError (409: it changed or is another pod; 404: gone)."""
    meta = pod["metadata"]
    options: JSON = {
        "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
    }
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    kube.delete(pods_path(meta["namespace"], meta["name"]), options)
