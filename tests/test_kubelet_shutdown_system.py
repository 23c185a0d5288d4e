"""The kubelet's graceful node shutdown, detected through the real logind in a booted systemd.

The container runs nodeagent.service on the kubelet's own identity (its kubeconfig at
kubeadm's /etc/kubernetes/kubelet.conf, node name from the certificate) and a stand-in
kubelet that takes a shutdown delay lock as `kubelet`, as the kubelet does when its
shutdownGracePeriod is above 0. The agent must say that PDBs are not guaranteed.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.agentproc import free_port
from nodeagent.fence.marker import DRAIN_RESULT
from nodeagent.kube.client import Kube
from nodeagent.report import conditions
from tests.nspawn import Machine, nspawn_root, packaged_root

# A delay lock taken as the kubelet takes it, and let go once logind announces the
# shutdown (the kubelet lets go once it has killed its pods): `kill 0` ends the whole unit,
# systemd-inhibit with it, since busctl would only notice grep's exit at its next write.
# The unit counts as started once logind lists the lock, so the agent (ordered after it)
# sees it at start.
KUBELET_WITH_GRACEFUL_SHUTDOWN = """[Unit]
Description=Stand-in kubelet with graceful node shutdown on

[Service]
ExecStart=/usr/bin/systemd-inhibit --what=shutdown --who=kubelet \
 --why="Kubelet needs time to handle node shutdown" --mode=delay /bin/sh -c \
 'stdbuf -oL busctl monitor --match "type=signal,member=PrepareForShutdown" \
 | { grep -q -m1 PrepareForShutdown; kill 0; }'
ExecStartPost=/bin/sh -c 'until systemd-inhibit --list --no-pager | grep -q kubelet; \
do sleep 0.1; done'

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packaged_root(nspawn_root(), tmp_path_factory.getbasetemp() / "packaged")


@pytest.fixture
def machine(
    cluster: Any, kube: Kube, template: Path, tmp_path: Path
) -> Iterator[tuple[Machine, str, int]]:
    name = ku.unique("kgs")
    cluster.add_node(name, {ku.GROUP_LABEL: name})
    port = free_port()
    m = Machine(template, tmp_path, name)
    try:
        m.install_agent(Path(cluster.kubeconfig), "")
        # No kubeconfig, no node: the kubelet's, found where kubeadm puts it.
        m.write_config(f'[reporting]\nmetrics_address = "127.0.0.1:{port}"\n')
        (m.path("etc/nodeagent/kubeconfig")).unlink()
        cluster.mint_node_kubeconfig(name, m.path("etc/kubernetes/kubelet.conf"))
        m.path("etc/systemd/system/kubelet.service").write_text(KUBELET_WITH_GRACEFUL_SHUTDOWN)
        yield m, name, port
    finally:
        print(m.journal_text()[-20000:])  # shown only when the test fails
        m.destroy()


def test_the_kubelets_delay_lock_is_reported(
    machine: tuple[Machine, str, int], kube: Kube, admin_kubeconfig: str
) -> None:
    m, name, port = machine
    m.boot()
    assert any(row[0] == "kubelet" and row[-1] == "delay" for row in m.inhibitors())

    def reason() -> str:
        return str((conditions.find(ku.node(kube, name), conditions.READY) or {}).get("reason"))

    ku.wait_until(lambda: reason() == "KubeletGracefulShutdown", 60, "the reason")
    assert any("PDBs are not guaranteed at shutdown" in msg for msg in m.messages())
    # The container shares the host's network.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    assert "nodeagent_kubelet_graceful_shutdown 1.0" in metrics, metrics
    shown = ku.run_agent("status", "--kubeconfig", admin_kubeconfig, "--node", name)
    assert "Warning:    the kubelet's graceful node shutdown is on" in shown.stdout


def test_at_a_poweroff_the_pods_the_kubelet_stops_leave_past_their_pdb(
    machine: tuple[Machine, str, int], kube: Kube
) -> None:
    """logind announces a poweroff while the kubelet holds its lock: the pods the kubelet
    kills at once are deleted past their PDB (which counts them healthy), each with an
    Event, and the drain ends drained instead of waiting out the deadline."""
    m, name, _port = machine
    ns = ku.namespace(kube, name)
    ku.deployment(kube, ns, "quorum", name, 2)
    ku.pdb(kube, ns, "quorum-pdb", {"app": "quorum"}, minAvailable=2)
    pods = sorted(p["metadata"]["name"] for p in ku.wait_running(kube, name, 2))
    ku.wait_pdb_ready(kube, ns, "quorum-pdb")
    m.boot()
    ku.wait_until(
        lambda: any("PDBs are not guaranteed at shutdown" in msg for msg in m.messages()),
        60,
        "the agent to see the kubelet's lock",
    )

    assert m.run("poweroff").returncode == 0
    assert m.wait_exit(60) == 0

    annotations = ku.node(kube, name)["metadata"].get("annotations") or {}
    assert annotations.get(DRAIN_RESULT) == "drained", annotations
    query = {"fieldSelector": "reason=DeletedForKubeletShutdown,source=nodeagent"}
    events = kube.request("GET", f"/api/v1/namespaces/{ns}/events", query=query)["items"]
    assert sorted(e["involvedObject"]["name"] for e in events) == pods
    said = [msg for msg in m.messages() if "the kubelet's graceful shutdown is stopping it" in msg]
    assert len(said) == 2, m.messages()
