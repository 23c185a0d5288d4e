"""One pod's eviction, until the API server accepts it or the drain's time is up.

The rules (the drain engine, nodeagent/drain/engine.py, keeps the phases and the wait):
429 from a PDB: retry when a PDB in that namespace changes or after a short jittered
backoff; 429 without a PDB cause: rate limited (APF), honour Retry-After; 500 for several
PDBs: report and stop hammering; 404: the pod is already gone; 401/403: the drain stops.
An eviction names the resourceVersion the pod was judged on, so one that finished
meanwhile is kept, not deleted; a 409 about the pod is judged from the watch's next copy,
and an eviction the server granted but never carried out is finished
(nodeagent/drain/grants.py). A budget that lets nothing go for a while gets an
EvictionBlocked Event on the pod.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from nodeagent import metrics
from nodeagent.context import Context
from nodeagent.drain import grants
from nodeagent.drain.evictedevents import EvictedEvents
from nodeagent.kube import identity
from nodeagent.kube.client import JSON, ApiError, Kube, KubeError, Unreachable, pods_path
from nodeagent.kube.watch import Reflector
from nodeagent.report.events import WARNING, EventRecorder
from nodeagent.types import GOING_DOWN, Milestone, milestone

log = logging.getLogger(__name__)

PDB_BACKOFF_START = 1.0
PDB_BACKOFF_MAX = 10.0
MULTI_PDB_RETRY = 30.0
BLOCKED_EVENT_AFTER = 5.0  # seconds a refusing budget lets no pod go before the Event


@dataclass
class PodOutcome:
    namespace: str
    name: str
    uid: str
    detail: str = ""  # in words, for people
    evicted_at: float | None = None  # monotonic time the eviction was accepted
    # The PodDisruptionBudgets ("namespace/name") refusing its eviction, as data: set
    # together with the detail that names them, cleared when the detail is replaced.
    pdbs: tuple[str, ...] = ()
    # (its own grace, the grace it was given) when its eviction cut its grace to the time
    # the node has left; None when it kept its own.
    grace_cut: tuple[int, int] | None = None
    # Deleted after its eviction was refused: the kubelet's graceful node
    # shutdown was already stopping it (Evictor.delete_for_kubelet_shutdown).
    kubelet_shutdown: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def note(self, detail: str, pdbs: tuple[str, ...] = ()) -> None:
        """Replace why the pod is where it is (and which PDBs hold it, if any)."""
        self.detail = detail
        self.pdbs = pdbs


def outcome_of(pod: JSON, detail: str = "") -> PodOutcome:
    meta = pod["metadata"]
    return PodOutcome(meta["namespace"], meta["name"], meta["uid"], detail)


@dataclass
class Eviction:
    pod: JSON
    outcome: PodOutcome
    accepted: bool = False
    blocked_since: float | None = None  # monotonic time of the first refusal
    refused_by: set[str] = field(default_factory=set)  # every PDB that refused it
    reported_block: bool = False


class DrainAborted(KubeError):
    """A fatal API answer (e.g. 403) stopped the drain."""


def capped_grace(own: int | None, seconds_left: float) -> int | None:
    """The grace to give a pod evicted `seconds_left` before the node goes down: None
    (its own) when its own fits, else the whole seconds left, at least 1.

    The kubelet with containerd does not shorten a kill already under way, so a pod
    evicted with more grace than the node has left holds the power-off back by the
    difference (systemd waits for its processes); it cannot finish anyway. The kubelet's
    own graceful shutdown cuts grace to its budget the same way."""
    left = max(1, int(seconds_left))
    if own is not None and own <= left:
        return None
    return left


def pdb_name(exc: ApiError) -> str | None:
    """The PDB named in a 429's DisruptionBudget cause, if it is one."""
    for cause in exc.causes:
        if cause.get("reason") == "DisruptionBudget":
            m = re.search(r"disruption budget (\S+)", str(cause.get("message", "")))
            return m.group(1) if m else "?"
    return None


def is_multiple_pdbs(exc: ApiError) -> bool:
    return exc.status == 500 and "more than one PodDisruptionBudget" in exc.message


def wait_watch(pods: Reflector, work: Context, predicate: Callable[[], bool], until: float) -> None:
    """Until `predicate` holds on the pod watch, or `until`; a shared watch stopped under
    the drain changes nothing any more, so then only the time or a cancel ends it."""
    if pods.stopped:
        work.wait(until - time.monotonic())
        return
    pods.wait_for(predicate, until)


class Evictor:
    """Evicts the pods of one drain, each by `evict` (from the drain's pool)."""

    def __init__(
        self,
        kube: Kube,
        pods: Reflector,
        work: Context,
        deadline: float,
        reason: str,
        gone: Callable[[Eviction], bool],
        events: EventRecorder | None = None,
        progress: Callable[[str], None] = lambda _msg: None,
        cut_grace: bool = False,
    ) -> None:
        """`work` is cancelled when the drain is over; `gone` says a pod needs nothing more;
        `cut_grace`: the node goes at the deadline, whatever the reason."""
        self.kube = kube
        self.pods = pods
        self.work = work
        self.deadline = deadline
        self.reason = reason
        self.gone = gone
        self.events = events
        self.said = f"Evicted by nodeagent ({reason})"  # the plain Evicted Event's words
        self.evicted_events = EvictedEvents(events.pod if events else None, self.said)
        self.progress = progress
        # A node going down takes every pod with it by the deadline: grace is cut to fit.
        self.cut_grace = cut_grace or reason in GOING_DOWN
        self.fatal: KubeError | None = None  # what stopped the drain, re-raised by it
        self._pdbs: Reflector | None = None
        self._pdb_generation: Counter[str] = Counter()
        # PDB ("namespace/name") -> monotonic time it last let a pod it had refused go
        self._budget_moved: dict[str, float] = {}
        self._pdbs_unreadable = threading.Event()  # 403 on PDBs: pace retries on backoff
        self._lock = threading.Lock()
        work.on_cancel(self._wake)

    def stop(self) -> None:
        if self._pdbs:
            self._pdbs.stop()

    def _wake(self) -> None:
        """Whatever waits on the PDB watch re-checks: the work is over."""
        if self._pdbs is not None:
            with self._pdbs.changed:
                self._pdbs.changed.notify_all()

    def evict(self, ev: Eviction) -> None:
        self._guarded(ev, self._evict_until_accepted)

    def _guarded(self, ev: Eviction, work: Callable[[Eviction], object]) -> None:
        """A pool worker's body: a fatal answer stops the drain, and nothing else is lost."""
        try:
            work(ev)
        except KubeError as exc:
            self.fatal = exc
            self.work.cancel()
        except Exception as exc:  # a worker must never die silently
            log.exception("eviction of %s failed", ev.outcome.ref)
            ev.outcome.note(f"internal error: {type(exc).__name__}: {exc}")

    def delete_for_kubelet_shutdown(self, ev: Eviction) -> None:
        """Take out at once a pod the kubelet's graceful node shutdown is already stopping.

        The kubelet's kill changes nothing in the API while the containers stop, so the pod
        stays a ready endpoint of its Services, and its PodDisruptionBudget still counts it
        healthy and refuses its eviction. One eviction is tried: where the budget allows
        it, the pod leaves as any evicted pod does (with the DisruptionTarget condition a
        Job's pod failure policy reads). Refused, the pod is deleted past its budget: the
        delete sets its deletionTimestamp, which turns its endpoint terminating at once, so
        the Services stop sending it requests while its preStop hook runs. Neither changes
        the kill under way (the kubelet keeps the shorter of two grace periods). A delete
        that fails for another reason than the pod being gone falls back to evicting."""
        self._guarded(ev, self._take_out_at_once)

    def _take_out_at_once(self, ev: Eviction) -> None:
        if not (self._evicted_at_once(ev) or self._deleted_past_budget(ev)):
            self._evict_until_accepted(ev)

    def _evicted_at_once(self, ev: Eviction) -> bool:
        """One eviction, no retry; True when done with the pod (evicted, gone, or leaving
        already: a delete could only cut the grace it has)."""
        sent = self.pods.objects.get(ev.outcome.uid) or ev.pod
        if sent["metadata"].get("deletionTimestamp"):
            self._accepted(ev)
            return True
        grace = self._grace_for(sent)
        try:
            self._post_eviction(sent, grace)
        except ApiError as exc:
            if exc.status in (401, 403):
                raise DrainAborted(f"eviction of {ev.outcome.ref} forbidden: {exc}") from None
            if exc.status == 404:
                return True
            pdb = pdb_name(exc) if exc.status == 429 else None
            ev.outcome.note(f"PDB {ev.outcome.namespace}/{pdb}" if pdb else exc.message)
            return False
        except Unreachable as exc:
            ev.outcome.note(str(exc))
            return False
        self._evicted(ev, sent, grace)
        return True

    def _deleted_past_budget(self, ev: Eviction) -> bool:
        """The delete after a refused eviction; True when done with the pod."""
        refused = ev.outcome.detail
        sent = self.pods.objects.get(ev.outcome.uid) or ev.pod
        grace = self._grace_for(sent)
        options: JSON = {"preconditions": {"uid": ev.outcome.uid}}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        try:
            self.kube.delete(pods_path(ev.outcome.namespace, ev.outcome.name), options)
        except ApiError as exc:
            if exc.status in (404, 409):  # gone, or its name is another pod's now
                return True
            if exc.status in (401, 403):
                raise DrainAborted(f"delete of {ev.outcome.ref} forbidden: {exc}") from None
            ev.outcome.note(f"delete failed, evicting instead: {exc}")
            return False
        except Unreachable as exc:
            ev.outcome.note(f"delete failed, evicting instead: {exc}")
            return False
        self._accepted(ev)
        ev.outcome.kubelet_shutdown = True
        ev.outcome.note(f"eviction refused: {refused}")
        metrics.EVICTIONS.labels("kubelet-shutdown").inc()
        self.progress(
            f"deleted {ev.outcome.ref}, its eviction refused ({refused}): the kubelet's "
            "graceful shutdown is stopping it"
        )
        self.pod_event(
            ev,
            "DeletedForKubeletShutdown",
            f"Deleted by nodeagent ({self.reason}), its eviction refused ({refused}): the "
            "kubelet's graceful node shutdown is already stopping it, and the delete takes "
            "it out of its Services while its preStop hook runs",
            WARNING,
        )
        return True

    def _evict_until_accepted(self, ev: Eviction) -> None:
        backoff = PDB_BACKOFF_START
        while not self.work.cancelled and time.monotonic() < self.deadline:
            if ev.accepted or self.gone(ev):
                return
            if self._finish_granted(ev):
                return
            sent = self.pods.objects.get(ev.outcome.uid) or ev.pod
            try:
                grace = self._grace_for(sent)
                self._post_eviction(sent, grace)
                self._evicted(ev, sent, grace)
                return
            except ApiError as exc:
                if exc.status == 404:
                    return
                if grants.is_pod_conflict(exc):  # it changed since `sent`, or was replaced
                    if self._after_conflict(ev, sent):
                        return
                    continue
                if exc.status in (401, 403):
                    raise DrainAborted(f"eviction of {ev.outcome.ref} forbidden: {exc}") from None
                backoff = self._after_refusal(ev, exc, backoff)
            except Unreachable as exc:
                ev.outcome.note(str(exc))
                self._sleep(backoff)
                backoff = min(backoff * 2, PDB_BACKOFF_MAX)

    def _grace_for(self, pod: JSON) -> int | None:
        if not self.cut_grace:
            return None
        own = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return capped_grace(own, self.deadline - time.monotonic())

    def _post_eviction(self, pod: JSON, grace: int | None = None) -> None:
        """Evict `pod` with its UID and resourceVersion as preconditions, so a pod that
        finished meanwhile is not deleted (the server lets any finished pod go, whatever
        its budget; the drain keeps them). The server replaces the version with its own
        read for an unready pod under a healthy budget: still not a finished one."""
        meta = pod["metadata"]
        preconditions = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
        options: JSON = {"preconditions": preconditions}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "deleteOptions": options,
        }
        self.kube.post(pods_path(meta["namespace"], meta["name"]) + "/eviction", body)

    def _evicted(self, ev: Eviction, sent: JSON, grace: int | None) -> None:
        self._accepted(ev)
        metrics.EVICTIONS.labels("accepted").inc()
        message = self.said
        if grace is not None:
            own = int((sent.get("spec") or {}).get("terminationGracePeriodSeconds") or 0)
            ev.outcome.grace_cut = (own, grace)
            message += f"; grace cut from {own}s to {grace}s, the time the node has left"
            self.progress(f"evicted {ev.outcome.ref} with its grace cut from {own}s to {grace}s")
            self.pod_event(ev, "Evicted", message)
        else:
            self.evicted_events.evicted(ev.pod)

    def send_combined_events(self) -> None:
        """The combined `Evicted` Event of each namespace with many plain evictions
        since the last call (nodeagent/drain/evictedevents.py)."""
        self.evicted_events.send_combined()

    def _after_conflict(self, ev: Eviction, sent: JSON) -> bool:
        """After a 409 for `sent`: once the watch shows the pod's next version, finish
        the eviction if the server granted it anyway (see nodeagent.drain.grants).
        True when done with the pod; False to judge it again (also when the watch showed
        no newer version before the deadline: no evidence of a grant)."""
        while not self.work.cancelled and time.monotonic() < self.deadline:
            seen = self._next_version(ev, sent)
            if seen is None or self.gone(ev):
                return True
            if not grants.granted_despite_conflict(sent, seen):
                return False
            grace = self._grace_for(seen)
            try:
                grants.complete(self.kube, seen, grace)
            except ApiError as exc:
                if exc.status == 409:  # changed again: Ready throughout is still the test
                    sent = seen
                    continue
                return exc.status == 404
            except KubeError as exc:
                ev.outcome.note(f"could not finish its granted eviction: {exc}")
                return False
            self._evicted(ev, seen, grace)
            return True
        return True

    def _next_version(self, ev: Eviction, sent: JSON) -> JSON | None:
        """The watch's copy of the pod once it differs from `sent`, or as it is at the
        deadline or on cancellation (None: gone)."""
        version = sent["metadata"]["resourceVersion"]

        def moved() -> bool:
            pod = self.pods.objects.get(ev.outcome.uid)
            return (
                self.work.cancelled
                or (pod or {}).get("metadata", {}).get("resourceVersion") != version
            )

        wait_watch(self.pods, self.work, moved, self.deadline)
        return self.pods.objects.get(ev.outcome.uid)

    def _after_refusal(self, ev: Eviction, exc: ApiError, backoff: float) -> float:
        """Wait as the refusal asks; return the next backoff. (A 409 that is not about
        the pod, e.g. the handler out of retries on the PDB's own write, lands here.)"""
        namespace = ev.outcome.namespace
        pdb = pdb_name(exc) if exc.status == 429 else None
        if pdb:
            if self._finish_granted(ev, self._pdb_named(namespace, pdb)):
                return backoff
            message = exc.causes[0].get("message", exc)
            self._blocked(ev, f"PDB {namespace}/{pdb}: {message}", (f"{namespace}/{pdb}",))
            self._wait_pdb_change(namespace, backoff * random.uniform(0.8, 1.2))
            return min(backoff * 2, PDB_BACKOFF_MAX)
        if exc.status == 429:
            self._blocked(ev, f"API rate limited: {exc.message}")
            self._sleep(exc.retry_after or backoff)
            return min(backoff * 2, PDB_BACKOFF_MAX)
        if is_multiple_pdbs(exc):
            self._blocked(ev, f"MultiplePDBs: {exc.message}")
            self._sleep(MULTI_PDB_RETRY)
            return backoff
        ev.outcome.note(f"eviction failed: {exc}")
        self._sleep(backoff)
        return min(backoff * 2, PDB_BACKOFF_MAX)

    def _finish_granted(self, ev: Eviction, pdb: JSON | None = None) -> bool:
        """Delete a pod whose eviction the API server granted but never carried out
        (an earlier drain was cut off between the two): why that is safe is in
        nodeagent.grants. True when done."""
        pod = self.pods.objects.get(ev.outcome.uid)
        grant = grants.grant_of(pod, pdb) if pod else None
        if pod is None or grant is None:
            return False
        try:
            if not grants.is_fresh(grant, self.kube.server_time()):
                return False
            grants.complete(self.kube, pod, self._grace_for(pod))
        except ApiError as exc:
            # 404: gone already. 409: another pod, or it changed: judge it again.
            return exc.status == 404
        except KubeError as exc:
            log.info("%s: could not finish its granted eviction: %s", ev.outcome.ref, exc)
            return False
        self._accepted(ev)
        metrics.EVICTIONS.labels("granted").inc()  # a grant an earlier drain left, finished
        when = datetime.fromtimestamp(grant.at, UTC).strftime("%H:%M:%SZ")
        message = f"Finished the eviction granted at {when} ({grant.source}) but never carried out"
        self.progress(f"{ev.outcome.ref}: {message[0].lower()}{message[1:]}")
        self.pod_event(ev, "Evicted", message)
        return True

    def _pdb_named(self, namespace: str, name: str) -> JSON | None:
        """The PDB from the watch's cache, where PDBs are readable (None otherwise)."""
        for pdb in self._pdbs.snapshot() if self._pdbs else []:
            if (pdb["metadata"]["namespace"], pdb["metadata"]["name"]) == (namespace, name):
                return pdb
        return None

    def _accepted(self, ev: Eviction) -> None:
        ev.accepted = True
        ev.outcome.evicted_at = time.monotonic()
        milestone(
            log,
            Milestone.EVICTED,
            "%s: on its way off the node",
            ev.outcome.ref,
            reason=self.reason,
            pod=ev.outcome.ref,
        )
        for pdb in ev.refused_by:  # the budgets that had refused it let it go
            self._budget_moved[pdb] = ev.outcome.evicted_at
        ev.outcome.note("")

    def _blocked(self, ev: Eviction, detail: str, pdbs: tuple[str, ...] = ()) -> None:
        ev.outcome.note(detail, pdbs)
        ev.refused_by.update(pdbs)
        now = time.monotonic()
        if ev.blocked_since is None:
            ev.blocked_since = now
            metrics.EVICTIONS.labels("blocked").inc()  # once per pod and drain
            self.progress(f"{ev.outcome.ref}: eviction blocked: {detail}")
        # The Event only for a budget that lets nothing go for a while: one letting pods
        # go one at a time (as fast as replacements get Ready) refuses each pod until its
        # turn, however long the queue; an Event each would double the drain's writes.
        since = max([ev.blocked_since, *(self._budget_moved.get(p, 0.0) for p in pdbs)])
        if not ev.reported_block and now - since >= BLOCKED_EVENT_AFTER:
            ev.reported_block = True
            self.pod_event(ev, "EvictionBlocked", detail, WARNING)

    def _sleep(self, seconds: float) -> None:
        self.work.wait(max(0.0, seconds))

    def _wait_pdb_change(self, namespace: str, seconds: float) -> None:
        """Sleep up to `seconds`, waking at once when a PDB in `namespace` changes."""
        pdbs = self._pdb_reflector()
        if self._pdbs_unreadable.is_set():  # nothing will wake us: wait out the backoff
            self._sleep(seconds)
            return
        seen = self._pdb_generation[namespace]
        until = min(time.monotonic() + seconds, self.deadline)
        pdbs.wait_for(lambda: self.work.cancelled or self._pdb_generation[namespace] != seen, until)

    def _pdb_reflector(self) -> Reflector:
        # Started on the first PDB refusal only: drains that meet no PDB pay nothing.
        with self._lock:
            if self._pdbs is None:

                def bump(_kind: str, pdb: JSON) -> None:
                    self._pdb_generation[pdb["metadata"]["namespace"]] += 1

                self._pdbs = Reflector(
                    self.kube,
                    "/apis/policy/v1/poddisruptionbudgets",
                    resource="poddisruptionbudgets",
                    on_change=bump,
                    on_forbidden=self._pdbs_forbidden,
                ).start()
            return self._pdbs

    def _pdbs_forbidden(self, exc: ApiError) -> None:
        self._pdbs_unreadable.set()
        identity.pdbs_forbidden(exc)
        self.progress("PodDisruptionBudgets not readable: retrying refused evictions on backoff")

    def pod_event(self, ev: Eviction, reason: str, message: str, kind: str = "Normal") -> None:
        if self.events:
            self.events.pod(ev.pod, reason, message, kind)
