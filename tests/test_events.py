"""Events while the API server does not answer: the backlog stays bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hack import kubeutil as ku
from nodeagent import metrics
from nodeagent.kube.client import Kube
from nodeagent.report.events import EventRecorder
from tests.tcpproxy import Proxy


def dropped() -> float:
    return metrics.enable().get_sample_value("nodeagent_events_dropped_total") or 0


def test_unsent_events_are_bounded_oldest_dropped_first(
    kube: Kube, admin_kubeconfig: str, tmp_path: Path
) -> None:
    ns = ku.unique("events")
    ku.namespace(kube, ns)
    port = urlsplit(kube.host).port
    assert port is not None
    proxy = Proxy(port)
    proxy.cut("blackhole")  # connections accepted, never answered: the server hangs
    via = ku.via_proxy(proxy.port, admin_kubeconfig, tmp_path)
    recorder = EventRecorder(via, "node", max_pending=50)
    pod: Any = {"metadata": {"namespace": ns, "name": "p", "uid": "u"}}
    before = dropped()
    try:
        for i in range(300):
            recorder.pod(pod, "Test", f"event {i}")
        # At most one event per sender is on the wire; the rest wait, 50 at most.
        assert 50 - recorder.workers <= recorder.pending <= 50
        assert 300 - 50 - recorder.workers <= dropped() - before <= 300 - 50
        proxy.cut("relay")  # the hung requests fail, the server answers again
        recorder.flush(30)
        assert recorder.pending == 0
    finally:
        proxy.close()
    sent = {
        e["message"]
        for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
        if e["reason"] == "Test"
    }
    assert {f"event {i}" for i in range(250, 300)} <= sent  # the newest were kept
    in_flight = {f"event {i}" for i in range(recorder.workers)}  # on the wire at the cut
    assert sent - in_flight <= {f"event {i}" for i in range(250, 300)}  # the oldest dropped
