"""`nodeagent run`: the long-running loops, sd_notify, signals and the shutdown path.

Shutdown is heard first from systemd-logind (a delay inhibitor lock and
PrepareForShutdown), before any unit stops; SIGTERM is the fallback for shutdowns that
bypass logind and the maintenance path (`systemctl stop nodeagent`). Either way the
drain is bounded by a deadline that stays inside what systemd or logind will wait.

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
from typing import Any

from nodeagent import cordon as fence
from nodeagent import metrics
from nodeagent.config import Config
from nodeagent.drain import Drain, DrainOptions, DrainResult
from nodeagent.kube import JSON, Kube, KubeError, node_path
from nodeagent.report import WARNING, EventRecorder

log = logging.getLogger(__name__)

SHUTDOWN_REASONS = ("poweroff", "reboot", "halt", "kexec", "soft-reboot", "stop")
LAST_BOOT_ID = fence.PREFIX + "last-boot-id"
LOGIND_MARGIN = 5.0  # seconds kept back from logind's delay for closing the lock


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
    """A named loop body run forever on its own thread with backoff on errors."""

    name: str
    body: Callable[[threading.Event], None]  # returns when done; raises to be restarted
    last_success: float = field(default_factory=time.time)
    done: bool = False

    def alive(self, within: float) -> bool:
        return self.done or time.time() - self.last_success < within

    def succeeded(self) -> None:
        self.last_success = time.time()
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
                stop.wait(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, 30.0)


class Agent:
    def __init__(self, cfg: Config, kube: Kube, notifier: Notifier | None = None) -> None:
        self.cfg = cfg
        self.kube = kube
        self.node_name = cfg.node_name
        self.notify = notifier or Notifier()
        self.events = EventRecorder(kube, self.node_name)
        self.stop = threading.Event()
        self.loops: list[Loop] = []
        self._shutdown_lock = threading.Lock()
        self._handled_shutdown = False
        self._drain: Drain | None = None
        self._inhibitor: Any = None
        self._sigterm = threading.Event()

    # -- main -----------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)
        metrics.serve(self.cfg.reporting.metrics_address)
        # READY before talking to the API: a down API server must never hold up boot.
        self.notify.send("READY=1", "STATUS=starting")
        self._start_loop(Loop("reconcile", self._reconcile_after_boot))
        if self.cfg.shutdown.use_logind:
            self._start_loop(Loop("logind", self._hold_logind_lock))
        self._start_loop(Loop("heartbeat", self._heartbeat))
        while not self._sigterm.wait(self._watchdog_interval()):
            if all(loop.alive(self._watchdog_interval() * 4) for loop in self.loops):
                self.notify.send("WATCHDOG=1")
        self.notify.send("STOPPING=1")
        self._on_stop()
        self.stop.set()
        self.events.flush()
        return 0

    def _start_loop(self, loop: Loop) -> None:
        self.loops.append(loop)
        threading.Thread(target=loop.run, args=(self.stop,), name=loop.name, daemon=True).start()

    def _watchdog_interval(self) -> float:
        return 5.0

    def _on_sigterm(self, signum: int, _frame: FrameType | None) -> None:
        self._sigterm.set()

    # -- loops ----------------------------------------------------------------

    def _heartbeat(self, stop: threading.Event) -> None:
        loop = self._loop("heartbeat")
        while not stop.wait(1.0):
            loop.succeeded()

    def _loop(self, name: str) -> Loop:
        return next(loop for loop in self.loops if loop.name == name)

    def _reconcile_after_boot(self, stop: threading.Event) -> None:
        """Undo the agent's own shutdown cordon once the node can run pods again."""
        node = fence.get_node(self.kube, self.node_name)
        self._check_unclean_shutdown(node)
        state = fence.NodeFence.of(node)
        if not (state.cordoned_by_agent and state.reason in SHUTDOWN_REASONS):
            self.notify.status("running; node needs no uncordon")
            return
        self.notify.status(f"waiting for node Ready to undo the {state.reason} cordon")
        self._wait_node_ready(stop)
        if stop.wait(self.cfg.uncordon.settle):
            return
        if fence.uncordon(self.kube, self.node_name):
            self.events.node(node, "Uncordoned", f"Uncordoned after {state.reason}")
        self.notify.status(f"running; uncordoned after {state.reason}")

    def _wait_node_ready(self, stop: threading.Event) -> None:
        from nodeagent.watch import Reflector

        nodes = Reflector(
            self.kube,
            "/api/v1/nodes",
            resource="nodes",
            field_selector=f"metadata.name={self.node_name}",
        ).start()
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
        try:

            def ready() -> bool:
                return stop.is_set() or (
                    any(_ready(n) for n in nodes.snapshot())
                    and _daemonsets_ready(pods.snapshot(), wanted)
                )

            while not ready():
                nodes.wait_for(ready, time.monotonic() + 1.0)
                self._loop("reconcile").succeeded()
        finally:
            nodes.stop()
            pods.stop()

    def _check_unclean_shutdown(self, node: JSON) -> None:
        """A new boot without a drain record for the last one is a departure nobody drained."""
        current = fence.boot_id(node)
        ann = node["metadata"].get("annotations") or {}
        previous = ann.get(LAST_BOOT_ID, "")
        state = fence.NodeFence.of(node)
        if previous and current and previous != current:
            drained = state.marked and state.boot_id == previous and state.result
            if not drained:
                self.events.node(
                    node,
                    "UncleanShutdown",
                    f"Boot {previous} ended without a drain by nodeagent",
                    WARNING,
                )
                log.warning("previous boot %s ended without a drain", previous)
        if current and previous != current:
            self.kube.merge_patch(
                node_path(self.node_name), {"metadata": {"annotations": {LAST_BOOT_ID: current}}}
            )

    def _hold_logind_lock(self, stop: threading.Event) -> None:
        from nodeagent.shutdown import LogindInhibitor

        inhibitor = LogindInhibitor(self._on_prepare_for_shutdown)
        inhibitor.start()
        self._inhibitor = inhibitor
        self._check_inhibit_delay(inhibitor.inhibit_delay_max_seconds())
        try:
            while not stop.wait(1.0):
                self._loop("logind").succeeded()
        finally:
            inhibitor.close()

    def _check_inhibit_delay(self, delay: float) -> None:
        metrics.INHIBIT_DELAY.set(delay)
        short = delay - LOGIND_MARGIN < self.cfg.drain.deadline
        metrics.INHIBIT_SHORT.set(1 if short else 0)
        if short:
            log.warning(
                "logind InhibitDelayMaxSec is %.0fs, shorter than the drain deadline "
                "%.0fs + %.0fs margin: drains at shutdown are cut to fit",
                delay,
                self.cfg.drain.deadline,
                LOGIND_MARGIN,
            )

    # -- shutdown -------------------------------------------------------------

    def _on_prepare_for_shutdown(self, active: bool, kind: Any) -> None:
        reason = str(getattr(kind, "value", kind))
        if reason == "unknown":
            # logind before v255 sends no type; PrepareForShutdown only ever means the
            # machine is going down, so treat it as a poweroff rather than doing nothing.
            reason = "poweroff"
        if not active:
            threading.Thread(target=self._shutdown_cancelled, daemon=True).start()
            return
        budget = self.cfg.drain.deadline
        if self._inhibitor is not None:
            budget = min(budget, self._inhibitor.inhibit_delay_max_seconds() - LOGIND_MARGIN)
        threading.Thread(
            target=self._logind_shutdown, args=(reason, max(budget, 1.0)), daemon=True
        ).start()

    def _logind_shutdown(self, reason: str, budget: float) -> None:
        try:
            self._handle_shutdown(reason, budget, source="logind")
        finally:
            if self._inhibitor is not None:
                self._inhibitor.release()  # logind goes on with the shutdown

    def _shutdown_cancelled(self) -> None:
        log.info("shutdown cancelled; undoing the fence")
        if self._drain:
            self._drain.cancel()
        with self._shutdown_lock:
            self._handled_shutdown = False
        if self._inhibitor is not None and not self._inhibitor.held:
            self._inhibitor.retake()
        try:
            if fence.uncordon(self.kube, self.node_name):
                self.events.node(
                    fence.get_node(self.kube, self.node_name), "Uncordoned", "Shutdown cancelled"
                )
        except KubeError as exc:
            log.warning("could not undo the cordon: %s", exc)

    def _on_stop(self) -> None:
        """SIGTERM: work out why systemd is stopping us, then act per policy."""
        with self._shutdown_lock:
            if self._handled_shutdown:
                self.notify.status("stopping; logind shutdown already handled")
                return
        from nodeagent.shutdown import why_stopping

        evidence = why_stopping()
        reason = evidence.kind.value
        log.info("stopping: reason %s (evidence: %s)", reason, ", ".join(evidence.jobs) or "none")
        self._handle_shutdown(reason, self.cfg.drain.deadline, source="SIGTERM")

    def _handle_shutdown(self, reason: str, budget: float, source: str) -> DrainResult | None:
        with self._shutdown_lock:
            if self._handled_shutdown:
                return None
            self._handled_shutdown = True
        policy = getattr(self.cfg.shutdown, reason.replace("-", "_"), self.cfg.shutdown.unknown)
        self.notify.status(f"{source}: {reason}, policy {policy}")
        if policy == "none":
            return None
        self.notify.send(f"EXTEND_TIMEOUT_USEC={int((budget + 10) * 1e6)}")
        try:
            return self._drain_for(reason, policy, budget)
        except KubeError as exc:
            log.error("shutdown drain failed: %s", exc)
            self.notify.status(f"drain for {reason} failed: {exc}")
            return None

    def _drain_for(self, reason: str, policy: str, budget: float) -> DrainResult | None:
        if policy == "cordon":
            fence.cordon(self.kube, fence.get_node(self.kube, self.node_name), reason)
            return None
        options = DrainOptions(
            reason=reason,
            deadline=budget,
            do_not_disrupt_ceiling=min(self.cfg.drain.do_not_disrupt_ceiling, budget / 2),
            force_after_deadline=self.cfg.shutdown.force_after_deadline,
            force_grace_seconds=1,
            concurrency=self.cfg.drain.concurrency,
        )

        def progress(msg: str) -> None:
            self.notify.send(f"STATUS=draining: {msg}", "EXTEND_TIMEOUT_USEC=30000000")
            log.info("%s", msg)

        self._drain = Drain(self.kube, self.node_name, options, self.events, progress)
        result = self._drain.run()
        metrics.DRAINS.labels(reason, result.outcome).inc()
        metrics.DRAIN_SECONDS.observe(result.seconds)
        self.notify.status(f"drain for {reason}: {result.outcome} in {result.seconds:.1f}s")
        return result


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
