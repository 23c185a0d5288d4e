"""The drain engine: cordon with a marker, evict in priority tiers, wait by watching.

One deadline bounds everything. Evictions run concurrently and follow explicit retry
rules (429 from a PDB: retry when a PDB in that namespace changes or after a short
jittered backoff; 429 without a PDB cause: rate limited, honour Retry-After; 500 for
several PDBs: report and stop hammering; 404: the pod is already gone). An eviction
names the resourceVersion the pod was judged on, so one that finished meanwhile is
kept, not deleted (nodeagent.drain.grants). A pod counts as gone when a pod with its
UID no longer runs on the node, as seen by a watch of the node's pods, never by
sleeping.

A pod whose object stays on the node is never counted as evicted: held by finalizers
after its containers stopped, or stuck terminating past its grace period, it is
reported as left (with the finalizers), the outcome says so and the exit code is 3.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum, IntEnum, StrEnum

from nodeagent.context import Context
from nodeagent.drain import grants, podfilter
from nodeagent.fence import marker as fence
from nodeagent.kube import identity
from nodeagent.kube.client import JSON, ApiError, Kube, KubeError, Unreachable, api_time, pods_path
from nodeagent.kube.watch import Reflector, node_pods
from nodeagent.report import metrics
from nodeagent.report.events import WARNING, EventRecorder

log = logging.getLogger(__name__)

# A pod this far past its grace period is not leaving by itself: the drain stops
# waiting for it (and reports it as left).
STUCK_AFTER_GRACE = 30.0
PDB_BACKOFF_START = 1.0
PDB_BACKOFF_MAX = 10.0
MULTI_PDB_RETRY = 30.0
PROGRESS_EVERY = 5.0
BLOCKED_EVENT_AFTER = 5.0  # seconds a refusing budget lets no pod go before the Event


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    DEADLINE = 3
    REFUSED = 4


@dataclass(frozen=True)
class DrainOptions:
    """How one drain behaves. Durations are seconds."""

    reason: str = "manual"
    deadline: float = 120.0
    do_not_disrupt_ceiling: float = 60.0
    force_after_deadline: bool = False
    force_grace_seconds: int | None = None  # None: each pod's own grace period
    critical_reserve: float = 0.2  # share of the deadline kept for system-critical pods
    dry_run: bool = False
    concurrency: int = 32
    # After the deadline: time for deleting what is left (when forced) and recording the
    # result. No request of the drain outlives deadline + finish_grace.
    finish_grace: float = 10.0
    # The agent's own marker with one of these reasons, written in this boot, is left
    # alone (an evacuation never takes over a shutdown's cordon).
    keep_marker_reasons: tuple[str, ...] = ()
    stuck_after: float = STUCK_AFTER_GRACE
    finished_pods: podfilter.FinishedPods = podfilter.FinishedPods.KEEP


class DrainOutcome(StrEnum):
    """How a drain ended. A StrEnum: its value is what the node's drain-result
    annotation, the metrics' result label and the summary show."""

    DRAINED = "drained"
    FORCED = "forced"  # drained, some pods deleted after the deadline
    TIMED_OUT = "timed-out"  # the deadline came with pods still leaving
    INCOMPLETE = "incomplete"  # pods held by finalizers or stuck terminating
    CANCELLED = "cancelled"
    DRY_RUN = "dry-run"


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

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def note(self, detail: str, pdbs: tuple[str, ...] = ()) -> None:
        """Replace why the pod is where it is (and which PDBs hold it, if any)."""
        self.detail = detail
        self.pdbs = pdbs


@dataclass
class DrainResult:
    node: str
    outcome: DrainOutcome = DrainOutcome.DRAINED
    seconds: float = 0.0
    cordoned: bool = False
    evicted: list[PodOutcome] = field(default_factory=list)
    skipped: list[PodOutcome] = field(default_factory=list)
    blocked: list[PodOutcome] = field(default_factory=list)  # every pod left, and why
    forced: list[PodOutcome] = field(default_factory=list)
    warnings: list[PodOutcome] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.DEADLINE if self.blocked else ExitCode.OK

    @property
    def blocking_pdbs(self) -> list[str]:
        return sorted({pdb for p in self.blocked for pdb in p.pdbs})


class PodState(Enum):
    """Where an evicted pod is, for the drain's purpose."""

    PRESENT = "present"  # still there and expected to go: wait for it
    GONE = "gone"  # off the node (or finished, with nothing keeping the object)
    HELD = "held"  # its containers stopped, but finalizers keep the object
    STUCK = "stuck"  # past its grace period by stuck_after and still there


def pod_state(
    pod: JSON | None,
    now: float,
    stuck_after: float,
    finished: podfilter.FinishedPods = podfilter.FinishedPods.KEEP,
) -> PodState:
    """Decide from the pod as watched (None: no pod with that UID on the node).
    With FinishedPods.DELETE a finished pod is not done with until it is deleted."""
    if pod is None:
        return PodState.GONE
    meta = pod["metadata"]
    finalizers = meta.get("finalizers") or []
    deleted_at = meta.get("deletionTimestamp")
    if not deleted_at and podfilter.is_finished(pod) and finished is podfilter.FinishedPods.DELETE:
        return PodState.PRESENT
    if podfilter.is_finished(pod) and not (deleted_at and finalizers):
        return PodState.GONE  # nothing runs, and nothing keeps a deleted object
    if not deleted_at:
        return PodState.PRESENT
    # deletionTimestamp is when the grace period ends; the kubelet's last delete
    # (grace 0, containers stopped) moves it to that moment.
    if now <= (api_time(deleted_at) or 0.0) + stuck_after:
        return PodState.PRESENT
    stopped = podfilter.is_finished(pod) or meta.get("deletionGracePeriodSeconds") == 0
    return PodState.HELD if finalizers and stopped else PodState.STUCK


def left_detail(pod: JSON, state: PodState, now: float) -> str:
    """Why a pod that is still on the node is there, in words for the summary."""
    finalizers = ", ".join(pod["metadata"].get("finalizers") or [])
    held = f"held by finalizers {finalizers}" if finalizers else ""
    if state is PodState.HELD:
        return f"{held} after its containers stopped"
    past = now - (api_time(pod["metadata"]["deletionTimestamp"]) or now)
    stuck = f"stuck terminating {past:.0f}s past its grace period"
    return f"{stuck}; {held}" if held else stuck


def _outcome(pod: JSON, detail: str = "") -> PodOutcome:
    meta = pod["metadata"]
    return PodOutcome(meta["namespace"], meta["name"], meta["uid"], detail)


@dataclass
class _Eviction:
    pod: JSON
    outcome: PodOutcome
    accepted: bool = False
    blocked_since: float | None = None  # monotonic time of the first refusal
    refused_by: set[str] = field(default_factory=set)  # every PDB that refused it
    reported_block: bool = False


class DrainAborted(KubeError):
    """A fatal API answer (e.g. 403) stopped the drain."""


def pdb_name(exc: ApiError) -> str | None:
    """The PDB named in a 429's DisruptionBudget cause, if it is one."""
    for cause in exc.causes:
        if cause.get("reason") == "DisruptionBudget":
            m = re.search(r"disruption budget (\S+)", str(cause.get("message", "")))
            return m.group(1) if m else "?"
    return None


def is_multiple_pdbs(exc: ApiError) -> bool:
    return exc.status == 500 and "more than one PodDisruptionBudget" in exc.message


class Drain:
    """Drain one node. Construct, then `run(ctx)` once.

    The context bounds the drain (its deadline, if earlier than the options') and
    cancels it: what is already evicted stays evicted, nothing new starts.
    """

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        options: DrainOptions,
        events: EventRecorder | None = None,
        progress: Callable[[str], None] = lambda _msg: None,
        *,
        pods: Reflector | None = None,
    ) -> None:
        """`pods`: a watch of this node's pods shared with others (the daemon's), held
        running while the drain needs it; without it the drain keeps its own."""
        self.kube = kube
        self.node_name = node_name
        self.opts = options
        self.events = events
        self.progress = progress
        self.result = DrainResult(node_name)
        # Set by run(): the drain's context (cancelled = called off) and its child for
        # the work, also cancelled when the drain is over or failed.
        self._ctx = Context()
        self._work = self._ctx
        self._fatal: KubeError | None = None
        self._owns_pods = pods is None
        self._pods = pods if pods is not None else node_pods(kube, node_name)
        self._pdbs: Reflector | None = None
        self._pdb_generation: Counter[str] = Counter()
        # PDB ("namespace/name") -> monotonic time it last let a pod it had refused go
        self._budget_moved: dict[str, float] = {}
        self._pdbs_unreadable = threading.Event()  # 403 on PDBs: pace retries on backoff
        self._lock = threading.Lock()
        self._start = 0.0
        self._deadline = 0.0

    # -- public ---------------------------------------------------------------

    def run(self, ctx: Context | None = None) -> DrainResult:
        self._start = time.monotonic()
        with (ctx or Context.background()).with_timeout(self.opts.deadline) as self._ctx:
            self._work = self._ctx.child()
            self._work.on_cancel(self._wake)
            self._deadline = self._ctx.deadline
            self.kube = self.kube.bounded(self._deadline + self.opts.finish_grace)
            if self._owns_pods:
                self._pods.kube = self.kube
                self._pods.on_restart = lambda why: log.info("pod watch restarted: %s", why)
            # A dry run lists once; a drain follows the pods by watching them.
            watching = nullcontext() if self.opts.dry_run else self._pods.hold()
            try:
                node = fence.get_node(self.kube, self.node_name)
                with watching:
                    return self._run(node)
            finally:
                self._work.cancel()
                if self._pdbs:
                    self._pdbs.stop()
                self.result.seconds = time.monotonic() - self._start

    @property
    def _cancelled(self) -> bool:
        return self._ctx.cancelled

    def _wake(self) -> None:
        """Whatever waits on a watch re-checks: the work is over."""
        for watch in (self._pods, self._pdbs):
            if watch is not None:
                with watch.changed:
                    watch.changed.notify_all()

    # -- phases ---------------------------------------------------------------

    def _run(self, node: JSON) -> DrainResult:
        if self.opts.dry_run:
            self.result.outcome = DrainOutcome.DRY_RUN
            self.result.evicted = [_outcome(p) for p in self._plan(self._list_pods())]
            return self.result
        self._wait_synced()
        if self._cancelled:
            self.result.outcome = DrainOutcome.CANCELLED
            return self.result
        self._fence(node)
        # Planned from what the watch shows once the node is cordoned (kubectl lists after
        # its cordon): a pod bound before the cordon is in the plan unless its watch event
        # is still in flight (milliseconds; kubectl's fresh list has no such lag, and
        # neither closes the race with a binding the scheduler made before the cordon).
        evictions = self._evict_tiers(self._plan(self._pods.snapshot()))
        self._finish(node, evictions)
        return self.result

    def _list_pods(self) -> list[JSON]:
        """The node's pods, listed once (a dry run starts no watch)."""
        query = {"fieldSelector": f"spec.nodeName={self.node_name}"}
        return list(self.kube.request("GET", "/api/v1/pods", query=query)["items"])

    def _wait_synced(self) -> None:
        """Until the pod watch has listed the node's pods; raises if it cannot before the
        deadline (before anything is changed: the node is not cordoned yet)."""
        if self._ctx.expired:  # nothing may start once the deadline passed (a 0 s budget)
            raise KubeError(
                f"could not list pods on node {self.node_name}: no answer within the drain "
                f"deadline ({self.opts.deadline:g}s)"
            )
        # Evictions start only from a synced mirror: a pod is gone when the watch
        # no longer sees its UID on the node, which means nothing before the first list.
        self._pods.wait_for(
            lambda: self._pods.synced.is_set() or self._work.cancelled, self._deadline
        )
        if not self._pods.synced.is_set() and not self._cancelled:
            # No failure recorded means the list was still in flight at the deadline.
            why = self._pods.stats.last_error or (
                f"no answer within the drain deadline ({self.opts.deadline:g}s)"
            )
            raise KubeError(f"could not list pods on node {self.node_name}: {why}")

    def _plan(self, pods: list[JSON]) -> list[JSON]:
        evict = []
        for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
            why = podfilter.skip_reason(pod, self.opts.finished_pods)
            if why:
                self.result.skipped.append(_outcome(pod, why))
                continue
            evict.append(pod)
            for note in podfilter.warnings(pod):
                self.result.warnings.append(_outcome(pod, note))
        return evict

    def _fence(self, node: JSON) -> None:
        self.result.cordoned = fence.cordon(
            self.kube, node, self.opts.reason, keep=self.opts.keep_marker_reasons
        )
        if self.result.cordoned:
            self.progress(f"cordoned node {self.node_name} (reason {self.opts.reason})")
            self._node_event(node, "Cordoned", f"Cordoned by nodeagent ({self.opts.reason})")
        else:
            self.progress(f"node {self.node_name} was already cordoned by someone else")
        self._node_event(
            node,
            "DrainStarted",
            f"Draining for {self.opts.reason}, deadline {self.opts.deadline:.0f}s",
        )

    def _evict_tiers(self, pods: list[JSON]) -> list[_Eviction]:
        tiers = podfilter.tiers(pods)
        budget = self._deadline - self._start  # the options' deadline, or the context's
        reserve_until = self._deadline - budget * self.opts.critical_reserve
        has_critical = any(podfilter.is_critical(p) for p in pods)
        evictions: list[_Eviction] = []
        with ThreadPoolExecutor(
            max_workers=max(1, self.opts.concurrency), thread_name_prefix="evict"
        ) as pool:
            for tier in tiers:
                critical = podfilter.is_critical(tier.pods[0])
                tier_until = self._deadline if critical or not has_critical else reserve_until
                batch = self._run_tier(pool, tier, tier_until)
                evictions += batch
                if self._work.cancelled:
                    break
            self._wait_gone(evictions, self._deadline)
            self._work.cancel()  # workers still retrying give up now
        if self._fatal:
            raise self._fatal
        return evictions

    def _run_tier(
        self, pool: ThreadPoolExecutor, tier: podfilter.Tier, until: float
    ) -> list[_Eviction]:
        batch = [_Eviction(p, _outcome(p)) for p in tier.pods]
        if tier.wait_for_exit:
            ceiling = min(self._start + self.opts.do_not_disrupt_ceiling, until)
            self.progress(
                f"waiting up to {max(0.0, ceiling - time.monotonic()):.0f}s for "
                f"{len(batch)} do-not-disrupt pods to finish on their own"
            )
            self._wait_gone(batch, ceiling)
        batch = [e for e in batch if not self._gone(e)]
        if batch:
            self.progress(f"evicting {len(batch)} pods ({tier.name})")
        for ev in batch:
            pool.submit(self._evict, ev)
        self._wait_gone(batch, until)
        return batch

    def _finish(self, node: JSON, evictions: list[_Eviction]) -> None:
        states = {id(e): self._state(e) for e in evictions}
        gone = [e for e in evictions if states[id(e)] is PodState.GONE]
        left = [e for e in evictions if states[id(e)] is not PodState.GONE]
        self.result.evicted = [e.outcome for e in gone]
        if self._cancelled:
            self.result.evicted += [e.outcome for e in left if e.accepted]
            self.result.outcome = DrainOutcome.CANCELLED
            return
        waiting = [e for e in left if states[id(e)] is PodState.PRESENT]
        for ev in left:
            self._describe_left(ev, states[id(ev)])
        if waiting and self.opts.force_after_deadline:
            self._force(waiting)
            left = [e for e in left if e.outcome not in self.result.forced]
        self.result.blocked = [e.outcome for e in left]
        if waiting and left:
            self.result.outcome = DrainOutcome.TIMED_OUT
        elif left:
            self.result.outcome = DrainOutcome.INCOMPLETE
        else:
            self.result.outcome = (
                DrainOutcome.FORCED if self.result.forced else DrainOutcome.DRAINED
            )
        self._report_end(node)

    def _describe_left(self, ev: _Eviction, state: PodState) -> None:
        pod = self._pods.objects.get(ev.outcome.uid)
        if pod is None:
            return
        if state is not PodState.PRESENT:
            ev.outcome.note(left_detail(pod, state, time.time()))
            return
        ev.outcome.detail = ev.outcome.detail or "still terminating"
        finalizers = pod["metadata"].get("finalizers") or []
        if finalizers:
            ev.outcome.detail += f"; finalizers {', '.join(finalizers)}"

    def _report_end(self, node: JSON) -> None:
        left = ", ".join(f"{p.ref} ({p.detail})" for p in self.result.blocked)
        if not self.result.blocked:
            self._node_event(node, "Drained", f"Drained in {time.monotonic() - self._start:.1f}s")
        elif self.result.outcome is DrainOutcome.TIMED_OUT:
            self._node_event(node, "DrainTimedOut", f"Deadline reached; left: {left}", WARNING)
        else:
            self._node_event(node, "DrainIncomplete", f"Pods left on the node: {left}", WARNING)
        if self.result.cordoned:
            try:
                fence.record_result(self.kube, self.node_name, self.result.outcome)
            except KubeError as exc:
                log.warning("could not record drain result: %s", exc)

    # -- waiting --------------------------------------------------------------

    def _state(self, ev: _Eviction) -> PodState:
        pod = self._pods.objects.get(ev.outcome.uid)
        return pod_state(pod, time.time(), self.opts.stuck_after, self.opts.finished_pods)

    def _gone(self, ev: _Eviction) -> bool:
        """Nothing more to wait for (the pod may still be left: see _state)."""
        return self._state(ev) is not PodState.PRESENT

    def _wait_gone(self, batch: list[_Eviction], until: float) -> None:
        # Each check resumes where the last one stopped (checking the whole batch on every
        # watch event was quadratic in its size), and a last full pass confirms: a pod can
        # come back (a finished one held by finalizers, then deleted, waits again).
        waiting = deque(batch)

        def done() -> bool:
            while waiting and self._gone(waiting[0]):
                waiting.popleft()
            if not waiting:
                waiting.extend(e for e in batch if not self._gone(e))
            return self._work.cancelled or not waiting

        next_report = time.monotonic() + PROGRESS_EVERY
        while not done() and time.monotonic() < until:
            # Wake at least every few seconds: stuck-terminating is a matter of time.
            self._wait_watch(done, min(until, next_report))
            if time.monotonic() >= next_report and not done():
                self._report_waiting(batch)
                next_report = time.monotonic() + PROGRESS_EVERY

    def _wait_watch(self, predicate: Callable[[], bool], until: float) -> None:
        if self._pods.stopped:  # a shared watch stopped under the drain: nothing will change
            self._work.wait(until - time.monotonic())
            return
        self._pods.wait_for(predicate, until)

    def _report_waiting(self, batch: list[_Eviction]) -> None:
        left = [e for e in batch if not self._gone(e)]
        names = ", ".join(
            f"{e.outcome.ref}{' [' + e.outcome.detail + ']' if e.outcome.detail else ''}"
            for e in left[:5]
        )
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        remaining = self._deadline - time.monotonic()
        self.progress(f"waiting for {len(left)} pods ({remaining:.0f}s left): {names}{more}")

    # -- eviction -------------------------------------------------------------

    def _evict(self, ev: _Eviction) -> None:
        try:
            self._evict_until_accepted(ev)
        except KubeError as exc:
            self._fatal = exc
            self._work.cancel()
        except Exception as exc:  # a worker must never die silently
            log.exception("eviction of %s failed", ev.outcome.ref)
            ev.outcome.note(f"internal error: {type(exc).__name__}: {exc}")

    def _evict_until_accepted(self, ev: _Eviction) -> None:
        backoff = PDB_BACKOFF_START
        while not self._work.cancelled and time.monotonic() < self._deadline:
            if ev.accepted or self._gone(ev):
                return
            if self._finish_granted(ev):
                return
            sent = self._pods.objects.get(ev.outcome.uid) or ev.pod
            try:
                self._post_eviction(sent)
                self._evicted(ev)
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

    def _post_eviction(self, pod: JSON) -> None:
        """Evict `pod` with its UID and resourceVersion as preconditions, so a pod that
        finished meanwhile is not deleted (the server lets any finished pod go, whatever
        its budget; the drain keeps them). The server replaces the version with its own
        read for an unready pod under a healthy budget: still not a finished one."""
        meta = pod["metadata"]
        preconditions = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "deleteOptions": {"preconditions": preconditions},
        }
        self.kube.post(pods_path(meta["namespace"], meta["name"]) + "/eviction", body)

    def _evicted(self, ev: _Eviction) -> None:
        self._accepted(ev)
        metrics.EVICTIONS.labels("accepted").inc()
        self._pod_event(ev, "Evicted", f"Evicted by nodeagent ({self.opts.reason})")

    def _after_conflict(self, ev: _Eviction, sent: JSON) -> bool:
        """After a 409 for `sent`: once the watch shows the pod's next version, finish
        the eviction if the server granted it anyway (see nodeagent.drain.grants).
        True when done with the pod; False to judge it again (also when the watch showed
        no newer version before the deadline: no evidence of a grant)."""
        while not self._work.cancelled and time.monotonic() < self._deadline:
            seen = self._next_version(ev, sent)
            if seen is None or self._gone(ev):
                return True
            if not grants.granted_despite_conflict(sent, seen):
                return False
            try:
                grants.complete(self.kube, seen)
            except ApiError as exc:
                if exc.status == 409:  # changed again: Ready throughout is still the test
                    sent = seen
                    continue
                return exc.status == 404
            except KubeError as exc:
                ev.outcome.note(f"could not finish its granted eviction: {exc}")
                return False
            self._evicted(ev)
            return True
        return True

    def _next_version(self, ev: _Eviction, sent: JSON) -> JSON | None:
        """The watch's copy of the pod once it differs from `sent`, or as it is at the
        deadline or on cancellation (None: gone)."""
        version = sent["metadata"]["resourceVersion"]

        def moved() -> bool:
            pod = self._pods.objects.get(ev.outcome.uid)
            return (
                self._work.cancelled
                or (pod or {}).get("metadata", {}).get("resourceVersion") != version
            )

        self._wait_watch(moved, self._deadline)
        return self._pods.objects.get(ev.outcome.uid)

    def _after_refusal(self, ev: _Eviction, exc: ApiError, backoff: float) -> float:
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

    def _finish_granted(self, ev: _Eviction, pdb: JSON | None = None) -> bool:
        """Delete a pod whose eviction the API server granted but never carried out
        (an earlier drain was cut off between the two): why that is safe is in
        nodeagent.grants. True when done."""
        pod = self._pods.objects.get(ev.outcome.uid)
        grant = grants.grant_of(pod, pdb) if pod else None
        if pod is None or grant is None:
            return False
        try:
            if not grants.is_fresh(grant, self.kube.server_time()):
                return False
            grants.complete(self.kube, pod)
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
        self._pod_event(ev, "Evicted", message)
        return True

    def _pdb_named(self, namespace: str, name: str) -> JSON | None:
        """The PDB from the watch's cache, where PDBs are readable (None otherwise)."""
        for pdb in self._pdbs.snapshot() if self._pdbs else []:
            if (pdb["metadata"]["namespace"], pdb["metadata"]["name"]) == (namespace, name):
                return pdb
        return None

    def _accepted(self, ev: _Eviction) -> None:
        ev.accepted = True
        ev.outcome.evicted_at = time.monotonic()
        for pdb in ev.refused_by:  # the budgets that had refused it let it go
            self._budget_moved[pdb] = ev.outcome.evicted_at
        ev.outcome.note("")

    def _blocked(self, ev: _Eviction, detail: str, pdbs: tuple[str, ...] = ()) -> None:
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
            self._pod_event(ev, "EvictionBlocked", detail, WARNING)

    def _sleep(self, seconds: float) -> None:
        self._work.wait(max(0.0, seconds))

    def _wait_pdb_change(self, namespace: str, seconds: float) -> None:
        """Sleep up to `seconds`, waking at once when a PDB in `namespace` changes."""
        pdbs = self._pdb_reflector()
        if self._pdbs_unreadable.is_set():  # nothing will wake us: wait out the backoff
            self._sleep(seconds)
            return
        seen = self._pdb_generation[namespace]
        until = min(time.monotonic() + seconds, self._deadline)
        pdbs.wait_for(
            lambda: self._work.cancelled or self._pdb_generation[namespace] != seen, until
        )

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

    def _force(self, left: list[_Eviction]) -> None:
        body: JSON = {"preconditions": {}}
        if self.opts.force_grace_seconds is not None:
            body["gracePeriodSeconds"] = self.opts.force_grace_seconds
        for ev in left:
            body["preconditions"] = {"uid": ev.outcome.uid}
            try:
                self.kube.delete(pods_path(ev.outcome.namespace, ev.outcome.name), body)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    ev.outcome.note(f"delete failed: {exc}")
                    continue
            except KubeError as exc:
                ev.outcome.note(f"delete failed: {exc}")
                continue
            held = (self._pods.objects.get(ev.outcome.uid) or {}).get("metadata", {})
            finalizers = ", ".join(held.get("finalizers") or [])
            ev.outcome.detail = f"deleted after deadline (was: {ev.outcome.detail or 'waiting'})"
            if finalizers:  # the delete cannot remove the object: it is still left
                continue
            self.result.forced.append(ev.outcome)
            metrics.EVICTIONS.labels("forced").inc()
            self._pod_event(
                ev,
                "EvictionBlocked",
                "Deleted after the drain deadline, bypassing its PodDisruptionBudget",
                WARNING,
            )

    # -- events ---------------------------------------------------------------

    def _node_event(self, node: JSON, reason: str, message: str, kind: str = "Normal") -> None:
        if self.events:
            self.events.node(node, reason, message, kind)

    def _pod_event(self, ev: _Eviction, reason: str, message: str, kind: str = "Normal") -> None:
        if self.events:
            self.events.pod(ev.pod, reason, message, kind)
