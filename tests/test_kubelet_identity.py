"""The host form's default credentials: the kubelet's own identity.

The control plane runs as kubeadm runs it (Node,RBAC, NodeRestriction); the agent gets a
certificate minted for the simulated node, CN=system:node:<node>, O=system:nodes, with no
RBAC binding, with and without the PodDisruptionBudget reader of
packaging/kubelet-pdb-reader.yaml.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import kubeutil as ku
from hack.agentproc import BASE_CONFIG, AgentProcess, free_port, merged, toml
from hack.localcluster import REJECT
from nodeagent.drain.podfilter import find_condition as pod_condition
from nodeagent.kube.client import JSON, ApiError, Kube, node_path
from nodeagent.kube.credentials import Plan, Source, client_user, common_name, node_of, plan
from nodeagent.rejection.controller import POD_REJECTED, RECREATE_ANNOTATION, RECREATED, STATE_WIPED
from nodeagent.report import conditions

RBAC = "/apis/rbac.authorization.k8s.io/v1"
READER = Path(__file__).resolve().parents[1] / "packaging" / "kubelet-pdb-reader.yaml"
TAINT = {"key": "nodeagent.io/evacuate", "effect": "NoSchedule"}


# -- pure parts ------------------------------------------------------------------------------


def test_plan_order() -> None:
    kubelet = "/etc/kubernetes/kubelet.conf"
    home = str(Path("~/.kube/config").expanduser())

    def exists(*paths: str) -> Any:
        return lambda p: p in paths

    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    table: list[tuple[str, str, dict[str, str], bool, Any, Plan]] = [
        ("/x", "", {}, True, exists(kubelet), Plan(Source.EXPLICIT, "/x")),
        ("", "", {"KUBECONFIG": "/k"}, True, exists(), Plan(Source.EXPLICIT, "/k")),
        ("", "", {"KUBECONFIG": ""}, True, exists(kubelet), Plan(Source.EXPLICIT, "")),
        ("", "", pod, True, exists(kubelet), Plan(Source.IN_CLUSTER, None)),
        ("", "", {}, False, exists(home, kubelet), Plan(Source.USER, home)),
        # the daemon never takes a person's kubeconfig lying on the node
        ("", "", {}, True, exists(home, kubelet), Plan(Source.KUBELET, kubelet, KUBELET)),
        ("", "", {}, True, exists(), Plan(Source.KUBELET, "", KUBELET)),
        ("", "/mine", {}, True, exists(kubelet), Plan(Source.KUBELET, "", ("/mine",))),
        ("", "/mine", {}, True, exists("/mine"), Plan(Source.KUBELET, "/mine", ("/mine",))),
    ]
    for explicit, key, env, daemon, check, want in table:
        assert plan(explicit, key, env, daemon=daemon, exists=check) == want, (explicit, env)


KUBELET = (
    "/var/lib/kubelet/kubeconfig",
    "/etc/kubernetes/kubelet.conf",
    "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
)


def test_node_name_from_the_certificate(cluster: Any, tmp_path: Path) -> None:
    path = cluster.mint_node_kubeconfig("ip-10-0-1-23.ec2.internal", tmp_path / "k.conf")
    assert client_user(str(path)) == "system:node:ip-10-0-1-23.ec2.internal"
    assert node_of(client_user(str(path))) == "ip-10-0-1-23.ec2.internal"
    other = cluster.mint_kubeconfig("alice", ["devs"], tmp_path / "alice.conf")
    assert node_of(client_user(str(other))) == ""
    assert common_name(b"not a certificate") == ""
    assert client_user(str(tmp_path / "missing")) == ""


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def pdb_reader(kube: Kube) -> Iterator[None]:
    """packaging/kubelet-pdb-reader.yaml applied for the test, removed after."""
    docs = list(yaml.safe_load_all(READER.read_text()))
    paths = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
    for doc in docs:
        kube.post(f"{RBAC}/{paths[doc['kind']]}", doc)
    try:
        yield
    finally:
        for doc in docs:
            kube.delete(f"{RBAC}/{paths[doc['kind']]}/{doc['metadata']['name']}")


def wait_pdbs_readable(kubeconfig: Path, readable: bool) -> None:
    """RBAC changes reach the authorizer through a watch: wait until they have."""

    def check() -> bool:
        try:
            Kube.from_kubeconfig(str(kubeconfig)).get("/apis/policy/v1/poddisruptionbudgets")
        except ApiError as exc:
            return exc.status == 403 and not readable
        return readable

    ku.wait_until(check, 15, f"PDBs readable={readable}")


def pdb_paced_node(cluster: Any, kube: Any, prefix: str, **pdb_spec: Any) -> tuple[str, str]:
    """A node with 3 Deployment pods under a PDB (default: one disruption at a time),
    and an open spare node for their replacements."""
    group, node, spare = ku.node_pair(cluster, kube, prefix)
    ku.deployment(kube, group, "web", group, 3)
    ku.pdb(kube, group, "web", {"app": "web"}, **(pdb_spec or {"maxUnavailable": 1}))
    ku.wait_running(kube, node, 3)
    ku.wait_pdb_ready(kube, group, "web")
    ku.open_node(kube, spare)
    return group, node


def drain_as_kubelet(cluster: Any, kube: Any, tmp_path: Path, readable: bool) -> float:
    _group, node = pdb_paced_node(cluster, kube, "kdr")
    kc = cluster.mint_node_kubeconfig(node, tmp_path / "kubelet.conf")
    wait_pdbs_readable(kc, readable)
    started = time.monotonic()
    res = ku.run_agent("drain", "--kubeconfig", str(kc), "--deadline", "90s")
    took = time.monotonic() - started
    assert res.returncode == 0, res.stdout + res.stderr
    assert not ku.running(ku.pods_on(kube, node))
    said = res.stderr.count("PodDisruptionBudgets not readable")
    # Without the reader it is said once, if a PDB refused an eviction at all: under load
    # the API server's own retries can outlast the replacement turning Ready.
    assert said == 0 if readable else said <= 1, res.stderr
    assert ku.node(kube, node)["spec"]["unschedulable"] is True
    print(f"\ndrain of 3 PDB-paced pods as system:node:{node}, reader={readable}: {took:.1f}s")
    return took


# -- drain and status ------------------------------------------------------------------------


def test_drain_as_the_kubelet_without_the_pdb_reader(
    cluster: Any, kube: Any, tmp_path: Path
) -> None:
    """The node name comes from the certificate; a 403 on PDBs is said once, and the
    refused evictions are retried on backoff until the drain is done."""
    drain_as_kubelet(cluster, kube, tmp_path, readable=False)


def test_pdbs_not_readable_is_said_once_and_evictions_retried_on_backoff(
    cluster: Any, kube: Any, tmp_path: Path
) -> None:
    """A PDB refuses every eviction until the test relaxes it: the drain says once that
    PDBs are not readable, keeps retrying on backoff, and finishes once the PDB allows."""
    group, node = pdb_paced_node(cluster, kube, "k403", minAvailable=3)
    kc = cluster.mint_node_kubeconfig(node, tmp_path / "kubelet.conf")
    wait_pdbs_readable(kc, False)
    err = tmp_path / "drain.err"
    with err.open("wb") as fh:
        drain = subprocess.Popen(
            [*ku.NODEAGENT, "drain", "-v", "--kubeconfig", str(kc), "--deadline", "90s"],
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )
    try:
        ku.wait_until(lambda: "PodDisruptionBudgets not readable" in err.read_text(), 30)
        time.sleep(12)  # a few backoff rounds: each would have logged again before
        assert drain.poll() is None, err.read_text()
        path = f"/apis/policy/v1/namespaces/{group}/poddisruptionbudgets/web"
        kube.merge_patch(path, {"spec": {"minAvailable": None, "maxUnavailable": 1}})
        assert drain.wait(90) == 0, err.read_text()
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.wait()
    text = err.read_text()
    assert text.count("PodDisruptionBudgets are not readable") == 1, text  # the log line
    assert text.count("PodDisruptionBudgets not readable") == 1, text  # the progress line
    assert "watch poddisruptionbudgets" not in text, text  # no retried PDB watch
    assert not ku.running(ku.pods_on(kube, node))


def test_drain_as_the_kubelet_with_the_pdb_reader(
    cluster: Any, kube: Any, tmp_path: Path, pdb_reader: None
) -> None:
    drain_as_kubelet(cluster, kube, tmp_path, readable=True)


def test_status_as_the_kubelet(cluster: Any, kube: Any, tmp_path: Path) -> None:
    group, node, _spare = ku.node_pair(cluster, kube, "kst")
    ku.deployment(kube, group, "web", group, 2)
    ku.pdb(kube, group, "web", {"app": "web"}, minAvailable=2)
    ku.wait_running(kube, node, 2)
    kc = cluster.mint_node_kubeconfig(node, tmp_path / "kubelet.conf")
    wait_pdbs_readable(kc, False)
    res = ku.run_agent("status", "--kubeconfig", str(kc))
    assert res.returncode == 0, res.stderr
    assert f"Node:       {node}" in res.stdout
    assert "Pods left to drain: 2" in res.stdout
    assert "PDBs not readable" in res.stdout


def test_status_as_the_kubelet_with_the_pdb_reader(
    cluster: Any, kube: Any, tmp_path: Path, pdb_reader: None
) -> None:
    group, node, _spare = ku.node_pair(cluster, kube, "kstr")
    ku.deployment(kube, group, "web", group, 2)
    ku.pdb(kube, group, "web", {"app": "web"}, minAvailable=2)
    ku.wait_running(kube, node, 2)
    ku.wait_pdb_ready(kube, group, "web")
    kc = cluster.mint_node_kubeconfig(node, tmp_path / "kubelet.conf")
    wait_pdbs_readable(kc, True)
    res = ku.run_agent("status", "--kubeconfig", str(kc))
    assert res.returncode == 0, res.stderr
    assert "PDBs not readable" not in res.stdout
    assert res.stdout.count(f"blocked by PDB {group}/web") == 2


# -- the daemon ------------------------------------------------------------------------------


def start_as_kubelet(tmp_path: Path, kubelet_conf: Path, **config: Any) -> AgentProcess:
    """`nodeagent run` with neither --kubeconfig nor --node: it finds the kubelet's
    kubeconfig (here through the kubelet_kubeconfig key) and its node in the certificate."""
    cfg = merged({"": {"kubelet_kubeconfig": str(kubelet_conf)}}, config)
    return AgentProcess.start(tmp_path, None, "kubelet-agent", cfg, name_node=False)


def tainted(kube: Kube, node: str) -> None:
    kube.merge_patch(node_path(node), {"spec": {"taints": [TAINT]}})


def test_run_with_evacuate_as_the_kubelet(cluster: Any, kube: Any, tmp_path: Path) -> None:
    group, node, spare = ku.node_pair(cluster, kube, "kev")
    ku.deployment(kube, group, "web", group, 2)
    ku.wait_running(kube, node, 2)
    ku.open_node(kube, spare)
    kc = cluster.mint_node_kubeconfig(node, tmp_path / "kubelet.conf")
    agent = start_as_kubelet(tmp_path, kc)
    try:
        ready = ku.wait_until(
            lambda: conditions.find(ku.node(kube, node), conditions.READY), 20, "heartbeat"
        )
        assert ready["status"] == "True"
        tainted(kube, node)
        ku.wait_until(lambda: not ku.running(ku.pods_on(kube, node)), 40, "evacuated")
        drained = ku.wait_until(
            lambda: conditions.find(ku.node(kube, node), conditions.DRAINED), 10, "Drained"
        )
        ku.wait_until(
            lambda: (
                (conditions.find(ku.node(kube, node), conditions.DRAINED) or {}).get("reason")
                == "Drained"
            ),
            10,
            f"Drained, not {drained}",
        )
        out = agent.output()
        assert f"system:node:{node}" in out and "has the rights a drain needs" in out
        assert "re-creating rejected pods is off" in out
        assert agent.proc.poll() is None
    finally:
        agent.kill()


def test_rejection_conditions_as_the_kubelet(cluster: Any, kube: Any, tmp_path: Path) -> None:
    """PodRejected and StateWiped are written; re-creation, which needs pods: create, is
    declined with the reason instead of failing."""
    group, node, _spare = ku.node_pair(cluster, kube, "krj")
    kc = cluster.mint_node_kubeconfig(node, tmp_path / "kubelet.conf")
    agent = start_as_kubelet(tmp_path, kc)
    try:
        annotations = {REJECT: "OutOfcpu", RECREATE_ANNOTATION: "true"}
        ku.bare_pod(kube, group, "rejected", node, annotations)

        def settled() -> JSON | None:
            pod = kube.get(f"/api/v1/namespaces/{group}/pods/rejected")
            done = all(pod_condition(pod, c) for c in (POD_REJECTED, STATE_WIPED, RECREATED))
            return pod if done else None

        pod = ku.wait_until(settled, 30, "PodRejected, StateWiped and Recreated")
        assert (pod_condition(pod, POD_REJECTED) or {})["status"] == "True"
        assert (pod_condition(pod, STATE_WIPED) or {})["status"] == "True"
        recreated = pod_condition(pod, RECREATED) or {}
        assert (recreated["status"], recreated["reason"]) == ("False", "RecreateRefused")
        assert "kubelet's identity may not create pods" in recreated["message"]
    finally:
        agent.kill()


def run_process(tmp_path: Path, config: dict[str, Any], home: Path | None = None) -> Any:
    """`nodeagent run` as a bare process (no waiting on its HTTP server), with a config
    file and no credentials or node name given; HOME may hold a kubeconfig to ignore."""
    cfg = merged(BASE_CONFIG, {"reporting": {"metrics_address": f"127.0.0.1:{free_port()}"}})
    (tmp_path / "agent.toml").write_text(toml(merged(cfg, config)))
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
    env = {k: v for k, v in env.items() if not k.startswith("NODEAGENT_")}
    env["NODEAGENT_LOCK_FILE"] = str(tmp_path / "agent.lock")  # one agent per node
    if home is not None:
        env["HOME"] = str(home)
    log = tmp_path / "agent.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [*ku.NODEAGENT, "run", "-v", "--config", str(tmp_path / "agent.toml")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
        )
    return proc, log


def test_a_missing_right_is_said_at_start(cluster: Any, kube: Any, tmp_path: Path) -> None:
    """A cluster whose system:nodes identities have no rights (no Node authorizer): the
    agent names the first missing right and the fix in one line and exits 1 (retried by
    systemd, unlike a bad configuration's 2). A kubelet certificate without the
    system:nodes group is such an identity here."""
    _group, node, _spare = ku.node_pair(cluster, kube, "kmr")
    kc = cluster.mint_kubeconfig(f"system:node:{node}", [], tmp_path / "kubelet.conf")
    proc, log = run_process(tmp_path, {"": {"kubelet_kubeconfig": str(kc)}})
    try:
        assert proc.wait(60) == 1, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errors = [line for line in log.read_text().splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, log.read_text()
    assert f"system:node:{node} may not get nodes {node}" in errors[0]
    assert "--authorization-mode=Node,RBAC" in errors[0]


def test_first_boot_waits_for_the_kubelets_kubeconfig(
    cluster: Any, kube: Any, tmp_path: Path
) -> None:
    """No kubeconfig yet (the kubelet's TLS bootstrap has not finished): the agent says what
    it waits for and uses no other identity, even with one at hand; once the kubelet writes
    its kubeconfig, it runs on it."""
    _group, node, _spare = ku.node_pair(cluster, kube, "kfb")
    later = tmp_path / "kubelet" / "kubeconfig"
    home = tmp_path / "home"
    admin = cluster.export_kubeconfig(home / ".kube" / "config")  # must not be taken
    assert admin.exists()
    proc, log = run_process(tmp_path, {"": {"kubelet_kubeconfig": str(later)}}, home)
    try:
        ku.wait_until(lambda: "waiting for the kubelet's kubeconfig" in log.read_text(), 20)
        assert str(later) in log.read_text()
        time.sleep(2)
        assert proc.poll() is None
        assert conditions.find(ku.node(kube, node), conditions.READY) is None
        cluster.mint_node_kubeconfig(node, later)
        ku.wait_until(
            lambda: conditions.find(ku.node(kube, node), conditions.READY), 30, "heartbeat"
        )
        assert f"found the kubelet's kubeconfig {later}" in log.read_text()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


# -- certificate rotation --------------------------------------------------------------------

FIRST_CERT_SECONDS = 60


def test_a_rotated_client_certificate_is_picked_up_without_a_restart(
    cluster: Any, kube: Any, tmp_path: Path
) -> None:
    """The agent starts on a certificate that expires in about a minute; the kubelet's
    rotation moves kubelet-client-current.pem onto a fresh one; past the first one's
    expiry the agent still heartbeats and still drains on an evacuate taint."""
    group, node, spare = ku.node_pair(cluster, kube, "krot")
    ku.deployment(kube, group, "web", group, 2)
    ku.wait_running(kube, node, 2)
    pki = tmp_path / "pki"
    t0 = time.monotonic()
    expiry = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=FIRST_CERT_SECONDS)
    cluster.rotate_kubelet_certificate(node, pki, expiry)
    kc = cluster.kubelet_kubeconfig(node, tmp_path / "kubelet.conf", pki)
    timeline = [f"{0.0:6.1f}s first certificate, expires {expiry:%H:%M:%S}"]

    def mark(what: str) -> None:
        timeline.append(f"{time.monotonic() - t0:6.1f}s {what}")

    agent = start_as_kubelet(tmp_path, kc, reporting={"heartbeat_interval": "5s"})
    try:
        ku.wait_until(
            lambda: conditions.find(ku.node(kube, node), conditions.READY), 20, "heartbeat"
        )
        mark("agent running, first heartbeat")
        time.sleep(max(0.0, FIRST_CERT_SECONDS / 3 - (time.monotonic() - t0)))
        cluster.rotate_kubelet_certificate(node, pki, datetime.now(UTC) + timedelta(days=1))
        mark("kubelet-client-current.pem moved onto a fresh certificate")
        until = (expiry - datetime.now(UTC)).total_seconds() + 3
        time.sleep(max(0.0, until))
        mark("first certificate expired")

        def beat_after_expiry() -> bool:
            ready = conditions.find(ku.node(kube, node), conditions.READY) or {}
            beat = datetime.strptime(ready["lastHeartbeatTime"], "%Y-%m-%dT%H:%M:%SZ")
            return beat.replace(tzinfo=UTC) > expiry

        ku.wait_until(beat_after_expiry, 20, "a heartbeat after the first certificate expired")
        mark("heartbeat after expiry")
        ku.open_node(kube, spare)
        tainted(kube, node)
        ku.wait_until(lambda: not ku.running(ku.pods_on(kube, node)), 40, "evacuated")
        mark("evacuate taint drained the node")
        out = agent.output()
        assert "client certificate" in out and "changed: reconnecting" in out
        assert "Unauthorized" not in out, out
        assert agent.proc.poll() is None
    finally:
        agent.kill()
        print("\ncertificate rotation timeline:\n" + "\n".join(timeline))
