"""/metrics and /healthz served by the agent, on IPv4 and IPv6 loopback."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from nodeagent.report import metrics
from tests.agentproc import free_port


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
    server = metrics.serve(f"{host}:{port}", lambda: list(stalled))
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
    assert metrics.serve("", list) is None
