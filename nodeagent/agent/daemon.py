"""`nodeagent run`: the agent's wiring, its loops, sd_notify, signals, the watchdog.

The loops: the own-Node watch (feeding the departure worker and the reporter), the
departure worker (nodeagent/departure/worker.py), the heartbeat, logind's delay inhibitor, the
own-pods watch, the cloud's early warnings, kured's DaemonSet (opt-in: its lock), the
one-shot reconcile after start and the leftovers pass. See
docs/architecture.md for who owns what.

Every loop restarts itself after errors with backoff, forever, and records its last
success; the systemd watchdog is fed only while all loops are alive.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType

from nodeagent import metrics
from nodeagent.agent.loops import Loop, Notifier
from nodeagent.agent.mirror import NodeMirror
from nodeagent.agent.reconcile import AfterStart, ready_in_this_boot
from nodeagent.config import Config
from nodeagent.context import Context
from nodeagent.departure.lockholder import LogindLockHolder
from nodeagent.departure.sigterm import StopHandler
from nodeagent.departure.worker import Departure
from nodeagent.fence.others import KURED_LOCK, kured_holds
from nodeagent.host.nodeclaim import AgentClaim, Claimant
from nodeagent.kube import identity
from nodeagent.kube.client import JSON, READ_TIMEOUT, ApiError, Kube, KubeError
from nodeagent.kube.credentials import Identity
from nodeagent.kube.watch import STUCK_AFTER, Reflector, node_pods
from nodeagent.report import httpd
from nodeagent.report.conditions import ConditionWriter, heartbeat_wait
from nodeagent.report.events import EventRecorder
from nodeagent.report.readiness import Readiness
from nodeagent.types import Milestone, milestone

log = logging.getLogger(__name__)

TAINT_OFF = (
    "the kubelet's identity may not change its Node's taints (NodeRestriction): the fence is "
    "the cordon alone, put back from the watch when someone lifts it (a dedicated identity "
    "adds the taint nodeagent.io/departing, which no other tool lifts)"
)

WATCHDOG_INTERVAL = 5.0
# The longest a metadata read may take (Azure's first answer, 30 s), plus slack.
LONGEST_METADATA_READ = 45.0
HEARTBEAT_RETRY = 30.0  # a failed heartbeat is tried again this soon


class Agent:
    def __init__(
        self,
        cfg: Config,
        kube: Kube,
        notifier: Notifier | None = None,
        *,
        identity: Identity | None = None,
    ) -> None:
        self.cfg = cfg
        self.kube = kube
        self.identity = identity
        self.fatal = ""  # set when the identity lacks a right: it exits 1, to be retried
        self.node_name = cfg.node_name
        self.notify = notifier or Notifier()
        self.events = EventRecorder(kube, self.node_name)
        self.report = ConditionWriter(kube, self.node_name)
        self.readiness = Readiness(self.report)
        self.mirror = NodeMirror()
        self.ctx = Context.background()
        self.loops: list[Loop] = []
        # One watch of the node's pods for the drains, the rejection controller and the
        # after-start steps; it runs while one of them holds it.
        self.pods = node_pods(
            kube,
            self.node_name,
            on_restart=lambda _why: metrics.WATCH_RESTARTS.labels("pods").inc(),
        )
        self.departure = Departure(
            cfg,
            kube,
            self.events,
            self.report,
            self.notify.status,
            self.notify.send,
            self.pods,
            may_taint=identity is None or not identity.is_kubelet,
        )
        self.lockholder = LogindLockHolder(
            cfg.drain.deadline,
            self.readiness,
            lambda reason, budget, gen, after: self.departure.shutdown(
                reason, budget, "logind", gen, after
            ),
            self.departure.cancel,
        )
        self.stopping = StopHandler(
            cfg,
            self.departure,
            self.readiness,
            self.report,
            self.lockholder.on_prepare,
            self.notify.status,
        )
        self.after_start = AfterStart(
            cfg,
            kube,
            self.mirror,
            self.departure,
            self.events,
            self.report,
            self.notify.status,
            self.pods,
            this_boot,
        )
        self._sigterm = threading.Event()
        self.claim = AgentClaim(cfg.lock_file, cfg.form)

    # -- main -----------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)
        httpd.serve(self.cfg.reporting.metrics_address, self.stalled_loops)
        # READY before talking to the API: a down API server must never hold up boot.
        self.notify.send("READY=1", "STATUS=starting")
        if not self._wait_for_claim():
            return 0  # stopped while another agent ran the node: nothing of ours to undo
        self.stopping.check_termination_grace()
        if self.cfg.shutdown.logind_dropin:
            self._raise_logind_delay(self.cfg.shutdown.logind_dropin)
        if self.cfg.rejection.enabled:
            # The rejection loop watches the node's pods all along: started before the
            # loops, the after-start steps find it running and read its mirror.
            self.pods.start()
        for loop in self._loops():
            self._start_loop(loop)
        while not self._sigterm.wait(WATCHDOG_INTERVAL):
            if not self.stalled_loops():
                self.notify.send("WATCHDOG=1")
                metrics.HEARTBEAT.set_to_current_time()
        self.notify.send("STOPPING=1")
        if self.fatal:
            self.ctx.cancel()
            return 1
        self.stopping.on_stop()
        self.ctx.cancel()
        self.report.flush(2.0)
        self.events.flush()
        return 0

    def _wait_for_claim(self) -> bool:
        """One agent per node: wait (healthy, doing nothing) while another one runs it."""
        seen: Claimant | None = None
        while (holder := self.claim.try_acquire()) is not None:
            if holder != seen:
                seen = holder
                why = (
                    f"standing by: {holder.describe()} runs this node "
                    f"(claim file {self.claim.path}); taking over when it exits"
                )
                # At every log level (a milestone is): two agents on a node is news.
                warn, form, pid = logging.WARNING, holder.form, holder.pid
                milestone(log, Milestone.STANDING_BY, "%s", why, severity=warn, form=form, pid=pid)
                self.notify.send(f"STATUS={why}")
            if self._sigterm.wait(1.0):
                return False
        if seen is not None:
            took = f"took over the node from {seen.describe()}"
            milestone(log, Milestone.TOOK_OVER, "%s", took, form=seen.form, pid=seen.pid)
            self.notify.send(f"STATUS={took}")
        return True

    def _raise_logind_delay(self, path: str) -> None:
        """The opt-in drop-in; a failure leaves logind's delay as it is, which the logind
        loop then reports if it is too short."""
        from nodeagent.host.dbus import system_bus_address
        from nodeagent.host.logind import LogindUnavailableError
        from nodeagent.host.logindconf import ensure_dropin

        try:
            if ensure_dropin(path, self.cfg.drain.deadline, system_bus_address()):
                self.notify.status(f"wrote {path} and made logind re-read it")
        except (OSError, LogindUnavailableError) as exc:
            log.warning("logind drop-in %s not applied: %s", path, exc)

    def _loops(self) -> list[Loop]:
        heartbeat_bound = self.cfg.reporting.heartbeat_interval + READ_TIMEOUT + 15
        loops = [
            # Alive through a long watch: each event and bookmark is progress, and a
            # silent one is ended and started again (kube.watch.SILENCE_SECONDS).
            Loop("node", self._watch_node, STUCK_AFTER),
            Loop("departure", self._depart, self.cfg.drain.deadline + 60),
            Loop("reconcile", self._reconcile, self.cfg.uncordon.settle + 60),
            Loop("heartbeat", self._heartbeat, heartbeat_bound),
        ]
        if self.identity is not None and self.identity.is_kubelet:
            loops.append(Loop("rights", self._check_rights, READ_TIMEOUT * 10))
            log.info("%s", TAINT_OFF)
        if self.cfg.shutdown.use_logind:
            loops.append(Loop("logind", self._hold_logind_lock))
        if self.cfg.rejection.enabled:
            loops.append(Loop("pods", self._watch_pods, STUCK_AFTER))
        if self.cfg.leftovers.enabled:
            loops.append(Loop("leftovers", self._clean_leftovers, READ_TIMEOUT + 15))
        loops.append(Loop("warnings", self._watch_warnings, LONGEST_METADATA_READ))
        if self.cfg.alongside.kured_daemonset:
            loops.append(Loop("kured", self._watch_kured, STUCK_AFTER))
        return loops

    def stalled_loops(self) -> list[str]:
        return [loop.name for loop in self.loops if not loop.alive()]

    def _start_loop(self, loop: Loop) -> None:
        self.loops.append(loop)
        threading.Thread(target=loop.run, args=(self.ctx,), name=loop.name, daemon=True).start()

    def _on_sigterm(self, signum: int, _frame: FrameType | None) -> None:
        self._sigterm.set()

    # -- loops ----------------------------------------------------------------

    def _loop(self, name: str) -> Loop:
        return next(loop for loop in self.loops if loop.name == name)

    def _watch_node(self, ctx: Context) -> None:
        """Mirror the agent's own Node; every change goes to the departure and reporter."""
        loop = self._loop("node")

        def changed(kind: str, node: JSON) -> None:
            if kind == "DELETED":
                self.report.gone(node["metadata"].get("uid", ""))
                self.departure.node_deleted(node)
                return
            again = self.report.waiting_for_node
            self.mirror.set(node)
            self.report.observe(node)  # registered again: its conditions written at once
            if again:
                uid = node["metadata"].get("uid", "?")
                log.info("node %s registered again (uid %s)", self.node_name, uid)
                self.report.set(self.readiness.condition)
            self.departure.observe(node)

        watch = Reflector(
            self.kube,
            "/api/v1/nodes",
            resource="nodes",
            field_selector=f"metadata.name={self.node_name}",
            on_change=changed,
            on_restart=lambda _why: metrics.WATCH_RESTARTS.labels("nodes").inc(),
        ).start()
        try:
            self._follow(watch, loop, ctx)
        finally:
            watch.stop()

    def _watch_kured(self, ctx: Context) -> None:
        """kured's lock on its DaemonSet ([alongside] kured_daemonset), handed to the
        departure worker. An identity not allowed to read it gets one line, and the
        agent goes on seeing kured by its Node annotation only."""
        where = self.cfg.alongside.kured_daemonset
        namespace, _, name = where.partition("/")
        watching = ctx.child()

        def publish() -> None:
            # From the mirror, not the event, and at every tick too: a relist drops a
            # DaemonSet deleted meanwhile without a DELETED, and a lock's TTL runs out
            # with no change at all.
            held = [(o["metadata"].get("annotations") or {}) for o in watch.snapshot()]
            lock = next((a[KURED_LOCK] for a in held if KURED_LOCK in a), "")
            now = datetime.now(UTC)
            self.departure.kured_lock(kured_holds(lock, self.node_name, now, where))

        def refused(exc: ApiError) -> None:
            log.warning(
                "cannot read kured's lock on DaemonSet %s (%s): kured is seen only by its "
                "annotation %s; grant get, list and watch on that DaemonSet "
                "(docs/security.md) and restart the agent",
                where,
                exc,
                "weave.works/kured-reboot-in-progress",
            )
            watching.cancel()

        watch = Reflector(
            self.kube,
            f"/apis/apps/v1/namespaces/{namespace}/daemonsets",
            resource="daemonsets",
            field_selector=f"metadata.name={name}",
            on_change=lambda _kind, _ds: publish(),
            on_restart=lambda _why: metrics.WATCH_RESTARTS.labels("daemonsets").inc(),
            on_forbidden=refused,
        )
        watch.start()  # once `watch` is bound: its handler reads it
        try:
            self._follow(watch, self._loop("kured"), watching, publish)
        finally:
            watch.stop()

    def _watch_pods(self, ctx: Context) -> None:
        from nodeagent.rejection.controller import RejectionController

        loop = self._loop("pods")
        may_recreate = self.identity is None or not self.identity.is_kubelet
        if not may_recreate:
            log.info("%s", identity.RECREATE_OFF)
        RejectionController(
            self.kube,
            self.node_name,
            self.cfg.rejection,
            self.events,
            loop.succeeded,
            may_recreate=may_recreate,
            pods=self.pods,
        ).run(ctx)

    def _check_rights(self, _ctx: Context) -> None:
        """Once at start, under the kubelet's identity: a right a drain needs and the
        identity lacks is said in one line, and the agent exits 1 (nothing it could do
        would work), which systemd retries: the RBAC may land later (README, exit codes).
        Unanswered reviews raise, and the loop asks again."""
        assert self.identity is not None
        missing = identity.first_missing(self.kube, self.node_name)
        if missing is None:
            log.info("identity %s has the rights a drain needs", self.identity.describe())
            return
        self.fatal = identity.missing_right_message(self.identity.user, missing)
        log.error("%s", self.fatal)
        self.notify.send(f"STATUS={self.fatal}")
        self._sigterm.set()

    @staticmethod
    def _follow(
        watch: Reflector, loop: Loop, ctx: Context, tick: Callable[[], None] = lambda: None
    ) -> None:
        """Beat while the watch makes progress; its last list or event is the success.
        `tick`: called every second."""
        seen = 0.0
        while not ctx.wait(1.0):
            tick()
            if watch.stats.progressed_within(loop.max_silence):
                loop.beat()
            if watch.stats.last_success != seen:
                seen = watch.stats.last_success
                metrics.LOOP_LAST_SUCCESS.labels(loop.name).set(seen)

    def _heartbeat(self, ctx: Context) -> None:
        """Refresh NodeAgentReady once no condition was written for an interval: the only
        request the agent makes while idle, a full Node write seen by every Node watcher,
        so at the kubelet's own cadence (5 minutes) by default."""
        loop = self._loop("heartbeat")
        interval = self.cfg.reporting.heartbeat_interval
        while True:
            wait = heartbeat_wait(self.report.last_write, time.monotonic(), interval)
            if wait == 0.0:
                try:
                    self.report.write_latest(lambda: [self.readiness.condition])
                    loop.succeeded()
                    wait = interval
                except KubeError as exc:
                    loop.beat()
                    log.warning("heartbeat failed: %s", exc)
                    wait = min(interval, HEARTBEAT_RETRY)
            else:
                loop.succeeded()  # another write refreshed it
            if ctx.wait(wait):
                return

    def _clean_leftovers(self, ctx: Context) -> None:
        """Once the node is Ready after boot, delete what the last shutdown left."""
        from nodeagent.departure.leftovers import LeftoverCleaner

        loop = self._loop("leftovers")
        boot = this_boot()

        def kubelet_back(node: JSON | None) -> bool:
            return node is not None and ready_in_this_boot(node, boot)

        while not kubelet_back(self.mirror.wait(kubelet_back, 1.0)):
            if ctx.cancelled:
                return
            loop.beat()
        cleaner = LeftoverCleaner(
            self.kube,
            self.node_name,
            self.cfg.leftovers,
            self.events,
            boot,
            loop.beat,
            pods=self.pods,
        )
        cleaner.run()

    def _watch_warnings(self, ctx: Context) -> None:
        """The cloud's early warnings, handed to the departure worker; off a cloud, one
        line and done."""
        from nodeagent.cloud.watcher import WarningWatcher

        loop = self._loop("warnings")
        watcher = WarningWatcher(self.cfg.warnings, self.departure.warned)
        self.departure.warning_drained = watcher.approve
        watcher.run(ctx, loop.succeeded, loop.beat)

    def _depart(self, ctx: Context) -> None:
        self.departure.run(ctx, self._loop("departure").beat)

    def _reconcile(self, ctx: Context) -> None:
        self.after_start.run(ctx, self._loop("reconcile").beat)

    def _hold_logind_lock(self, ctx: Context) -> None:
        self.lockholder.run(ctx, self._loop("logind").succeeded)


def this_boot() -> float:
    """When this boot began (nodeagent/departure/leftovers.py), imported when first asked:
    only an agent that finds its node cordoned, or cleans up after a boot, needs it."""
    from nodeagent.departure.leftovers import this_boot as began

    return began()
