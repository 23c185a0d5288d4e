"""Prometheus metrics and /healthz on a local port (loopback by default)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()
DRAINS = Counter(
    "nodeagent_drains", "Drains by reason and result", ["reason", "result"], registry=REGISTRY
)
DRAIN_SECONDS = Histogram(
    "nodeagent_drain_duration_seconds",
    "Drain wall time",
    buckets=(1, 2, 5, 10, 20, 30, 60, 90, 120, 300),
    registry=REGISTRY,
)
# result: accepted (the API server took the eviction), blocked (a pod's first refusal in
# a drain), forced (deleted after the deadline), granted (an earlier grant finished).
EVICTIONS = Counter("nodeagent_evictions", "Eviction outcomes", ["result"], registry=REGISTRY)
EVENTS_DROPPED = Counter(
    "nodeagent_events_dropped",
    "Kubernetes Events dropped unsent: too many were waiting (the API server down or slow)",
    registry=REGISTRY,
)
HEARTBEAT = Gauge(
    "nodeagent_heartbeat_timestamp_seconds",
    "Last time every loop of the agent was alive (every few seconds; costs the API nothing)",
    registry=REGISTRY,
)
LOOP_LAST_SUCCESS = Gauge(
    "nodeagent_loop_last_success_timestamp_seconds",
    "Last time each long-running loop made progress",
    ["loop"],
    registry=REGISTRY,
)
API_THROTTLED = Counter(
    "nodeagent_api_throttled",
    "Requests the API server answered 429 by API Priority and Fairness, sent again after "
    "its Retry-After",
    ["verb"],
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "nodeagent_watch_restarts", "Watch restarts", ["resource"], registry=REGISTRY
)
INHIBIT_DELAY = Gauge(
    "nodeagent_logind_inhibit_delay_max_seconds",
    "logind InhibitDelayMaxUSec as seen by the agent",
    registry=REGISTRY,
)
INHIBIT_SHORT = Gauge(
    "nodeagent_logind_inhibit_delay_too_short",
    "1 if logind's inhibit delay is shorter than the drain budget",
    registry=REGISTRY,
)
PREVIOUS_BOOT_UNCLEAN = Gauge(
    "nodeagent_previous_boot_unclean",
    "1 if the node's previous boot ended without a drain by nodeagent",
    registry=REGISTRY,
)
TERMINATION_GRACE_SHORT = Gauge(
    "nodeagent_termination_grace_too_short",
    "1 if the agent's pod was stopped mid-drain with less grace than the drain needed",
    registry=REGISTRY,
)
KUBELET_GRACEFUL_SHUTDOWN = Gauge(
    "nodeagent_kubelet_graceful_shutdown",
    "1 if the kubelet holds a logind shutdown delay lock (its graceful node shutdown is on: "
    "it kills pods at shutdown without regard for PDBs)",
    registry=REGISTRY,
)
PDBS_UNREADABLE = Gauge(
    "nodeagent_pdbs_unreadable",
    "1 once listing PodDisruptionBudgets was refused (403): refused evictions are retried "
    "on backoff",
    registry=REGISTRY,
)

POD_REJECTIONS = Counter(
    "nodeagent_pod_rejections",
    "Pods the kubelet rejected at admission",
    ["reason"],
    registry=REGISTRY,
)
WIPES = Counter("nodeagent_wipes", "Node-local state wipes", ["result"], registry=REGISTRY)
POD_RECREATIONS = Counter(
    "nodeagent_pod_recreations", "Rejected bare pods re-created", registry=REGISTRY
)
LEFTOVERS_DELETED = Counter(
    "nodeagent_shutdown_leftovers_deleted",
    "Pods an earlier boot's kubelet shutdown left Failed, deleted after boot",
    ["owner"],
    registry=REGISTRY,
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
                self._reply(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
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
