"""Prometheus metrics and /healthz on a local port (loopback by default).

The metrics are declared here and created in a registry by `enable()`, which the daemon
calls first thing. Until then every update is dropped and prometheus_client is not even
imported: a one-shot `nodeagent drain` exports nothing, and the import (with the HTTP
server modules it pulls in) was 19 of the 90 ms that command took to start.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)


class Kind(Enum):
    COUNTER = "Counter"
    GAUGE = "Gauge"
    HISTOGRAM = "Histogram"


class Child(Protocol):
    """What a metric (or one of its labelled children) is updated through."""

    def inc(self, amount: float = 1) -> None: ...
    def set(self, value: float) -> None: ...
    def set_to_current_time(self) -> None: ...
    def observe(self, amount: float) -> None: ...


class _Dropped:
    """Every update of a metric before `enable()`."""

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def set_to_current_time(self) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


_DROPPED = _Dropped()
_DECLARED: list[Metric] = []
_registry: CollectorRegistry | None = None
_enabling = threading.Lock()


class Metric:
    """A metric declared now and created by `enable()` (prometheus_client's own type)."""

    def __init__(
        self,
        kind: Kind,
        name: str,
        documentation: str,
        labels: tuple[str, ...] = (),
        **options: Any,
    ) -> None:
        self.kind, self.name, self.documentation = kind, name, documentation
        self.labelnames, self.options = labels, options
        self._real: Any = None
        _DECLARED.append(self)

    def create(self, registry: CollectorRegistry) -> None:
        import prometheus_client

        cls = getattr(prometheus_client, self.kind.value)
        self._real = cls(
            self.name, self.documentation, self.labelnames, registry=registry, **self.options
        )

    def labels(self, *values: str) -> Child:
        return _DROPPED if self._real is None else cast(Child, self._real.labels(*values))

    def _child(self) -> Child:
        return _DROPPED if self._real is None else cast(Child, self._real)

    def inc(self, amount: float = 1) -> None:
        self._child().inc(amount)

    def set(self, value: float) -> None:
        self._child().set(value)

    def set_to_current_time(self) -> None:
        self._child().set_to_current_time()

    def observe(self, amount: float) -> None:
        self._child().observe(amount)


def enable() -> CollectorRegistry:
    """Create every declared metric in a registry, once, and return the registry."""
    global _registry
    with _enabling:
        if _registry is None:
            from prometheus_client import CollectorRegistry

            registry = CollectorRegistry()
            for metric in _DECLARED:
                metric.create(registry)
            _registry = registry
        return _registry


DRAINS = Metric(
    Kind.COUNTER, "nodeagent_drains", "Drains by reason and result", ("reason", "result")
)
DRAIN_SECONDS = Metric(
    Kind.HISTOGRAM,
    "nodeagent_drain_duration_seconds",
    "Drain wall time",
    buckets=(1, 2, 5, 10, 20, 30, 60, 90, 120, 300),
)
# After a drain, the wait for its volumes to detach; result: detached, timed-out, skipped.
DETACH_WAITS = Metric(
    Kind.COUNTER, "nodeagent_detach_waits", "Waits for drained volumes to detach", ("result",)
)
DETACH_SECONDS = Metric(
    Kind.HISTOGRAM,
    "nodeagent_detach_wait_seconds",
    "Time from the end of a drain until its volumes were detached (or the wait ran out)",
    buckets=(1, 2, 5, 10, 20, 30, 60, 120),
)
# result: accepted (the API server took the eviction), blocked (a pod's first refusal in
# a drain), forced (deleted after the deadline), granted (an earlier grant finished).
EVICTIONS = Metric(Kind.COUNTER, "nodeagent_evictions", "Eviction outcomes", ("result",))
EVENTS_DROPPED = Metric(
    Kind.COUNTER,
    "nodeagent_events_dropped",
    "Kubernetes Events dropped unsent: too many were waiting (the API server down or slow)",
)
HEARTBEAT = Metric(
    Kind.GAUGE,
    "nodeagent_heartbeat_timestamp_seconds",
    "Last time every loop of the agent was alive (every few seconds; costs the API nothing)",
)
LOOP_LAST_SUCCESS = Metric(
    Kind.GAUGE,
    "nodeagent_loop_last_success_timestamp_seconds",
    "Last time each long-running loop made progress",
    ("loop",),
)
API_THROTTLED = Metric(
    Kind.COUNTER,
    "nodeagent_api_throttled",
    "Requests the API server answered 429 by API Priority and Fairness, sent again after "
    "its Retry-After",
    ("verb",),
)
WATCH_RESTARTS = Metric(Kind.COUNTER, "nodeagent_watch_restarts", "Watch restarts", ("resource",))
INHIBIT_DELAY = Metric(
    Kind.GAUGE,
    "nodeagent_logind_inhibit_delay_max_seconds",
    "logind InhibitDelayMaxUSec as seen by the agent",
)
INHIBIT_SHORT = Metric(
    Kind.GAUGE,
    "nodeagent_logind_inhibit_delay_too_short",
    "1 if logind's inhibit delay is shorter than the drain budget",
)
PREVIOUS_BOOT_UNCLEAN = Metric(
    Kind.GAUGE,
    "nodeagent_previous_boot_unclean",
    "1 if the node's previous boot ended without a drain by nodeagent",
)
TERMINATION_GRACE_SHORT = Metric(
    Kind.GAUGE,
    "nodeagent_termination_grace_too_short",
    "1 if the agent's pod was stopped mid-drain with less grace than the drain needed",
)
KUBELET_GRACEFUL_SHUTDOWN = Metric(
    Kind.GAUGE,
    "nodeagent_kubelet_graceful_shutdown",
    "1 if the kubelet holds a logind shutdown delay lock (its graceful node shutdown is on: "
    "it kills pods at shutdown without regard for PDBs)",
)
PDBS_UNREADABLE = Metric(
    Kind.GAUGE,
    "nodeagent_pdbs_unreadable",
    "1 once listing PodDisruptionBudgets was refused (403): refused evictions are retried "
    "on backoff",
)

POD_REJECTIONS = Metric(
    Kind.COUNTER, "nodeagent_pod_rejections", "Pods the kubelet rejected at admission", ("reason",)
)
WIPES = Metric(Kind.COUNTER, "nodeagent_wipes", "Node-local state wipes", ("result",))
POD_RECREATIONS = Metric(Kind.COUNTER, "nodeagent_pod_recreations", "Rejected bare pods re-created")
LEFTOVERS_DELETED = Metric(
    Kind.COUNTER,
    "nodeagent_shutdown_leftovers_deleted",
    "Pods an earlier boot's kubelet shutdown left Failed, deleted after boot",
    ("owner",),
)


def loop_succeeded(loop: str) -> None:
    LOOP_LAST_SUCCESS.labels(loop).set(time.time())


def serve(address: str, unhealthy: Callable[[], list[str]] = list) -> Any:
    """Serve /metrics and /healthz on `host:port` ('' disables it).

    /healthz is 200 while every loop makes progress and 503 naming the stalled loops
    otherwise, the same rule that feeds the systemd watchdog.
    """
    if not address:
        return None
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/metrics":
                self._reply(200, generate_latest(enable()), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                stalled = unhealthy()
                text = f"stalled: {', '.join(stalled)}\n" if stalled else "ok\n"
                self._reply(503 if stalled else 200, text.encode(), "text/plain")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every few seconds would flood the journal

    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    try:
        server = Server((host, int(port)), Handler)
    except (OSError, ValueError) as exc:
        log.warning("metrics server on %s not started: %s", address, exc)
        return None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
