"""/metrics and /healthz served by the agent (nodeagent/report/httpd.py), on IPv4 and IPv6
loopback."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from hack.agentproc import free_port
from nodeagent.report import httpd


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_healthz_follows_the_loops_and_metrics_are_served(host: str) -> None:
    stalled: list[str] = []
    port = free_port()
    server = httpd.serve(f"{host}:{port}", lambda: list(stalled))
    assert server is not None
    try:
        assert get(f"http://{host}:{port}/healthz") == (200, "ok\n")
        stalled.append("node")
        assert get(f"http://{host}:{port}/healthz") == (503, "stalled: node\n")
        code, text = get(f"http://{host}:{port}/metrics")
        assert code == 200 and "nodeagent_drains_total" in text
        assert get(f"http://{host}:{port}/nope")[0] == 404
    finally:
        server.shutdown()


def test_empty_address_serves_nothing() -> None:
    assert httpd.serve("", list) is None


def test_a_one_shot_command_counts_nothing_and_never_imports_prometheus() -> None:
    """Metrics are created by `enable()` (the daemon's first step); before it, updates
    are dropped without prometheus_client being imported."""
    code = (
        "import sys\n"
        "from nodeagent import metrics\n"
        "metrics.EVICTIONS.labels('accepted').inc()\n"
        "metrics.HEARTBEAT.set_to_current_time()\n"
        "metrics.DRAIN_SECONDS.observe(1.0)\n"
        "from nodeagent.drain import engine\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
        "registry = metrics.enable()\n"
        "metrics.EVICTIONS.labels('accepted').inc()\n"
        "print(registry.get_sample_value('nodeagent_evictions_total', {'result': 'accepted'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.0"
