"""Every metric the chart's alerts and Grafana dashboard query is one a live agent exports:
a `nodeagent run` against the control plane, its /metrics read, the queries read by
Prometheus' own parser (hack/promtool.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.agentproc import AgentProcess
from hack.promtool import alert_exprs, dashboard, dashboard_exprs, metric_names, rule_groups

# Written by Prometheus itself for every scrape target, not by the agent.
SCRAPE_SERIES = {"up"}
# What a family's samples are called, by the kind its TYPE line gives (text format 0.0.4).
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


def exported(text: str) -> set[str]:
    """The series names an exposition holds: each family's, whether or not it has samples
    yet (a labelled counter has none before its first increment), and each sample's."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names |= {name + suffix for suffix in SUFFIXES.get(kind, ("",))}
    names |= set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
    return names


@pytest.fixture(scope="module")
def live_metrics(
    cluster: Any, admin_kubeconfig: str, tmp_path_factory: pytest.TempPathFactory
) -> set[str]:
    node = ku.unique("names")
    cluster.add_node(node, {})
    agent = AgentProcess.start(tmp_path_factory.mktemp("names"), admin_kubeconfig, node)
    try:
        ku.wait_until(lambda: agent.healthz()[0] == 200, 60, "the agent's loops alive")
        code, text = agent.get("/metrics")
    finally:
        assert agent.stop() == 0, agent.output()
    assert code == 200, text
    return exported(text)


def test_exported_names_follow_each_family_kind() -> None:
    text = (
        "# TYPE nodeagent_drains_total counter\n"
        "# TYPE nodeagent_drain_duration_seconds histogram\n"
        'nodeagent_drain_duration_seconds_bucket{le="1.0"} 0.0\n'
        "# TYPE nodeagent_heartbeat_timestamp_seconds gauge\n"
    )
    assert exported(text) == {
        "nodeagent_drains_total",
        "nodeagent_drain_duration_seconds_bucket",
        "nodeagent_drain_duration_seconds_sum",
        "nodeagent_drain_duration_seconds_count",
        "nodeagent_heartbeat_timestamp_seconds",
    }


def test_parser_finds_names_in_every_position_and_rejects_bad_queries() -> None:
    expr = 'sum by (le) (rate(a_bucket{x="y"}[5m])) / on() group_left b offset 1h'
    assert metric_names([expr + " or max_over_time(c[5m:1m])"]) == {"a_bucket", "b", "c"}
    with pytest.raises(ValueError, match="parse error"):
        metric_names(["sum(rate(a[5m])"])
    with pytest.raises(ValueError, match="without an exact metric name"):
        metric_names(['{__name__=~"nodeagent_.*"}'])


def test_alerts_query_only_exported_metrics(live_metrics: set[str]) -> None:
    used = metric_names(alert_exprs(rule_groups()))
    assert used and "nodeagent_drains_total" in used
    missing = used - live_metrics - SCRAPE_SERIES
    assert not missing, f"not exported: {sorted(missing)}"


def test_dashboard_queries_only_exported_metrics(live_metrics: set[str]) -> None:
    exprs = dashboard_exprs(dashboard())
    assert len(exprs) >= 20, exprs
    used = metric_names(exprs)
    # What the dashboard is for: departures, drain seconds, evictions, warnings.
    for name in (
        "nodeagent_drains_total",
        "nodeagent_drain_duration_seconds_bucket",
        "nodeagent_evictions_total",
        "nodeagent_logind_inhibit_delay_too_short",
        "nodeagent_heartbeat_timestamp_seconds",
    ):
        assert name in used, sorted(used)
    missing = used - live_metrics - SCRAPE_SERIES
    assert not missing, f"not exported: {sorted(missing)}"


def test_a_misspelt_metric_is_caught(live_metrics: set[str]) -> None:
    used = metric_names(["rate(nodeagent_drain_total[5m])"])
    assert used - live_metrics == {"nodeagent_drain_total"}
