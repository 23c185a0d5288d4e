"""`nodeagent wipe --pod NS/NAME`: the rejected-pod wipe run by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hack import kubeutil as ku
from hack.agentproc import toml
from nodeagent.kube.client import Kube, pods_path


def setup(cluster: Any, kube: Kube, tmp_path: Path) -> tuple[str, str, Path, Path]:
    group, node, _spare = ku.node_pair(cluster, kube, "wc")
    pod = ku.bare_pod(kube, group, "app", node)
    uid = pod["metadata"]["uid"]
    root = tmp_path / "state"
    (root / uid).mkdir(parents=True)
    (root / uid / "cache").write_text("stale")
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        toml({"rejection": {"state_roots": [str(root)], "state_paths": [f"{root}/{{uid}}"]}})
    )
    return group, node, root / uid, cfg


def wipe(node: str, cfg: Path, kubeconfig: str, *args: str) -> Any:
    return ku.run_agent(
        "wipe", "--node", node, "--config", str(cfg), "--kubeconfig", kubeconfig, *args
    )


def state_wiped(kube: Kube, ns: str) -> dict[str, Any] | None:
    pod = kube.get(pods_path(ns, "app"))
    conds = pod["status"].get("conditions") or []
    return next((c for c in conds if c["type"] == "StateWiped"), None)


def test_dry_run_then_wipe(cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path) -> None:
    ns, node, state, cfg = setup(cluster, kube, tmp_path)

    dry = wipe(node, cfg, admin_kubeconfig, "--pod", f"{ns}/app", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would wipe: ") and str(state) in dry.stdout
    assert (state / "cache").exists()
    assert state_wiped(kube, ns) is None

    res = wipe(node, cfg, admin_kubeconfig, "--pod", f"{ns}/app")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Wiped: ")
    assert not state.exists()
    cond = state_wiped(kube, ns)
    assert cond and cond["status"] == "True" and cond["reason"] == "Wiped"


def test_pod_on_another_node_is_refused(
    cluster: Any, kube: Kube, admin_kubeconfig: str, tmp_path: Path
) -> None:
    ns, node, state, cfg = setup(cluster, kube, tmp_path)
    res = wipe(f"{node}-elsewhere", cfg, admin_kubeconfig, "--pod", f"{ns}/app")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "its node-local state is not here" in res.stderr
    assert (state / "cache").exists()


def test_bad_pod_reference_and_missing_pod(admin_kubeconfig: str, tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("")
    bad = wipe("n", cfg, admin_kubeconfig, "--pod", "just-a-name")
    assert bad.returncode == 2
    assert bad.stderr == "nodeagent: error: --pod: expected NAMESPACE/NAME, got 'just-a-name'\n"
    missing = wipe("n", cfg, admin_kubeconfig, "--pod", "default/no-such-pod")
    assert missing.returncode == 1
    assert missing.stderr == 'nodeagent: error: pod "default/no-such-pod" not found\n'
