"""Prometheus metrics and /healthz on a local port (loopback by default)."""

from __future__ import annotations

import logging
import time
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
EVICTIONS = Counter("nodeagent_evictions", "Eviction outcomes", ["result"], registry=REGISTRY)
LOOP_LAST_SUCCESS = Gauge(
    "nodeagent_loop_last_success_timestamp_seconds",
    "Last time each long-running loop made progress",
    ["loop"],
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


def loop_succeeded(loop: str) -> None:
    LOOP_LAST_SUCCESS.labels(loop).set(time.time())


def serve(address: str) -> Any:
    """Start the metrics/healthz HTTP server on `host:port`; '' disables it."""
    if not address:
        return None
    from prometheus_client import start_http_server

    host, _, port = address.rpartition(":")
    try:
        server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=REGISTRY)
    except OSError as exc:
        log.warning("metrics server on %s not started: %s", address, exc)
        return None
    return server
