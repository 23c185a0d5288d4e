"""The chart's alerting rules under `promtool test rules` (tests/rules: each alert firing
and not firing), on the rules as the chart renders them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from hack.promtool import promtool, rule_groups

UNIT_TESTS = Path(__file__).resolve().parent / "rules" / "nodeagent-alerts.test.yaml"
RULES = "nodeagent-alerts.rules.yaml"  # the name UNIT_TESTS reads them from


def rules_beside_tests(tmp_path: Path, values: list[str] | None = None) -> Path:
    (tmp_path / RULES).write_text(yaml.safe_dump(rule_groups(values), sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


def test_the_rendered_rules_pass_check_and_their_unit_tests(tmp_path: Path) -> None:
    here = rules_beside_tests(tmp_path)
    checked = promtool("check", "rules", RULES, cwd=here)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", UNIT_TESTS.name, cwd=here)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_unit_tests_see_a_changed_rule(tmp_path: Path) -> None:
    """Rendered with another notReportingFor, NodeAgentNotReporting fires later than the
    unit tests expect: promtool reads the rendered rules, not a copy."""
    here = rules_beside_tests(tmp_path, ["prometheusRule.notReportingFor=10m"])
    tested = promtool("test", "rules", UNIT_TESTS.name, cwd=here)
    assert tested.returncode == 1, tested.stdout + tested.stderr
    assert "alertname: NodeAgentNotReporting" in tested.stdout + tested.stderr


def cases() -> list[dict[str, Any]]:
    doc = yaml.safe_load(UNIT_TESTS.read_text())
    return [case for group in doc["tests"] for case in group.get("alert_rule_test", [])]


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    alerts = {r["alert"] for g in rule_groups()["groups"] for r in g["rules"] if "alert" in r}
    firing = {c["alertname"] for c in cases() if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases() if not c.get("exp_alerts")}
    assert alerts, "no alerts rendered"
    assert firing == alerts, f"firing cases: {sorted(firing)}; alerts: {sorted(alerts)}"
    assert quiet == alerts, f"not-firing cases: {sorted(quiet)}; alerts: {sorted(alerts)}"
