"""promtool and promql-names (hack/build-promtool.sh), and the chart's monitoring objects
they read: the PrometheusRule's rule groups and the Grafana dashboard's queries."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from hack.chart import objects, render

ROOT = Path(__file__).resolve().parent.parent
# Release and namespace the rule unit tests (tests/rules) expect in the rendered selectors.
RELEASE = NAMESPACE = "nodeagent"
MONITORING = ["prometheusRule.enabled=true", "grafanaDashboard.enabled=true"]


def tools() -> Path:
    out = subprocess.run(
        [str(ROOT / "hack" / "build-promtool.sh")],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,  # cold: about 3 minutes on 2 cores
    )
    return Path(out.stdout.strip())


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools() / "promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def metric_names(exprs: list[str]) -> set[str]:
    """The metric names the expressions select, read by Prometheus' parser."""
    out = subprocess.run(
        [str(tools() / "promql-names")],
        input=json.dumps(exprs),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise ValueError(out.stderr.strip())
    return set(out.stdout.split())


def monitoring(values: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The rendered PrometheusRule and dashboard ConfigMap, by kind."""
    docs = objects(render(RELEASE, NAMESPACE, [*MONITORING, *(values or [])]))
    wanted = {"PrometheusRule", "ConfigMap"}
    found = {
        d["kind"]: d
        for d in docs
        if d["kind"] in wanted and (d["kind"] != "ConfigMap" or "nodeagent.json" in d["data"])
    }
    assert set(found) == wanted, f"rendered {sorted(found)}"
    return found


def rule_groups(values: list[str] | None = None) -> dict[str, Any]:
    """The PrometheusRule's spec: a Prometheus rule file as it is."""
    return dict(monitoring(values)["PrometheusRule"]["spec"])


def dashboard(values: list[str] | None = None) -> dict[str, Any]:
    return dict(json.loads(monitoring(values)["ConfigMap"]["data"]["nodeagent.json"]))


def alert_exprs(groups: dict[str, Any]) -> list[str]:
    return [rule["expr"] for group in groups["groups"] for rule in group["rules"]]


# Grafana's interval variables stand where PromQL wants a duration; the others in label
# values, where any string parses.
_DURATION_VARS = re.compile(r"\$\{?(__rate_interval|__interval|__range)\b\}?")
_VARS = re.compile(r"\$\{?\w+\}?")
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*\w+\)$", re.S)


def promql(query: str) -> str:
    """A dashboard query as PromQL: variables replaced, `label_values(sel, label)` as `sel`."""
    text = _VARS.sub("x", _DURATION_VARS.sub("5m", query.strip()))
    m = _LABEL_VALUES.match(text)
    return m.group(1) if m else text


def dashboard_exprs(dash: dict[str, Any]) -> list[str]:
    """Every query of the dashboard: its panels' (rows' included) and its variables'."""
    panels = [p for top in dash["panels"] for p in (top, *top.get("panels", []))]
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return [promql(e) for e in exprs]
