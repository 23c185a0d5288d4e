"""Pods an earlier boot's kubelet shutdown left Failed: deleted after boot when their
ReplicaSet has replaced them; Job and bare pods only when configured."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from hack.agentproc import AgentProcess
from nodeagent.agent.daemon import Agent
from nodeagent.config import Config, LeftoversConfig
from nodeagent.departure.leftovers import (
    EVENT_REASON,
    LeftoverCleaner,
    Verdict,
    boot_began,
    boot_time,
    killed_at,
    this_boot,
    verdict,
)
from nodeagent.kube.client import JSON, Kube, api_stamp, node_path, pods_path
from nodeagent.rejection.controller import rejection_of
from nodeagent.report.events import EventRecorder

BOOT = 1_800_000_000.0
SHUTDOWN_AT = "sim.nodeagent.io/shutdown-at"


def killed(
    at: float = BOOT - 60,
    owner: str | None = "ReplicaSet",
    reason: str = "Terminated",
    condition: str = "TerminationByKubelet",
) -> JSON:
    refs = [{"kind": owner, "name": "web-1", "uid": "rs-uid", "controller": True}] if owner else []
    cond = {"type": "DisruptionTarget", "status": "True", "reason": condition}
    cond["lastTransitionTime"] = api_stamp(at)
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "ownerReferences": refs},
        "spec": {},
        "status": {"phase": "Failed", "reason": reason, "conditions": [cond]},
    }


def replicaset(replicas: int = 2, live: int = 2, uid: str = "rs-uid", seen: int = 1) -> JSON:
    return {
        "metadata": {"name": "web-1", "uid": uid, "generation": 1},
        "spec": {"replicas": replicas},
        "status": {"replicas": live, "observedGeneration": seen},
    }


DEFAULT = LeftoversConfig()
ALL = LeftoversConfig(jobs=True, bare=True)


@pytest.mark.parametrize(
    ("pod", "cfg", "rs", "expected"),
    [
        (killed(), DEFAULT, replicaset(), Verdict.DELETE),
        (killed(at=BOOT + 5), DEFAULT, replicaset(), Verdict.THIS_BOOT),
        (killed(), DEFAULT, replicaset(live=1), Verdict.NOT_REPLACED),
        (killed(), DEFAULT, replicaset(uid="other"), Verdict.NOT_REPLACED),  # a new RS
        (killed(), DEFAULT, replicaset(seen=0), Verdict.NOT_REPLACED),  # status not current
        (killed(), DEFAULT, replicaset(replicas=0, live=0), Verdict.DELETE),  # scaled down
        (killed(), DEFAULT, None, Verdict.NOT_REPLACED),  # gone or unreadable
        (killed(owner="Job"), DEFAULT, None, Verdict.KEEP_JOB),
        (killed(owner="Job"), ALL, None, Verdict.DELETE),
        (killed(owner=None), DEFAULT, None, Verdict.KEEP_BARE),
        (killed(owner=None), ALL, None, Verdict.DELETE),
        (killed(owner="StatefulSet"), ALL, None, Verdict.CONTROLLER_CLEANS),
        (killed(owner="DaemonSet"), ALL, None, Verdict.CONTROLLER_CLEANS),
        (killed(reason="Error"), ALL, replicaset(), Verdict.NOT_LEFTOVER),
        (killed(condition="EvictionByEvictionAPI"), ALL, replicaset(), Verdict.NOT_LEFTOVER),
        (killed(reason="NodeShutdown"), ALL, replicaset(), Verdict.NOT_LEFTOVER),
    ],
)
def test_verdict(pod: JSON, cfg: LeftoversConfig, rs: JSON | None, expected: Verdict) -> None:
    assert verdict(pod, BOOT, cfg, rs) is expected


def rejected_at_shutdown() -> JSON:
    pod = killed(reason="NodeShutdown")
    pod["status"] = {
        "phase": "Failed",
        "reason": "NodeShutdown",
        "message": "Pod was rejected as the node is shutting down.",
    }
    return pod


@pytest.mark.parametrize(
    ("pod", "owner"),
    [
        (killed(), "leftovers"),
        (killed(owner=None), "leftovers"),
        (rejected_at_shutdown(), "rejection"),
        (killed(reason="Error"), None),
    ],
)
def test_each_kind_of_pod_has_one_owner(pod: JSON, owner: str | None) -> None:
    owners = {
        "leftovers": killed_at(pod) is not None,
        "rejection": rejection_of(pod) is not None,
    }
    assert [k for k, mine in owners.items() if mine] == ([owner] if owner else [])


def test_boot_time_from_proc_stat(tmp_path: Path) -> None:
    stat = ku.write(tmp_path / "stat", "cpu 1 2 3\nbtime 1700000000\nprocesses 5\n")
    assert boot_time(stat) == 1_700_000_000.0
    assert 0 < boot_time() < time.time()


@pytest.mark.parametrize(
    ("kernel", "userspace", "began"),
    [
        # A host: systemd starts seconds after the kernel.
        (BOOT, BOOT + 3, BOOT + 3),
        # A container rebooted long after the host's kernel: its own systemd's start.
        (BOOT, BOOT + 86_400, BOOT + 86_400),
        # A clock stepped back between the kernel's boot and systemd's: never earlier
        # than the kernel.
        (BOOT, BOOT - 5, BOOT),
        # systemd could not be asked: the kernel's time.
        (BOOT, None, BOOT),
    ],
)
def test_boot_began_is_the_later_of_kernel_and_userspace(
    kernel: float, userspace: float | None, began: float
) -> None:
    assert boot_began(kernel, userspace) == began


def test_without_systemd_this_boot_is_btime_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stat = ku.write(tmp_path / "stat", "btime 1700000000\n")
    nobody = f"unix:path={tmp_path / 'no-bus'}"
    with caplog.at_level("WARNING", logger="nodeagent.departure.leftovers"):
        assert this_boot(nobody, stat) == 1_700_000_000.0
    (record,) = caplog.records
    assert "UserspaceTimestamp" in record.getMessage()
    assert "btime" in record.getMessage()


def test_config_key_turns_the_loop_off(kube: Kube) -> None:
    on = Config()
    off = Config(leftovers=LeftoversConfig(enabled=False))
    assert "leftovers" in [loop.name for loop in Agent(on, kube)._loops()]
    assert "leftovers" not in [loop.name for loop in Agent(off, kube)._loops()]


def named(kube: Kube, node: str, prefix: str) -> list[JSON]:
    return [p for p in ku.pods_on(kube, node) if p["metadata"]["name"].startswith(prefix)]


def failed(pods: list[JSON]) -> list[JSON]:
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]


def shut_down(kube: Kube, node: str, at: float, expect: int) -> None:
    """Play the kubelet's graceful shutdown at `at` (simulated kubelet)."""
    kube.merge_patch(node_path(node), {"metadata": {"annotations": {SHUTDOWN_AT: api_stamp(at)}}})
    ku.wait_until(lambda: len(failed(ku.pods_on(kube, node))) >= expect, 30, "pods killed")


def test_after_boot_the_agent_deletes_replaced_leftovers(
    cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path
) -> None:
    group, node, spare = ku.node_pair(cluster, kube, "left")
    ku.deployment(kube, group, "web", group, 2)
    ku.job(kube, group, "batch", group)
    ku.bare_pod(kube, group, "solo", node)
    ku.wait_running(kube, node, 4)
    ku.open_node(kube, spare)
    kube.merge_patch(node_path(node), {"spec": {"unschedulable": True}})  # as while it is down
    # The previous boot's shutdown: before this host booted, on the clock the agent uses.
    shut_down(kube, node, boot_time() - 60, 4)
    old_web = {p["metadata"]["uid"] for p in failed(named(kube, node, "web-"))}
    assert len(old_web) == 2
    # Replacements run; a pod killed by a shutdown of this boot must stay.
    ku.wait_until(lambda: len(ku.running(ku.pods_on(kube, spare))) >= 2, 60, "replacements")
    ku.deployment(kube, group, "late", group, 1, nodeName=node)
    ku.wait_until(lambda: ku.running(named(kube, node, "late-")), 30, "late running")
    shut_down(kube, node, time.time(), 5)

    agent = AgentProcess.start(tmp_path, admin_kubeconfig, node)
    try:
        ku.wait_until(
            lambda: not old_web & {p["metadata"]["uid"] for p in ku.pods_on(kube, node)},
            60,
            "the replaced leftovers deleted",
        )
        ku.wait_until(lambda: agent.metric("nodeagent_loop_last_success_timestamp_seconds",
                                           loop="leftovers"), 30, "the pass done")  # fmt: skip
        assert agent.metric("nodeagent_shutdown_leftovers_deleted_total", owner="ReplicaSet") == 2
    finally:
        assert agent.stop() == 0
    kept = sorted(p["metadata"]["name"] for p in failed(ku.pods_on(kube, node)))
    assert [n.split("-")[0] for n in kept] == ["batch", "late", "solo"], kept
    reasons = [e for e in pod_events(kube, group) if e["reason"] == EVENT_REASON]
    assert len(reasons) == 2
    assert all("ReplicaSet web-" in e["message"] and "has replaced it" in e["message"]
               for e in reasons)  # fmt: skip

    # Configured, the next start also deletes the Job's and the bare pod.
    agent = AgentProcess.start(
        tmp_path, admin_kubeconfig, node, {"leftovers": {"jobs": True, "bare": True}}
    )
    try:
        ku.wait_until(
            lambda: [p["metadata"]["name"][:4] for p in failed(ku.pods_on(kube, node))] == ["late"],
            60,
            "Job and bare leftovers deleted",
        )
    finally:
        assert agent.stop() == 0
    assert not ku.exists(kube, pods_path(group, "solo"))


def pod_events(kube: Kube, ns: str) -> list[JSON]:
    return list(kube.get(f"/api/v1/namespaces/{ns}/events")["items"])


def test_the_shipped_role_is_enough(cluster: Any, kube: Kube, tmp_path: Path) -> None:
    """List the node's pods, read the ReplicaSet, delete, send the Event: as the
    agent's own identity with packaging/rbac.yaml's role and nothing else."""
    group, node, spare = ku.node_pair(cluster, kube, "role")
    ku.deployment(kube, group, "web", group, 1)
    ku.wait_running(kube, node, 1)
    ku.open_node(kube, spare)
    kube.merge_patch(node_path(node), {"spec": {"unschedulable": True}})
    shut_down(kube, node, time.time(), 1)
    ku.wait_until(lambda: ku.running(ku.pods_on(kube, spare)), 30, "the replacement")
    agent = ku.shipped_identity(cluster, kube, node, group, tmp_path, ("nodeagent",))
    events = EventRecorder(agent, node)
    # This boot began after that shutdown, as far as this pass is concerned.
    cleaned = LeftoverCleaner(agent, node, LeftoversConfig(), events, time.time() + 60).run()
    events.flush()
    assert [c.verdict for c in cleaned] == [Verdict.DELETE]
    assert failed(ku.pods_on(kube, node)) == []
    assert [e["reason"] for e in pod_events(kube, group)].count(EVENT_REASON) == 1


class StaleListing(LeftoverCleaner):
    """The pass's listing, then a write to each pod before it is judged: what a mirror a
    moment behind the API server hands the pass (a controller changed the pod meanwhile)."""

    admin: Kube

    def _pods(self) -> list[JSON]:
        pods = super()._pods()
        for pod in pods:
            meta = pod["metadata"]
            body = {"metadata": {"labels": {"touched": "after-listing"}}}
            self.admin.merge_patch(pods_path(meta["namespace"], meta["name"]), body)
        return pods


def test_a_leftover_changed_after_the_listing_is_judged_again(
    cluster: Any, kube: Kube, tmp_path: Path
) -> None:
    """Each delete carries the resourceVersion judged: a 409 reads the pod again and judges
    it again, instead of leaving it for the next boot."""
    group, node, _spare = ku.node_pair(cluster, kube, "stale")
    ku.bare_pod(kube, group, "solo", node)
    ku.wait_running(kube, node, 1)
    shut_down(kube, node, time.time(), 1)
    agent = ku.shipped_identity(cluster, kube, node, group, tmp_path, ("nodeagent",))
    events = EventRecorder(agent, node)
    cfg = LeftoversConfig(bare=True)
    cleaner = StaleListing(agent, node, cfg, events, time.time() + 60)
    cleaner.admin = kube
    cleaned = cleaner.run()
    events.flush()
    assert [c.verdict for c in cleaned] == [Verdict.DELETE]
    assert not ku.exists(kube, pods_path(group, "solo"))
