"""The matrix's two suites, run by pytest in a child process per (API server, kubelet) pair.

The versions reach the harness through the environment it already reads (hack/k8sversion.py),
so each row runs exactly what `hack/test` runs, only against other binaries. Counts and
outcomes come from pytest's own JUnit report; the seconds are pytest's whole run (collection,
the session's control plane, every test), not the time spent waiting for the lock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hack import machinelock
from hack.k8sversion import API_ENV, KUBELET_ENV

REPO = Path(__file__).resolve().parents[2]
# A real-node suite holds the lock from its first boot to its last node's removal; another
# engineer's benchmark may hold it for as long before.
LOCK_WAIT = 3600
SUITE_TIMEOUT = 5400.0
TEARDOWN_GRACE = 300.0
BUILD_TIMEOUT = 3600.0

# The real nodes (tests/test_realnode.py; marker nspawn). "core" is its departure scenarios:
# the kubelet's and containerd's behaviour the agent rests on, on both cgroup drivers.
REALNODE_ALL = ("tests/test_realnode.py",)
REALNODE_CORE = tuple(
    f"tests/test_realnode.py::{name}"
    for name in (
        "test_two_real_nodes_at_once_run_pods_and_leave_nothing_behind",
        "test_systemd_cgroup_driver_puts_pods_in_slices_and_a_poweroff_still_drains",
        "test_poweroff_evicts_real_pods_under_their_pdb_before_the_kubelet_stops",
        "test_sigterm_ignoring_pods_get_their_grace_and_the_deadline_holds",
        "test_real_admission_rejection_is_reported_and_its_pod_dir_wiped",
        "test_graceful_shutdown_on_races_the_drain",
        "test_beside_the_kubelets_graceful_shutdown_its_pods_are_taken_out_at_once",
    )
)
# What keeps a node's identity to its own node: the Node authorizer, NodeRestriction and the
# chart's admission policy refusing another node's Node, its pods and their evictions.
REFUSALS = (
    "tests/test_kubelet_identity.py",
    "tests/test_daemonset_identity.py",
    "tests/test_harness.py::test_kubelet_identity_is_confined_to_its_node",
    "tests/test_harness.py::test_minted_identity_is_forbidden",
    "tests/test_watch_faults.py::test_an_agent_identity_may_change_only_its_own_node",
    "tests/test_drain.py::test_restricted_identity_gets_a_one_line_403",
)


class SuiteError(RuntimeError):
    """A suite could not be run at all (a build failed, pytest wrote no report)."""


@dataclass(frozen=True)
class Pair:
    api: str
    kubelet: str

    def env(self) -> dict[str, str]:
        return {**os.environ, API_ENV: self.api, KUBELET_ENV: self.kubelet}

    @property
    def label(self) -> str:
        return f"{self.api}/{self.kubelet}"


@dataclass
class Outcome:
    """One suite's result: pytest's counts and session time, and what failed with its reason."""

    tests: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def cell(self) -> str:
        if self.error:
            return f"not run: {self.error}"
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return f"{self.passed} passed, {self.failed} failed{skipped}, {self.seconds:.0f} s"


def build(pair: Pair) -> None:
    """Every binary and image of the pair, before any lock is taken (cached after the first)."""
    env = pair.env()
    for cmd in (
        ["hack/build-control-plane.sh"],
        ["hack/build-kube-proxy.sh"],
        [sys.executable, "hack/real-node", "build"],
    ):
        try:
            done = subprocess.run(
                cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, timeout=BUILD_TIMEOUT
            )
        except subprocess.TimeoutExpired as exc:
            raise SuiteError(f"{cmd[-1]} took over {BUILD_TIMEOUT:.0f} s") from exc
        if done.returncode != 0:
            raise SuiteError(f"{' '.join(cmd)} failed with exit code {done.returncode}")


def run(pair: Pair, tests: tuple[str, ...], lock: Path | None) -> Outcome:
    """pytest on `tests` against the pair, holding `lock` when one is named."""
    with tempfile.TemporaryDirectory(prefix="nodeagent-matrix.") as tmp, held(lock):
        report = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        cmd += [f"--junitxml={report}", "-o", "junit_family=xunit2", *tests]
        started = time.monotonic()
        if not finished(subprocess.Popen(cmd, cwd=REPO, env=pair.env())):
            return Outcome(error=f"over {SUITE_TIMEOUT:.0f} s")
        seconds = time.monotonic() - started
        if not report.exists():
            return Outcome(error="pytest wrote no report")
        out = parse(report)
        out.seconds = seconds
        return out


def finished(proc: subprocess.Popen[bytes]) -> bool:
    """Whether pytest ended within SUITE_TIMEOUT. Past it, SIGINT first: pytest then tears
    its fixtures down, and with them the real nodes, their network and cgroups."""
    try:
        proc.wait(SUITE_TIMEOUT)
        return True
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(TEARDOWN_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return False


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """The machine-wide lock of runs that must not share the CPUs, if one is named."""
    with machinelock.held(lock, LOCK_WAIT, SuiteError):
        yield


def parse(report: Path) -> Outcome:
    root = ET.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise SuiteError(f"{report}: no testsuite element")
    out = Outcome()
    for case in suite.iter("testcase"):
        out.tests += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}".rsplit(".", 1)[-1]
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            out.failed += 1
            out.failures[name] = first_line(bad.get("message") or bad.text or "")
        elif case.find("skipped") is not None:
            out.skipped += 1
        else:
            out.passed += 1
    return out


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
