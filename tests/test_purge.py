"""The package's purge (packaging/debian/postrm) and the node claim it must not break.

The script runs as dpkg runs it, with its state directory pointed at a temporary one: it
removes the agent's state, and the claim file only when no agent holds it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

from nodeagent.host.nodeclaim import AgentClaim, names_file

POSTRM = Path(__file__).resolve().parent.parent / "packaging" / "debian" / "postrm"


def purge(state: Path, tmp_path: Path) -> None:
    script = tmp_path / "postrm"
    script.write_text(
        POSTRM.read_text().replace("/var/lib/nodeagent", str(state)).replace("#DEBHELPER#", "")
    )
    subprocess.run(["sh", "-e", str(script), "purge"], check=True, timeout=30)


def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "nodeagent"
    (state / "recreate").mkdir(parents=True)
    (state / "recreate" / "ns_pod.json").write_text("{}")
    (state / "boot-id").write_text("x\n")
    (state / "agent.lock").write_text("")
    return state


def test_purge_removes_the_state_when_no_agent_holds_the_claim(tmp_path: Path) -> None:
    state = state_dir(tmp_path)
    purge(state, tmp_path)
    assert not state.exists()


def test_purge_leaves_a_held_claim(tmp_path: Path) -> None:
    """A DaemonSet agent on the node holds the claim: its file stays, the rest goes."""
    state = state_dir(tmp_path)
    claim = AgentClaim(str(state / "agent.lock"), "pod")
    assert claim.try_acquire() is None
    try:
        purge(state, tmp_path)
        assert sorted(p.name for p in state.iterdir()) == ["agent.lock"]
        fd = os.open(claim.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            assert names_file(claim.path, fd)  # the very file the agent holds
        finally:
            os.close(fd)
    finally:
        claim.release()


def test_a_claim_on_an_unlinked_file_is_not_taken(tmp_path: Path) -> None:
    """An agent that opened the file before a purge unlinked it must not hold that file:
    the next agent would claim the new one beside it."""
    path = tmp_path / "agent.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert names_file(path, fd)
        path.unlink()
        assert not names_file(path, fd)
        path.write_text("")
        assert not names_file(path, fd)
    finally:
        os.close(fd)
    claim = AgentClaim(str(path), "host")
    assert claim.try_acquire() is None and claim.held
    claim.release()
