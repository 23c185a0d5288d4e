"""The /metrics text (format 0.0.4) written by nodeagent/metrics.py, against
prometheus_client's own for the same metrics and updates: every name, label, type, value
and line the same, `_created` series included (their timestamps differ by when each library
created the series, so only those values are masked)."""

from __future__ import annotations

import math
import re
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent import metrics
from nodeagent.metrics import Kind, Metric, Registry, go_float

Update = tuple[str, tuple[str, ...], str, float]  # metric, label values, method, argument


def ours(updates: list[Update]) -> bytes:
    declared: list[Metric] = []
    for m in metrics._DECLARED:
        buckets = m.bounds[:-1] if m.kind is Kind.HISTOGRAM else ()
        Metric(m.kind, m.name, m.documentation, m.labelnames, buckets, declared=declared)
    for m in declared:
        m.create()
    apply(updates, {m.name: m for m in declared})
    return Registry(declared).exposition()


def library(updates: list[Update]) -> bytes:
    registry = prometheus_client.CollectorRegistry()
    made: dict[str, Any] = {}
    for m in metrics._DECLARED:
        cls = getattr(prometheus_client, m.kind.name.title())
        options = {"buckets": m.bounds[:-1]} if m.kind is Kind.HISTOGRAM else {}
        made[m.name] = cls(m.name, m.documentation, m.labelnames, registry=registry, **options)
    apply(updates, made)
    return bytes(prometheus_client.generate_latest(registry))


def apply(updates: list[Update], made: dict[str, Any]) -> None:
    for name, labels, method, arg in updates:
        target = made[name].labels(*labels) if labels else made[name]
        getattr(target, method)(arg)


def masked(text: bytes) -> str:
    return re.sub(r"^(\w+_created(?:\{.*\})?) \S+$", r"\1 T", text.decode(), flags=re.M)


CASES: dict[str, list[Update]] = {
    "nothing counted yet": [],
    "labelled counters": [
        ("nodeagent_drains", ("poweroff", "drained"), "inc", 1),
        ("nodeagent_drains", ("reboot", "timed-out"), "inc", 2),
        ("nodeagent_drains", ("poweroff", "drained"), "inc", 0.5),
        ("nodeagent_evictions", ("accepted",), "inc", 25),
    ],
    "label values escaped": [
        ("nodeagent_pod_rejections", ('say "no"\\ then\nstop',), "inc", 1),
        ("nodeagent_loop_last_success_timestamp_seconds", ("ünïcode",), "set", 1),
    ],
    "histograms: on a bound, between, above the last": [
        ("nodeagent_drain_duration_seconds", (), "observe", 1),
        ("nodeagent_drain_duration_seconds", (), "observe", 2.5),
        ("nodeagent_drain_duration_seconds", (), "observe", 301),
        ("nodeagent_detach_wait_seconds", (), "observe", 0.01),
    ],
    "gauges: timestamps, fractions, negatives": [
        ("nodeagent_heartbeat_timestamp_seconds", (), "set", 1795599853.0949106),
        ("nodeagent_logind_inhibit_delay_max_seconds", (), "set", 1e-7),
        ("nodeagent_previous_boot_unclean", (), "set", -3),
        ("nodeagent_loop_last_success_timestamp_seconds", ("node",), "set", 1234567),
        ("nodeagent_loop_last_success_timestamp_seconds", ("pods",), "set", 123456),
        ("nodeagent_pdbs_unreadable", (), "inc", 1),
    ],
    "unlabelled counters": [("nodeagent_events_dropped", (), "inc", 3)],
}


@pytest.mark.parametrize("updates", CASES.values(), ids=CASES.keys())
def test_the_text_is_prometheus_clients(updates: list[Update]) -> None:
    assert masked(ours(updates)) == masked(library(updates))


@pytest.mark.parametrize("updates", CASES.values(), ids=CASES.keys())
def test_the_text_parses_with_every_metric_its_type(updates: list[Update]) -> None:
    families = {f.name: f for f in text_string_to_metric_families(ours(updates).decode())}
    for m in metrics._DECLARED:
        assert families[m.name].type == m.kind.value, m.name
        assert families[m.name].documentation == m.documentation


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1, "1.0"),
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (123456, "123456.0"),
        (1234567, "1.234567e+06"),
        (1795599853.0949106, "1.7955998530949106e+09"),
        (1e-7, "1e-07"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_values_are_written_as_go_writes_them(value: float, text: str) -> None:
    assert go_float(value) == text


@pytest.mark.parametrize(
    ("kind", "method", "arg", "error"),
    [
        (Kind.COUNTER, "inc", -1, ValueError),
        (Kind.COUNTER, "set", 1, TypeError),
        (Kind.GAUGE, "observe", 1, TypeError),
        (Kind.HISTOGRAM, "inc", 1, TypeError),
    ],
)
def test_an_update_the_type_has_not_is_refused(
    kind: Kind, method: str, arg: float, error: type[Exception]
) -> None:
    metric = Metric(kind, "x", "x", declared=[])
    metric.create()
    with pytest.raises(error):
        getattr(metric, method)(arg)


def test_labels_must_match_the_declared_ones() -> None:
    metric = Metric(Kind.COUNTER, "x", "x", ("a", "b"), declared=[])
    metric.create()
    with pytest.raises(ValueError):
        metric.labels("only one")
    with pytest.raises(ValueError):
        metric.inc()
