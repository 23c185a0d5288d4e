"""`nodeagent run`: the long-running loops, sd_notify, signals, the watchdog.

The loops: the own-Node watch (feeding the evacuator and the reporter), the
evacuator, the heartbeat, the logind lock and the own-pods watch (both in their own
modules), and the one-shot reconcile after boot. The shutdown itself is
`nodeagent.departure`.

Every loop restarts itself after errors with backoff, forever, and records its last
success; the systemd watchdog is fed only while all loops are alive.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from nodeagent.config import Config
from nodeagent.departure.evacuate import Evacuator, requested
from nodeagent.departure.shutdown import Departure
from nodeagent.fence import marker as fence
from nodeagent.fence.marker import SHUTDOWN_REASONS
from nodeagent.host.nodelock import Holder, NodeLock
from nodeagent.kube import identity
from nodeagent.kube.client import JSON, READ_TIMEOUT, Kube, KubeError, node_path
from nodeagent.kube.credentials import Identity
from nodeagent.kube.watch import Reflector
from nodeagent.report import conditions, metrics
from nodeagent.report.events import WARNING, EventRecorder

log = logging.getLogger(__name__)

LAST_BOOT_ID = fence.PREFIX + "last-boot-id"
WATCHDOG_INTERVAL = 5.0
# Own-Node and own-pods watches end and resume this often; it bounds how long a
# blackholed connection goes unnoticed (reads time out 10 s after the window).
NODE_WATCH_SECONDS = 60


class Notifier:
    """sd_notify, a no-op outside systemd."""

    def __init__(self) -> None:
        import sdnotify

        self._n = sdnotify.SystemdNotifier()

    def send(self, *fields: str) -> None:
        self._n.notify("\n".join(fields))

    def status(self, text: str) -> None:
        log.info("%s", text)
        self.send(f"STATUS={text}")


@dataclass
class Loop:
    """A named loop body run forever on its own thread with backoff on errors.

    The body calls `beat()` whenever it is demonstrably not stuck (a watch delivered,
    a bounded call returned, even with an error) and `succeeded()` when it did its
    job. A loop silent for longer than `max_silence` is stalled: the watchdog stops
    being fed and /healthz says so. Every call a body makes is bounded, so
    `max_silence` is the longest such bound plus slack.
    """

    name: str
    body: Callable[[threading.Event], None]  # returns when done; raises to be restarted
    max_silence: float = 30.0
    last_beat: float = field(default_factory=time.monotonic)
    done: bool = False

    def alive(self) -> bool:
        return self.done or time.monotonic() - self.last_beat < self.max_silence

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def succeeded(self) -> None:
        self.beat()
        metrics.loop_succeeded(self.name)

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                self.body(stop)
                self.done = True
                self.succeeded()
                return
            except Exception as exc:
                log.warning("loop %s failed: %s; restarting in %.0fs", self.name, exc, backoff)
                self.beat()  # failing and retrying is alive; hanging is not
                stop.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, 30.0)


class NodeMirror:
    """The latest own Node the node watch delivered; other loops wait on it."""

    def __init__(self) -> None:
        self._node: JSON | None = None
        self._changed = threading.Condition()

    def set(self, node: JSON) -> None:
        with self._changed:
            self._node = node
            self._changed.notify_all()

    def get(self) -> JSON | None:
        with self._changed:
            return self._node

    def wait(self, predicate: Callable[[JSON], bool], timeout: float) -> JSON | None:
        """The Node once `predicate` holds for it, or the latest one after `timeout`."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._node is not None and predicate(self._node), timeout
            )
            return self._node


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
        self.fatal = ""  # set when the agent cannot work at all: it exits 2
        self.node_name = cfg.node_name
        self.notify = notifier or Notifier()
        self.events = EventRecorder(kube, self.node_name)
        self.report = conditions.ConditionWriter(kube, self.node_name)
        self.evacuator = Evacuator(cfg, kube, self.events, self.report, lambda: None)
        self.mirror = NodeMirror()
        self.stop = threading.Event()
        self.loops: list[Loop] = []
        self.departure = Departure(
            cfg,
            kube,
            self.events,
            self.report,
            self.evacuator,
            self.notify.status,
            self.notify.send,
        )
        self._sigterm = threading.Event()
        self._unclean = False
        self.node_lock = NodeLock(cfg.lock_file, cfg.form)

    # -- main -----------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)
        metrics.serve(self.cfg.reporting.metrics_address, self.stalled_loops)
        # READY before talking to the API: a down API server must never hold up boot.
        self.notify.send("READY=1", "STATUS=starting")
        if not self._wait_for_node_lock():
            return 0  # stopped while another agent ran the node: nothing of ours to undo
        self.departure.check_termination_grace()
        if self.cfg.shutdown.logind_dropin:
            self._raise_logind_delay(self.cfg.shutdown.logind_dropin)
        for loop in self._loops():
            self._start_loop(loop)
        while not self._sigterm.wait(WATCHDOG_INTERVAL):
            if not self.stalled_loops():
                self.notify.send("WATCHDOG=1")
        self.notify.send("STOPPING=1")
        if self.fatal:
            self.stop.set()
            return 2
        self.departure.on_stop()
        self.stop.set()
        self.report.flush(2.0)
        self.events.flush()
        return 0

    def _wait_for_node_lock(self) -> bool:
        """One agent per node: wait (healthy, doing nothing) while another one runs it."""
        seen: Holder | None = None
        while (holder := self.node_lock.try_acquire()) is not None:
            if holder != seen:
                seen = holder
                why = (
                    f"standing by: {holder.describe()} runs this node "
                    f"(lock {self.node_lock.path}); taking over when it exits"
                )
                log.warning("%s", why)  # at every log level: two agents on a node is news
                self.notify.send(f"STATUS={why}")
            if self._sigterm.wait(1.0):
                return False
        if seen is not None:
            self.notify.status(f"took over the node from {seen.describe()}")
        return True

    def _raise_logind_delay(self, path: str) -> None:
        """The opt-in drop-in; a failure leaves logind's delay as it is, which the logind
        loop then reports if it is too short."""
        from nodeagent.host.logind import LogindUnavailableError, system_bus_address
        from nodeagent.host.logindconf import ensure_dropin

        try:
            if ensure_dropin(path, self.cfg.drain.deadline, system_bus_address()):
                self.notify.status(f"wrote {path} and made logind re-read it")
        except (OSError, LogindUnavailableError) as exc:
            log.warning("logind drop-in %s not applied: %s", path, exc)

    def _loops(self) -> list[Loop]:
        heartbeat_bound = self.cfg.reporting.heartbeat_interval + READ_TIMEOUT + 15
        evacuate = Loop("evacuate", self.evacuator.run, self.cfg.drain.deadline + 60)
        self.evacuator.beat = evacuate.beat
        loops = [
            Loop("node", self._watch_node, NODE_WATCH_SECONDS + 40),
            evacuate,
            Loop("reconcile", self._reconcile_after_boot, self.cfg.uncordon.settle + 60),
            Loop("heartbeat", self._heartbeat, heartbeat_bound),
        ]
        if self.identity is not None and self.identity.is_kubelet:
            loops.append(Loop("rights", self._check_rights, READ_TIMEOUT * 10))
        if self.cfg.shutdown.use_logind:
            loops.append(Loop("logind", self._hold_logind_lock))
        if self.cfg.rejection.enabled:
            loops.append(Loop("pods", self._watch_pods, NODE_WATCH_SECONDS + 40))
        if self.cfg.leftovers.enabled:
            loops.append(Loop("leftovers", self._clean_leftovers, READ_TIMEOUT + 15))
        return loops

    def stalled_loops(self) -> list[str]:
        return [loop.name for loop in self.loops if not loop.alive()]

    def _start_loop(self, loop: Loop) -> None:
        self.loops.append(loop)
        threading.Thread(target=loop.run, args=(self.stop,), name=loop.name, daemon=True).start()

    def _on_sigterm(self, signum: int, _frame: FrameType | None) -> None:
        self._sigterm.set()

    # -- loops ----------------------------------------------------------------

    def _loop(self, name: str) -> Loop:
        return next(loop for loop in self.loops if loop.name == name)

    def _watch_node(self, stop: threading.Event) -> None:
        """Mirror the agent's own Node; every change goes to the evacuator and reporter."""
        loop = self._loop("node")

        def changed(_kind: str, node: JSON) -> None:
            self.mirror.set(node)
            self.report.observe(node)
            self.evacuator.observe(node)

        watch = Reflector(
            self.kube,
            "/api/v1/nodes",
            resource="nodes",
            field_selector=f"metadata.name={self.node_name}",
            watch_seconds=NODE_WATCH_SECONDS,
            on_change=changed,
            on_restart=lambda _why: metrics.WATCH_RESTARTS.labels("nodes").inc(),
        ).start()
        try:
            self._follow(watch, loop, stop)
        finally:
            watch.stop()

    def _watch_pods(self, stop: threading.Event) -> None:
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
        ).run(stop)

    def _check_rights(self, _stop: threading.Event) -> None:
        """Once at start, under the kubelet's identity: a right a drain needs and the
        identity lacks is said in one line, and the agent exits 2 (nothing it could do
        would work). Unanswered reviews raise, and the loop asks again."""
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
    def _follow(watch: Reflector, loop: Loop, stop: threading.Event) -> None:
        """Beat while the watch makes progress; its last list or event is the success."""
        seen = 0.0
        while not stop.wait(1.0):
            if watch.stats.progressed_within(loop.max_silence):
                loop.beat()
            if watch.stats.last_success != seen:
                seen = watch.stats.last_success
                metrics.LOOP_LAST_SUCCESS.labels(loop.name).set(seen)

    def _heartbeat(self, stop: threading.Event) -> None:
        """Refresh NodeAgentReady; the only request the agent makes while idle."""
        loop = self._loop("heartbeat")
        while True:
            try:
                self.report.write_latest(lambda: [self.departure.ready_condition])
                loop.succeeded()
            except KubeError as exc:
                loop.beat()
                log.warning("heartbeat failed: %s", exc)
            if stop.wait(self.cfg.reporting.heartbeat_interval):
                return

    def _reconcile_after_boot(self, stop: threading.Event) -> None:
        """Undo the agent's own shutdown cordon once the node can run pods again."""
        node = fence.get_node(self.kube, self.node_name)
        self._check_unclean_shutdown(node)
        node = self._wait_evacuation_over(node, stop)
        state = fence.NodeFence.of(node)
        if stop.is_set() or not _shutdown_marked(node):
            self.notify.status("running; node needs no uncordon")
            return
        self.notify.status(f"waiting for node Ready to undo the {state.reason} cordon")
        self._wait_node_ready(stop)
        if stop.wait(self.cfg.uncordon.settle):
            return

        def undo() -> None:
            # Only the marker seen at start: a shutdown cordon taken since is not ours to undo.
            reasons, started = SHUTDOWN_REASONS, state.started_at
            if fence.uncordon(self.kube, self.node_name, only_reasons=reasons, started_at=started):
                self.events.node(node, "Uncordoned", f"Uncordoned after {state.reason}")
                if not self._unclean:
                    self.report.set(conditions.not_draining(f"Uncordoned after {state.reason}"))

        if self.departure.while_not_shutting_down(undo):
            self.notify.status(f"running; {state.reason} cordon undone")
        else:
            self.notify.status("running; a shutdown is under way, the cordon stays")

    def _wait_evacuation_over(self, node: JSON, stop: threading.Event) -> JSON:
        """While an evacuate taint holds a shutdown-cordoned node, the evacuator takes the
        cordon over (its marker then says evacuate); if the taint goes first, the cordon
        is the shutdown's again and this returns to undo it."""

        def held(n: JSON) -> bool:
            return _shutdown_marked(n) and requested(n, self.cfg.evacuate)

        if held(node):
            self.notify.status("running; node stays cordoned: it carries an evacuate taint")
        while held(node) and not stop.is_set():
            node = self.mirror.wait(lambda n: not held(n), 1.0) or node
            self._loop("reconcile").beat()
        return node

    def _wait_node_ready(self, stop: threading.Event) -> None:
        wanted = self.cfg.uncordon.wait_for_daemonsets
        # The node's pods matter only when named DaemonSets must be Ready first.
        pods = Reflector(
            self.kube,
            "/api/v1/pods",
            resource="pods",
            field_selector=f"spec.nodeName={self.node_name}",
        )
        if wanted:
            pods.start()

        def ready(node: JSON | None) -> bool:
            return stop.is_set() or (
                node is not None and _ready(node) and _daemonsets_ready(pods.snapshot(), wanted)
            )

        try:
            warn_at = time.monotonic() + self.cfg.uncordon.ready_timeout
            while not ready(self.mirror.get()):
                self.mirror.wait(ready, 1.0)
                self._loop("reconcile").beat()
                if time.monotonic() > warn_at:
                    # Taking pods before the node can run them is worse than waiting:
                    # say so once, loudly, and keep waiting.
                    warn_at = float("inf")
                    node = self.mirror.get()
                    self._not_ready_yet([node] if node else [], wanted)
        finally:
            pods.stop()

    def _not_ready_yet(self, nodes: list[JSON], wanted: list[str]) -> None:
        waiting = (
            "the node to be Ready"
            if not any(_ready(n) for n in nodes)
            else (f"Ready pods of {', '.join(wanted)}")
        )
        message = (
            f"Still waiting for {waiting} after {self.cfg.uncordon.ready_timeout:.0f}s; "
            "the node stays cordoned until then"
        )
        log.warning("%s", message)
        self.notify.status(message)
        if nodes:
            self.events.node(nodes[0], "UncordonDelayed", message, WARNING)

    def _clean_leftovers(self, stop: threading.Event) -> None:
        """Once the node is Ready after boot, delete what the last shutdown left."""
        from nodeagent.departure.leftovers import LeftoverCleaner, this_boot

        loop = self._loop("leftovers")
        while not _ready(self.mirror.wait(_ready, 1.0) or {}):
            if stop.is_set():
                return
            loop.beat()
        cleaner = LeftoverCleaner(
            self.kube, self.node_name, self.cfg.leftovers, self.events, this_boot(), loop.beat
        )
        cleaner.run()

    def _hold_logind_lock(self, stop: threading.Event) -> None:
        self.departure.hold_logind_lock(stop, self._loop("logind").succeeded)

    def _check_unclean_shutdown(self, node: JSON) -> None:
        """A new boot without a drain record for the last one is a departure nobody drained."""
        current = fence.boot_id(node)
        ann = node["metadata"].get("annotations") or {}
        previous = ann.get(LAST_BOOT_ID, "")
        state = fence.NodeFence.of(node)
        if previous and current and previous != current:
            drained = state.marked and state.boot_id == previous and state.result
            if not drained:
                self._unclean = True
                metrics.PREVIOUS_BOOT_UNCLEAN.set(1)
                self.events.node(
                    node,
                    "UncleanShutdown",
                    f"Boot {previous} ended without a drain by nodeagent",
                    WARNING,
                )
                self.report.set(conditions.unclean_shutdown(previous))
                log.warning("previous boot %s ended without a drain", previous)
        if current and previous != current:
            self.kube.merge_patch(
                node_path(self.node_name), {"metadata": {"annotations": {LAST_BOOT_ID: current}}}
            )


def _shutdown_marked(node: JSON) -> bool:
    state = fence.NodeFence.of(node)
    return state.marked and state.reason in SHUTDOWN_REASONS


def _ready(obj: JSON) -> bool:
    """A Node or Pod whose Ready condition is True."""
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _daemonsets_ready(pods: list[JSON], wanted: list[str]) -> bool:
    """Each named DaemonSet ("namespace/name") has a Ready pod on this node."""
    for item in wanted:
        ns, _, name = item.partition("/")
        if not any(_pod_of_daemonset(p, ns, name) and _ready(p) for p in pods):
            return False
    return True


def _pod_of_daemonset(pod: JSON, namespace: str, name: str) -> bool:
    refs = pod["metadata"].get("ownerReferences") or []
    return pod["metadata"]["namespace"] == namespace and any(
        r.get("kind") == "DaemonSet" and r.get("name") == name for r in refs
    )
