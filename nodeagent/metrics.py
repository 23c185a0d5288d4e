"""Prometheus metrics, at the bottom of the package: every part counts into them (the API
client its throttled requests, the drain its evictions, the clouds' readers their doubts)
and they import nothing of it. nodeagent/report/httpd.py serves them, with /healthz.

The metrics are declared here and created in a registry by `enable()`, which the daemon
calls first thing. Until then every update is dropped: a one-shot `nodeagent drain`
exports nothing.

The text exposition (format 0.0.4) is written here rather than by prometheus_client: the
agent needs counters, gauges and unlabelled histograms, about 150 lines, while the library
and what it imports (its own HTTP, WSGI, gzip and push-gateway modules, urllib.request) cost
every agent 1.8 MB of its 30 MB resident size, on every node of a fleet (bench/fleet.py).
The output is the library's, line for line, `_created` series included
(tests/test_metrics_exposition.py compares the two).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Kind(Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


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


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    """One metric's samples, named as prometheus_client's collect() names them."""

    name: str
    kind: Kind
    documentation: str
    samples: list[Sample] = field(default_factory=list)


class _Series:
    """One time series: a metric without labels, or one labelled child."""

    def __init__(self, kind: Kind, bounds: tuple[float, ...], lock: threading.Lock) -> None:
        self.kind, self.bounds, self._lock = kind, bounds, lock
        self.value = 0.0  # a counter's or gauge's value, a histogram's sum
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if self.kind is Kind.HISTOGRAM:
            raise TypeError("a histogram is observed, not incremented")
        if self.kind is Kind.COUNTER and amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        with self._lock:
            self.value += amount

    def set(self, value: float) -> None:
        if self.kind is not Kind.GAUGE:
            raise TypeError("only a gauge is set")
        with self._lock:
            self.value = float(value)

    def set_to_current_time(self) -> None:
        self.set(time.time())

    def observe(self, amount: float) -> None:
        if self.kind is not Kind.HISTOGRAM:
            raise TypeError("only a histogram is observed")
        with self._lock:
            self.value += amount
            for i, bound in enumerate(self.bounds):
                if amount <= bound:
                    self.counts[i] += 1
                    break

    def samples(self, name: str, labels: dict[str, str]) -> list[Sample]:
        with self._lock:
            value, counts = self.value, list(self.counts)
        if self.kind is Kind.GAUGE:
            return [Sample(name, labels, value)]
        created = Sample(f"{name}_created", labels, self.created)
        if self.kind is Kind.COUNTER:
            return [Sample(f"{name}_total", labels, value), created]
        out, total = [], 0
        for bound, count in zip(self.bounds, counts, strict=True):
            total += count
            out.append(Sample(f"{name}_bucket", {**labels, "le": go_float(bound)}, total))
        return [
            *out,
            Sample(f"{name}_count", labels, total),
            Sample(f"{name}_sum", labels, value),
            created,
        ]


_DROPPED = _Dropped()
_DECLARED: list[Metric] = []
_registry: Registry | None = None
_enabling = threading.Lock()


class Metric:
    """A metric declared now and created by `enable()`."""

    def __init__(
        self,
        kind: Kind,
        name: str,
        documentation: str,
        labels: tuple[str, ...] = (),
        buckets: tuple[float, ...] = (),
        declared: list[Metric] | None = None,  # where enable() finds it (tests: their own)
    ) -> None:
        self.kind, self.name, self.documentation = kind, name, documentation
        self.labelnames = labels
        self.bounds = (*buckets, math.inf) if kind is Kind.HISTOGRAM else ()
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], _Series] | None = None  # None: not enabled
        (_DECLARED if declared is None else declared).append(self)

    def create(self) -> None:
        with self._lock:
            self._series = {} if self.labelnames else {(): self._new()}

    def _new(self) -> _Series:
        return _Series(self.kind, self.bounds, threading.Lock())

    def labels(self, *values: str) -> Child:
        if self._series is None:
            return _DROPPED
        if len(values) != len(self.labelnames) or not values:
            raise ValueError(f"{self.name}: labels {self.labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = self._new()
        return series

    def _child(self) -> Child:
        if self._series is None:
            return _DROPPED
        if self.labelnames:
            raise ValueError(f"{self.name}: missing label values {self.labelnames}")
        return self._series[()]

    def inc(self, amount: float = 1) -> None:
        self._child().inc(amount)

    def set(self, value: float) -> None:
        self._child().set(value)

    def set_to_current_time(self) -> None:
        self._child().set_to_current_time()

    def observe(self, amount: float) -> None:
        self._child().observe(amount)

    def family(self) -> Family:
        with self._lock:
            children = list((self._series or {}).items())
        samples = [
            sample
            for values, series in children
            for sample in series.samples(self.name, dict(zip(self.labelnames, values, strict=True)))
        ]
        return Family(self.name, self.kind, self.documentation, samples)


class Registry:
    """The enabled metrics, read as samples (tests) or as the text exposition (/metrics)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Family]:
        return [m.family() for m in self.metrics]

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        for family in self.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == (labels or {}):
                    return sample.value
        return None

    def exposition(self) -> bytes:
        return "".join(_text(family) for family in self.collect()).encode()


def _text(family: Family) -> str:
    """One family in text format 0.0.4; its `_created` samples follow as a gauge family."""
    name = f"{family.name}_total" if family.kind is Kind.COUNTER else family.name
    created = f"{family.name}_created"
    lines = [_header(name, family.kind.value, family.documentation)]
    lines += [_line(s) for s in family.samples if s.name != created]
    later = [_line(s) for s in family.samples if s.name == created]
    if later:
        lines += [_header(created, "gauge", family.documentation), *later]
    return "".join(lines)


def _header(name: str, kind: str, documentation: str) -> str:
    help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def _line(sample: Sample) -> str:
    pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
    labels = f"{{{pairs}}}" if pairs else ""
    return f"{sample.name}{labels} {go_float(sample.value)}\n"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def go_float(value: float) -> str:
    """A value as Go's Prometheus libraries write it (and prometheus_client, to match)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def enable() -> Registry:
    """Create every declared metric in a registry, once, and return the registry."""
    global _registry
    with _enabling:
        if _registry is None:
            for metric in _DECLARED:
                metric.create()
            _registry = Registry(list(_DECLARED))
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
# a drain), forced (deleted after the deadline), granted (an earlier grant finished),
# kubelet-shutdown (deleted past its PDB: the kubelet's graceful shutdown was stopping it).
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
# The cloud's early warnings (nodeagent/cloud/): each notice once, by cloud and kind; each
# answer of the metadata endpoint not believed, by error (timeout, unreachable, http,
# malformed, token, implausible, other-vm).
CLOUD_WARNINGS = Metric(
    Kind.COUNTER,
    "nodeagent_cloud_warnings",
    "Early warnings the cloud's metadata endpoint announced",
    ("cloud", "kind"),
)
METADATA_ERRORS = Metric(
    Kind.COUNTER,
    "nodeagent_cloud_metadata_errors",
    "Streaks of answers of the cloud's metadata endpoint the agent did not act on, one per "
    "item and streak",
    ("cloud", "error"),
)
# Set when the loop starts reading (so an endpoint never read ages like one that stopped
# answering), then at every reading in which every item was believed.
CLOUD_LAST_READING = Metric(
    Kind.GAUGE,
    "nodeagent_cloud_metadata_last_reading_timestamp_seconds",
    "Last time every warning item of the cloud's metadata endpoint was read and believed "
    "(the warnings loop's start until then)",
    ("cloud",),
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
