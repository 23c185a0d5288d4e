"""The drain engine: evict a cordoned node's pods in priority tiers, wait by watching.

The node is cordoned by the caller, between two of the drain's phases, as kubectl runs
RunCordonOrUncordon and then RunNodeDrain: `started` fixes the drain's time and waits
for the pod watch's first list (a drain that cannot list changes nothing), the caller
cordons with the marker (nodeagent/departure/executor.py, the one writer of the fence),
and `evict` plans from the pods the watch shows once the cordon is answered. The engine
never writes the fence.

One deadline bounds everything. Evictions run concurrently and follow explicit retry
rules (nodeagent/drain/eviction.py). A pod counts as gone when a pod with its UID no
longer runs on the node, as seen by a watch of the node's pods, never by sleeping.

A pod whose object stays on the node is never counted as evicted: held by finalizers
after its containers stopped, or stuck terminating past its grace period, it is
reported as left (with the finalizers), the outcome says so and the exit code is 3.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from enum import Enum

from nodeagent import metrics
from nodeagent.context import Context
from nodeagent.drain import podfilter
from nodeagent.drain.detach import DetachResult
from nodeagent.drain.eviction import Eviction, Evictor, outcome_of, wait_watch
from nodeagent.drain.eviction import PodOutcome as PodOutcome
from nodeagent.drain.partition import PartitionWatch
from nodeagent.drain.phases import Phase, Phases
from nodeagent.kube.client import JSON, ApiError, Kube, KubeError, api_time, pods_path
from nodeagent.kube.watch import Reflector, node_pods
from nodeagent.report.events import WARNING, EventRecorder
from nodeagent.types import DrainOutcome, ExitCode, FinishedPods, Milestone, milestone

log = logging.getLogger(__name__)

# A pod this far past its grace period is not leaving by itself: the drain stops
# waiting for it (and reports it as left).
STUCK_AFTER_GRACE = 30.0
PROGRESS_EVERY = 5.0


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
    stuck_after: float = STUCK_AFTER_GRACE
    finished_pods: FinishedPods = FinishedPods.KEEP
    # The kubelet's graceful node shutdown is stopping the node's ordinary pods from the
    # drain's start (logind announced the shutdown while the kubelet held its lock): they
    # are taken out at once, deleted where their PDB refuses (Evictor.delete_for_kubelet_shutdown).
    kubelet_kills: bool = False
    # The node goes at the deadline whatever the reason (a shutdown, or the cloud's warning
    # whose time cut the drain): evicted pods get no more grace than is left.
    cut_grace: bool = False


@dataclass
class DrainResult:
    node: str
    outcome: DrainOutcome = DrainOutcome.DRAINED
    seconds: float = 0.0
    cordoned: bool = False  # the caller's cordon wrote it (not a person's, not kept)
    evicted: list[PodOutcome] = field(default_factory=list)
    # Deleted past their PDBs, each: the kubelet's graceful shutdown was stopping them.
    deleted_for_kubelet: list[PodOutcome] = field(default_factory=list)
    skipped: list[PodOutcome] = field(default_factory=list)
    blocked: list[PodOutcome] = field(default_factory=list)  # every pod left, and why
    forced: list[PodOutcome] = field(default_factory=list)
    warnings: list[PodOutcome] = field(default_factory=list)
    # The wait, after the drain, for the drained pods' volumes to detach (drain/detach.py).
    detach: DetachResult | None = None
    phases: Phases = field(default_factory=Phases)  # where its time went
    late: int = 0  # pods bound after the drain planned, evicted too
    # Why its result could not be written on the Node, the API server not answering
    # ("": written, or not to be): the daemon's executor writes it once it answers.
    unrecorded: str = ""

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
    finished: FinishedPods = FinishedPods.KEEP,
) -> PodState:
    """Decide from the pod as watched (None: no pod with that UID on the node).
    With FinishedPods.DELETE a finished pod is not done with until it is deleted."""
    if pod is None:
        return PodState.GONE
    meta = pod["metadata"]
    finalizers = meta.get("finalizers") or []
    deleted_at = meta.get("deletionTimestamp")
    if not deleted_at and podfilter.is_finished(pod) and finished is FinishedPods.DELETE:
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


class Drain:
    """Drain one node, once: `run(ctx)` (a dry run, or a node fenced already), or
    `with drain.started(ctx) as kube:` cordon, then `drain.evict(node, cordoned)`.

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
        # Set by started(): the drain's context (cancelled = called off) and its child
        # for the work, also cancelled when the drain is over or failed.
        self._ctx = Context()
        self._work = self._ctx
        self._evictor: Evictor | None = None
        self._owns_pods = pods is None
        self._pods = pods if pods is not None else node_pods(kube, node_name)
        self._start = 0.0
        self._deadline = 0.0
        self._waiting: list[Eviction] = []  # the pods waited for now
        self._planned: set[str] = set()  # the UIDs of the pods the plan was made from

    # -- public ---------------------------------------------------------------

    def run(self, ctx: Context | None = None) -> DrainResult:
        """A dry run, or a drain of the node as it is fenced (nothing here cordons it)."""
        with self.started(ctx):
            return self.evict({"metadata": {"name": self.node_name}}, cordoned=False)

    @contextmanager
    def started(self, ctx: Context | None = None) -> Iterator[Kube]:
        """The drain's time: its deadline fixed, the pod watch held and synced. Yields
        the client bounded by the drain's end, for the cordon that comes next. Raises
        KubeError when the pods cannot be listed before the deadline: nothing changed."""
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
                with watching:
                    if not self.opts.dry_run:
                        with self.result.phases.timed(Phase.LIST):
                            self._wait_synced()
                        PartitionWatch(
                            self.kube, self._work, self.progress, self._seen, self._pods
                        ).start()
                    yield self.kube
            finally:
                self._work.cancel()
                if self._evictor:
                    self._evictor.stop()
                self.result.seconds = time.monotonic() - self._start

    @property
    def cancelled(self) -> bool:
        """Called off (by the caller's context): nothing new starts."""
        return self._ctx.cancelled

    @property
    def deadline(self) -> float:
        """When evicting stops (monotonic), fixed by `started`."""
        return self._deadline

    def watched_pods(self) -> list[JSON]:
        """The node's pods as the drain's watch shows them now (inside `started`)."""
        return self._pods.snapshot()

    def wait_pods(self, done: Callable[[list[JSON]], bool], until: float) -> bool:
        """Inside `started`: until `done(pods)` holds for the watched pods (checked on each
        change, and when the drain is called off) or `until` (monotonic)."""
        return self._pods.wait_for(lambda: done(self._pods.snapshot()), until)

    def evict(self, node: JSON, cordoned: bool) -> DrainResult:
        """Inside `started`, once the node is cordoned (`cordoned`: by this caller's
        write): plan from the pods the watch shows now, evict, wait, report."""
        self.result.cordoned = cordoned
        if self.opts.dry_run:
            self.result.outcome = DrainOutcome.DRY_RUN
            self.result.evicted = [outcome_of(p) for p in self._plan(self._list_pods())]
            return self.result
        if self.cancelled:
            self.result.outcome = DrainOutcome.CANCELLED
            return self.result
        self._node_event(
            node,
            "DrainStarted",
            f"Draining for {self.opts.reason}, deadline {self.opts.deadline:.0f}s",
        )
        # Planned from what the watch shows once the node is cordoned (kubectl lists after
        # its cordon): a pod bound before the cordon is in the plan unless its watch event
        # is still in flight (milliseconds; kubectl's fresh list has no such lag, and
        # neither closes the race with a binding the scheduler made before the cordon).
        planned = time.monotonic()
        snapshot = self._pods.snapshot()
        self._planned = {p["metadata"]["uid"] for p in snapshot}
        pods = self._plan(snapshot)
        milestone(
            log,
            Milestone.DRAIN_STARTED,
            "drain for %s: evicting %d pods",
            self.opts.reason,
            len(pods),
            reason=self.opts.reason,
            pods=len(pods),
        )
        evictions = self._evict_tiers(pods)
        self._finish(node, evictions)
        self._time_evictions(planned, evictions)
        return self.result

    def _time_evictions(self, planned: float, evictions: list[Eviction]) -> None:
        """The evictions' phase ends with the last one accepted, the wait's with the drain."""
        end = time.monotonic()
        accepted = [e.outcome.evicted_at for e in evictions if e.outcome.evicted_at is not None]
        last = max(accepted, default=end)
        self.result.phases.add(Phase.EVICT, last - planned)
        self.result.phases.add(Phase.GONE, end - last)

    def _unseen(self) -> str:
        """Why the pod watch does not show the pods as they are now, or "": the API
        server unreachable, or back but the watch not heard from since it was lost (a
        connection the partition left dead, until its silence ends it)."""
        reach = self.kube.reach
        down = reach.down_for()
        if down is not None:
            return f"API server unreachable since {down:.0f}s"
        began = reach.outage_began
        if began is not None and self._pods.stats.last_progress < began:
            lost = time.monotonic() - began
            return f"pod watch silent since the API server was lost {lost:.0f}s ago"
        return ""

    def _seen(self) -> int:
        """The pods waited for as the watch last showed them (all of the node's before
        the evictions start)."""
        if self._waiting:
            return sum(not self._gone(e) for e in self._waiting)
        return len(self._pods.snapshot())

    def _wake(self) -> None:
        """Whatever waits on the pod watch re-checks: the work is over."""
        with self._pods.changed:
            self._pods.changed.notify_all()

    # -- phases ---------------------------------------------------------------

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
        if not self._pods.synced.is_set() and not self.cancelled:
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
                self.result.skipped.append(outcome_of(pod, why))
                continue
            evict.append(pod)
            for note in podfilter.warnings(pod):
                self.result.warnings.append(outcome_of(pod, note))
        return evict

    def _evict_tiers(self, pods: list[JSON]) -> list[Eviction]:
        killing: list[JSON] = []
        if self.opts.kubelet_kills:
            killing = [p for p in pods if podfilter.killed_at_once_by_kubelet(p)]
            pods = [p for p in pods if not podfilter.killed_at_once_by_kubelet(p)]
        tiers = podfilter.tiers(pods)
        budget = self._deadline - self._start  # the options' deadline, or the context's
        reserve_until = self._deadline - budget * self.opts.critical_reserve
        has_critical = any(podfilter.is_critical(p) for p in pods)
        evictions: list[Eviction] = []
        self._evictor = Evictor(
            self.kube,
            self._pods,
            self._work,
            self._deadline,
            self.opts.reason,
            self._gone,
            self.events,
            self.progress,
            cut_grace=self.opts.cut_grace,
        )
        try:
            with ThreadPoolExecutor(
                max_workers=max(1, self.opts.concurrency), thread_name_prefix="evict"
            ) as pool:
                deleted = self._delete_killing(pool, killing)
                evictions += deleted
                evictions += self._run_tiers(pool, tiers, deleted, reserve_until, has_critical)
                evictions += self._run_late(pool)
                self._wait_gone(evictions, self._deadline)
                self._work.cancel()  # workers still retrying give up now
        finally:
            # After the pool has waited for every worker: no eviction is left out.
            self._evictor.send_combined_events()
        if self._evictor.fatal:
            raise self._evictor.fatal
        return evictions

    def _run_tiers(
        self,
        pool: ThreadPoolExecutor,
        tiers: list[podfilter.Tier],
        deleted: list[Eviction],
        reserve_until: float,
        has_critical: bool,
    ) -> list[Eviction]:
        """Each tier in turn, until the work is called off."""
        assert self._evictor is not None
        evictions: list[Eviction] = []
        for tier in tiers:
            critical = podfilter.is_critical(tier.pods[0])
            tier_until = self._deadline if critical or not has_critical else reserve_until
            if critical and self.opts.kubelet_kills:
                # The kubelet stops its critical group once the rest has stopped (or its
                # time is up): from then on these are being killed too. Never earlier: a
                # delete starts the kubelet's kill, and DNS and the CNI must outlive the
                # workloads.
                self._wait_gone(deleted, reserve_until)
                take_out = self._evictor.delete_for_kubelet_shutdown
                evictions += self._run_tier(pool, tier, tier_until, take_out)
            else:
                evictions += self._run_tier(pool, tier, tier_until)
            # The tier's pods are gone or its time is up: its combined Evicted Events go
            # now rather than when the whole drain is over, maybe minutes later.
            self._evictor.send_combined_events()
            if self._work.cancelled:
                break
        return evictions

    def _run_late(self, pool: ThreadPoolExecutor) -> list[Eviction]:
        """Pods bound after the plan was made (a binding in flight at the cordon, one the
        fence did not stop while it was lifted), from the watch: evicted too, so that
        `Drained` means none the drain must move is bound (docs/architecture.md)."""
        evictions: list[Eviction] = []
        while not self._work.cancelled and time.monotonic() < self._deadline:
            new = [p for p in self._pods.snapshot() if p["metadata"]["uid"] not in self._planned]
            self._planned |= {p["metadata"]["uid"] for p in new}
            late = self._plan(new)
            if not late:
                return evictions
            self.result.late += len(late)
            self.progress(f"{len(late)} pods bound to the node after the drain began")
            for tier in podfilter.tiers(late):
                evictions += self._run_tier(pool, tier, self._deadline)
        return evictions

    def _delete_killing(self, pool: ThreadPoolExecutor, pods: list[JSON]) -> list[Eviction]:
        """The pods the kubelet's graceful shutdown is stopping, deleted at once and all
        together; the tiers go on meanwhile, and the drain waits for these at its end."""
        batch = [Eviction(p, outcome_of(p)) for p in pods]
        if batch:
            self.progress(f"deleting {len(batch)} pods the kubelet's graceful shutdown is stopping")
        assert self._evictor is not None
        for ev in batch:
            pool.submit(self._evictor.delete_for_kubelet_shutdown, ev)
        return batch

    def _run_tier(
        self,
        pool: ThreadPoolExecutor,
        tier: podfilter.Tier,
        until: float,
        take_out: Callable[[Eviction], None] | None = None,
    ) -> list[Eviction]:
        """Evict the tier's pods (or take them out with `take_out`) and wait for them."""
        batch = [Eviction(p, outcome_of(p)) for p in tier.pods]
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
        assert self._evictor is not None
        for ev in batch:
            pool.submit(take_out or self._evictor.evict, ev)
        self._wait_gone(batch, until)
        return batch

    def _finish(self, node: JSON, evictions: list[Eviction]) -> None:
        states = {id(e): self._state(e) for e in evictions}
        gone = [e for e in evictions if states[id(e)] is PodState.GONE]
        left = [e for e in evictions if states[id(e)] is not PodState.GONE]
        if self.cancelled:
            gone += [e for e in left if e.accepted]
        self.result.evicted = [e.outcome for e in gone if not e.outcome.kubelet_shutdown]
        self.result.deleted_for_kubelet = [e.outcome for e in gone if e.outcome.kubelet_shutdown]
        if self.cancelled:
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

    def _describe_left(self, ev: Eviction, state: PodState) -> None:
        pod = self._pods.objects.get(ev.outcome.uid)
        if pod is None:
            return
        if state is not PodState.PRESENT:
            ev.outcome.note(left_detail(pod, state, time.time()))
            return
        ev.outcome.detail = ev.outcome.detail or "still terminating"
        unseen = self._unseen()
        if unseen:
            ev.outcome.detail = f"last seen on the node ({unseen}): {ev.outcome.detail}"
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

    # -- waiting --------------------------------------------------------------

    def _state(self, ev: Eviction) -> PodState:
        pod = self._pods.objects.get(ev.outcome.uid)
        return pod_state(pod, time.time(), self.opts.stuck_after, self.opts.finished_pods)

    def _gone(self, ev: Eviction) -> bool:
        """Nothing more to wait for (the pod may still be left: see _state)."""
        return self._state(ev) is not PodState.PRESENT

    def _wait_gone(self, batch: list[Eviction], until: float) -> None:
        # Each check resumes where the last one stopped (checking the whole batch on every
        # watch event was quadratic in its size), and a last full pass confirms: a pod can
        # come back (a finished one held by finalizers, then deleted, waits again).
        waiting = deque(batch)
        self._waiting = batch

        def done() -> bool:
            while waiting and self._gone(waiting[0]):
                waiting.popleft()
            if not waiting:
                waiting.extend(e for e in batch if not self._gone(e))
            return self._work.cancelled or not waiting

        next_report = time.monotonic() + PROGRESS_EVERY
        while not done() and time.monotonic() < until:
            # Wake at least every few seconds: stuck-terminating is a matter of time.
            wait_watch(self._pods, self._work, done, min(until, next_report))
            if time.monotonic() >= next_report and not done():
                self._report_waiting(batch)
                next_report = time.monotonic() + PROGRESS_EVERY

    def _report_waiting(self, batch: list[Eviction]) -> None:
        left = [e for e in batch if not self._gone(e)]
        names = ", ".join(
            f"{e.outcome.ref}{' [' + e.outcome.detail + ']' if e.outcome.detail else ''}"
            for e in left[:5]
        )
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        remaining = self._deadline - time.monotonic()
        unseen = self._unseen()
        if unseen:  # the watch shows what was, not what is: no claim on them
            self.progress(
                f"{unseen}; {len(left)} pods last seen on the node ({remaining:.0f}s left): "
                f"{names}{more}"
            )
            return
        self.progress(f"waiting for {len(left)} pods ({remaining:.0f}s left): {names}{more}")

    def _force(self, left: list[Eviction]) -> None:
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

    def _pod_event(self, ev: Eviction, reason: str, message: str, kind: str = "Normal") -> None:
        if self.events:
            self.events.pod(ev.pod, reason, message, kind)
