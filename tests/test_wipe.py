"""The wipe of a rejected pod's node-local state, with real files and real processes.

Nothing is mocked: holders are real child processes, hooks real commands, escapes real
symlinks in tmp_path. The tests marked as needing root mount a tmpfs, an unresponsive
FUSE file system or a private mount namespace, or drop capabilities with setpriv.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from hack import kubeutil as ku
from nodeagent.config import RejectionConfig
from nodeagent.rejection.wipe import (
    FAILED,
    TIMED_OUT,
    WIPED,
    PodRef,
    _Refused,
    _remove,
    _Wipe,
    plan,
    wipe,
)

REPO = Path(__file__).resolve().parent.parent
POD = PodRef(namespace="team-a", name="web-0", uid="0b6c2f1e-2d4a-4c1e-9d7e-3f5a8b9c1d2e")
OTHER_UID = "7d0e5a4b-1c2f-4e3d-8a9b-6c5d4e3f2a1b"

# The suite runs as root (it boots systemd in containers too); as another user these
# fail rather than skip, so a run that could not prove them does not look green.
needs_root = pytest.mark.usefixtures("as_root")


@pytest.fixture
def as_root() -> None:
    assert os.geteuid() == 0, "needs root (mounts, other users' processes)"


HOLD = {
    "open": "held = open(os.path.join(state, 'data'), 'a')",
    "cwd": "os.chdir(state)",
    "mmap": "fh = open(os.path.join(state, 'data'), 'r+b')\n"
    "held = mmap.mmap(fh.fileno(), 0)\n"
    "fh.close()",
}
CHILD = """
import mmap, os, signal, sys, time
state = sys.argv[1]
{hold}
{extra}
print("ready", flush=True)
time.sleep(120)
"""
IGNORE_TERM = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
BECOME_NOBODY = "os.setgid(65534)\nos.setuid(65534)"

Spawn = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


@pytest.fixture
def state(root: Path) -> Path:
    """The pod's state directory, with a file, a subdirectory and a socket-like fifo."""
    path = root / "pods" / POD.uid
    (path / "cache").mkdir(parents=True)
    (path / "data").write_bytes(b"x" * 4096)
    (path / "cache" / "blob").write_text("blob")
    os.mkfifo(path / "cache" / "fifo")
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Somewhere outside the state root that must never be touched."""
    path = tmp_path / "outside" / POD.uid
    path.mkdir(parents=True)
    (path / "precious").write_text("keep me")
    return path


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start a process holding something under a directory; killed at the end."""
    procs: list[subprocess.Popen[str]] = []

    def start(
        where: Path, hold: str = "open", extra: str = "", prefix: tuple[str, ...] = ()
    ) -> subprocess.Popen[str]:
        code = CHILD.format(hold=HOLD[hold], extra=extra)
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-c", code, str(where)],
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


def config(
    root: Path,
    paths: list[str] | None = None,
    hooks: list[str] | None = None,
    timeout: float = 5.0,
) -> RejectionConfig:
    return RejectionConfig(
        state_roots=[str(root)],
        state_paths=[f"{root}/pods/{{uid}}"] if paths is None else paths,
        hooks=hooks or [],
        wipe_timeout=timeout,
    )


def live_in_group(pgid: int) -> list[int]:
    """Processes of a process group that are still running (zombies are not)."""
    live = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                live.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return live


def test_pod_ref_of_a_pod_object() -> None:
    pod = {"metadata": {"namespace": "team-a", "name": "web-0", "uid": POD.uid}}
    assert PodRef.of(pod) == POD
    assert str(POD) == "team-a/web-0"
    with pytest.raises(ValueError, match="uid"):
        PodRef.of({"metadata": {"namespace": "team-a", "name": "web-0"}})


def test_templates_expand_and_paths_are_removed(root: Path, state: Path) -> None:
    by_name = root / POD.namespace / POD.name
    by_name.mkdir(parents=True)
    (by_name / "socket-dir").mkdir()
    single_file = root / "locks" / f"{POD.uid}.lock"
    single_file.parent.mkdir()
    single_file.write_text("")
    paths = [f"{root}/pods/{{uid}}", f"{root}/{{namespace}}/{{name}}", f"{root}/locks/{{uid}}.lock"]

    result = wipe(POD, config(root, paths))

    assert result.reason == WIPED, result.message
    assert result.ok
    assert result.removed == [str(state), str(by_name), str(single_file)]
    assert not state.exists() and not by_name.exists() and not single_file.exists()
    assert root.is_dir() and (root / "pods").is_dir() and (root / POD.namespace).is_dir()
    assert result.refused == [] and result.stopped == []
    assert str(state) in result.message


@pytest.mark.parametrize("hold", ["open", "cwd", "mmap"])
def test_holder_is_stopped_then_the_dir_removed(
    root: Path, state: Path, spawn: Spawn, hold: str
) -> None:
    holder = spawn(state, hold)

    result = wipe(POD, config(root))

    assert result.reason == WIPED, result.message
    assert result.stopped == [holder.pid]
    assert holder.wait(timeout=5) == -signal.SIGTERM
    assert not state.exists()
    assert f"stopped pid {holder.pid}" in result.message


def test_holder_ignoring_sigterm_gets_sigkill(root: Path, state: Path, spawn: Spawn) -> None:
    holder = spawn(state, extra=IGNORE_TERM)

    started = time.monotonic()
    result = wipe(POD, config(root, timeout=2.0))
    elapsed = time.monotonic() - started

    assert result.reason == WIPED, result.message
    assert result.stopped == [holder.pid]
    assert holder.wait(timeout=5) == -signal.SIGKILL
    assert not state.exists()
    assert elapsed < 2.0 + 1.0


def test_agent_never_stops_itself(root: Path, state: Path) -> None:
    with (state / "data").open("a"):
        result = wipe(POD, config(root))
    # Still running: this assertion would not be reached otherwise.
    assert result.reason == WIPED, result.message
    assert result.stopped == []
    assert not state.exists()


@needs_root
def test_holder_in_another_mount_namespace_is_found_by_inode(
    tmp_path: Path, root: Path, state: Path, spawn: Spawn
) -> None:
    assert shutil.which("unshare"), "util-linux's unshare is missing"
    view = tmp_path / "view"
    view.mkdir()
    # The holder sees the state directory at `view`, bind-mounted in its own namespace.
    bind = ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c")
    script = f'mount --bind "$0" {view} && exec "$@"'
    holder = spawn(view, prefix=(*bind, script, str(state)))
    fds = [
        os.readlink(f"/proc/{holder.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{holder.pid}/fd")
    ]
    assert str(view / "data") in fds and not any(fd.startswith(str(state)) for fd in fds)

    result = wipe(POD, config(root))

    assert result.reason == WIPED, result.message
    assert result.stopped == [holder.pid]
    assert holder.wait(timeout=5) == -signal.SIGTERM
    assert not state.exists()


@needs_root
def test_holder_the_agent_may_not_inspect_is_counted_and_left_alone(
    root: Path, state: Path, spawn: Spawn
) -> None:
    """The hardened unit's capabilities: no CAP_SYS_PTRACE, so another uid's fds are unreadable."""
    assert shutil.which("setpriv"), "util-linux's setpriv is missing"
    holder = spawn(state, extra=BECOME_NOBODY)
    code = (
        "import dataclasses, json, sys\n"
        "from nodeagent.config import RejectionConfig\n"
        "from nodeagent.rejection.wipe import PodRef, wipe\n"
        "cfg = RejectionConfig(state_roots=[sys.argv[1]], state_paths=[sys.argv[2]])\n"
        "print(json.dumps(dataclasses.asdict(wipe(PodRef(*sys.argv[3:]), cfg))))\n"
    )
    caps = ("--inh-caps=-all", "--bounding-set=-all,+kill,+dac_override,+fowner")
    template = f"{root}/pods/{{uid}}"
    wiper = [sys.executable, "-c", code, str(root), template, *dataclasses.astuple(POD)]
    run = subprocess.run(
        ["setpriv", *caps, "--", *wiper],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
        check=True,
    )
    result = json.loads(run.stdout)

    assert result["reason"] == WIPED, result["message"]
    assert "not inspectable (access denied)" in result["message"]
    assert holder.pid not in result["stopped"]
    assert holder.poll() is None
    # Its open file does not keep the directory from being removed.
    assert not state.exists()


def test_dotdot_escape_is_refused_and_the_rest_still_wiped(
    root: Path, state: Path, outside: Path
) -> None:
    escape = f"{root}/../outside/{{uid}}"

    result = wipe(POD, config(root, [escape, f"{root}/pods/{{uid}}"]))

    expanded = escape.replace("{uid}", POD.uid)
    assert result.reason == FAILED
    assert result.refused == [expanded]
    assert f"refused {expanded}" in result.message
    assert (outside / "precious").read_text() == "keep me"
    assert result.removed == [str(state)] and not state.exists()


@pytest.mark.parametrize("where", ["intermediate", "final"])
def test_symlink_escape_is_refused(root: Path, outside: Path, where: str) -> None:
    (root / "pods").mkdir()
    if where == "intermediate":
        (root / "link").symlink_to(outside.parent)
        template = f"{root}/link/{{uid}}"
    else:
        (root / "pods" / POD.uid).symlink_to(outside)
        template = f"{root}/pods/{{uid}}"

    result = wipe(POD, config(root, [template]))

    assert result.reason == FAILED
    assert result.refused == [template.replace("{uid}", POD.uid)]
    assert "resolves outside the state roots" in result.message
    assert (outside / "precious").read_text() == "keep me"
    assert result.removed == []
    if where == "final":
        assert (root / "pods" / POD.uid).is_symlink()


def test_symlink_to_another_pods_state_inside_the_root_is_refused(root: Path) -> None:
    other = root / "pods" / OTHER_UID
    other.mkdir(parents=True)
    (other / "data").write_text("theirs")
    (root / "pods" / POD.uid).symlink_to(other)

    result = wipe(POD, config(root))

    assert result.reason == FAILED
    assert result.refused == [str(root / "pods" / POD.uid)]
    assert "is a symlink" in result.message
    assert (other / "data").read_text() == "theirs"


def test_plan_refuses_any_symlink_below_the_root(root: Path) -> None:
    other = root / "pods" / OTHER_UID
    (other / "data").mkdir(parents=True)
    (root / "pods" / POD.uid).symlink_to(other)
    (root / "alias").symlink_to(root / "pods")
    cfg = config(
        root, [f"{root}/pods/{{uid}}/data", f"{root}/alias/{{uid}}", f"{root}/pods/{{uid}}"]
    )

    todo = plan(POD, cfg)

    assert todo.targets == []
    assert len(todo.refused) == 3
    assert all("is a symlink" in why for why in todo.problems)


def test_directory_swapped_for_a_symlink_after_planning_is_refused_at_removal(
    root: Path, state: Path, outside: Path
) -> None:
    (target,) = plan(POD, config(root)).targets
    parked = root / "parked"
    state.rename(parked)
    state.symlink_to(outside)

    with pytest.raises(_Refused, match="is a symlink"):
        _remove(target, dry_run=False)
    (deeper,) = plan(POD, config(root, [f"{root}/parked/cache"])).targets
    parked.rename(root / "parked.old")
    (root / "parked").symlink_to(outside)
    with pytest.raises(_Refused, match="became a symlink"):
        _remove(deeper, dry_run=False)
    assert (outside / "precious").read_text() == "keep me"


@pytest.mark.parametrize(
    "pod",
    [
        PodRef("..", "outside", POD.uid),
        PodRef("team-a", "../../outside", POD.uid),
        PodRef("team-a/../..", "outside", POD.uid),
        PodRef("team-a", "web-0", "/etc"),
    ],
    ids=["namespace-dotdot", "name-dotdot", "namespace-slash", "absolute-uid"],
)
def test_unsafe_pod_fields_are_refused(
    tmp_path: Path, root: Path, outside: Path, pod: PodRef
) -> None:
    marker = tmp_path / "hook-ran"
    hook = f"sh -c 'touch \"$0\"' {marker} {{namespace}}{{name}}{{uid}}"
    template = f"{root}/{{namespace}}/{{name}}/{{uid}}"

    result = wipe(pod, config(root, [template], [hook]))

    assert result.reason == FAILED
    assert result.refused == [template]
    assert "is not a plain name" in result.message
    assert (outside / "precious").read_text() == "keep me"
    assert result.hooks == [] and not marker.exists()


def test_a_root_is_never_removed(root: Path, state: Path) -> None:
    result = wipe(POD, config(root, [str(root), f"{root}/"]))

    assert result.reason == FAILED
    assert result.refused == [str(root), f"{root}/"]
    assert "is a state root" in result.message
    assert state.is_dir()


def test_bad_templates_and_roots_are_refused(tmp_path: Path, root: Path, state: Path) -> None:
    cfg = config(
        root,
        [f"{root}/pods/{{pod}}", f"{root}/pods/{{uid", "pods/{uid}", f"{tmp_path}/elsewhere"],
        ["echo {uid.__class__}", "echo 'unbalanced"],
    )
    cfg.state_roots.append("/")

    todo = plan(POD, cfg)
    result = wipe(POD, cfg)

    assert todo.targets == [] and todo.hooks == []
    assert len(todo.refused) == 4
    assert result.reason == FAILED
    for why in (
        "unknown placeholder {pod}",
        "unbalanced brace",
        "not an absolute path",
        "not beneath a state root",
        "unknown placeholder {uid.__class__}",
        "No closing quotation",
        "state root '/' ignored",
    ):
        assert why in result.message
    assert state.is_dir()


def test_hook_gets_the_templates_after_the_stop_and_before_the_removal(
    tmp_path: Path, root: Path, state: Path, spawn: Spawn
) -> None:
    holder = spawn(state)
    out = tmp_path / "hook.out"
    script = tmp_path / "hook.py"
    script.write_text(
        "import os, sys\n"
        "uid, ns, name, state, pid, out = sys.argv[1:]\n"
        "try:\n"
        "    status = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]\n"
        "except FileNotFoundError:\n"
        "    status = 'gone'\n"
        "open(out, 'w').write(f'{uid} {ns} {name} {os.path.isdir(state)} {status}')\n"
    )
    hook = f"{sys.executable} {script} {{uid}} {{namespace}} {{name}} {state} {holder.pid} {out}"

    result = wipe(POD, config(root, hooks=[hook]))

    assert result.reason == WIPED, result.message
    assert len(result.hooks) == 1 and result.hooks[0].endswith(str(out))
    uid, ns, name, existed, status = out.read_text().split()
    assert (uid, ns, name) == (POD.uid, POD.namespace, POD.name)
    assert existed == "True"  # hooks run before the removal ...
    assert status in ("Z", "gone")  # ... and after the holder was stopped
    assert not state.exists()


def test_failing_hook_is_reported_and_the_paths_still_removed(root: Path, state: Path) -> None:
    hook = "sh -c 'echo warming up >&2; echo \"volume busy\" >&2; echo >&2; exit 3'"

    result = wipe(POD, config(root, hooks=[hook]))

    assert result.reason == FAILED
    assert "exited 3: volume busy" in result.message
    assert result.hooks == [
        "sh -c 'echo warming up >&2; echo \"volume busy\" >&2; echo >&2; exit 3'"
    ]
    assert not state.exists()


def test_hook_that_cannot_start_is_reported(root: Path, state: Path) -> None:
    result = wipe(POD, config(root, hooks=["/nonexistent/hook {uid}"]))

    assert result.reason == FAILED
    assert f"hook '/nonexistent/hook {POD.uid}' could not start" in result.message


def test_hook_sleeping_forever_times_out_and_its_group_is_killed(
    tmp_path: Path, root: Path, state: Path
) -> None:
    pidfile = tmp_path / "hook.pid"
    # The hook leaves a child in its process group: both must die.
    hook = f"sh -c 'echo $$ > {pidfile}; sleep 600 & sleep 600'"
    # Long enough for the shell to start and write its pid on a loaded machine: the
    # group can only be checked once it is known.
    timeout = 3.0

    started = time.monotonic()
    result = wipe(POD, config(root, hooks=[hook], timeout=timeout))
    elapsed = time.monotonic() - started

    assert pidfile.exists(), f"the hook did not start within {timeout}s: {result.message}"
    pgid = int(pidfile.read_text())
    try:
        assert result.reason == TIMED_OUT, result.message
        # The outcome: the wipe did not wait for the 600 s hook. (Its bound,
        # wipe_timeout + JOIN_GRACE, is a timing goal; a loaded machine adds to it.)
        assert elapsed < timeout + 30, elapsed
        assert "killed its process group" in result.message
        # SIGKILLed processes end when next scheduled: give them that, not forever.
        ku.wait_until(lambda: live_in_group(pgid) == [], 10, f"process group {pgid} gone")
        assert state.is_dir()  # the time was up before the removal
    finally:
        if live_in_group(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_giving_up_on_a_hook_kills_its_group_and_says_so(root: Path) -> None:
    """The caller gives up on a worker still waiting on a hook (a loaded machine can
    delay the worker past the deadline): the hook's group is killed, and the result
    says that rather than "still blocked"."""
    hook = subprocess.Popen(["sleep", "600"], process_group=0)
    job = _Wipe(POD, config(root, hooks=["sleep 600"]), dry_run=False, deadline=0.0)
    job.hook_command, job.hook_group = "sleep 600", hook.pid
    try:
        job.abandon()
        assert hook.wait(timeout=10) == -signal.SIGKILL
    finally:
        if hook.poll() is None:
            hook.kill()
    result = job.result(1.0)
    assert result.reason == TIMED_OUT
    assert result.message.startswith(
        "hook 'sleep 600' still running at the 5s wipe timeout: killed its process group"
    ), result.message


@needs_root
def test_hung_file_system_times_out_within_the_bound(root: Path) -> None:
    """A FUSE mount whose server never answers hangs every lookup, like a dead NFS server."""
    # A missing /dev/fuse fails here rather than skipping: the bound must be proven.
    assert os.path.exists("/dev/fuse") and shutil.which("mount"), "needs /dev/fuse and mount"
    pods = root / "pods"
    pods.mkdir()
    fuse = os.open("/dev/fuse", os.O_RDWR)
    options = f"fd={fuse},rootmode=40000,user_id=0,group_id=0"
    subprocess.run(
        ["mount", "-t", "fuse", "-o", options, "hung", str(pods)], pass_fds=(fuse,), check=True
    )
    try:
        started = time.monotonic()
        result = wipe(POD, config(root, timeout=1.0))
        elapsed = time.monotonic() - started
    finally:
        os.close(fuse)  # the blocked lookups fail with ENOTCONN
        subprocess.run(["umount", "-l", str(pods)], check=True)

    assert result.reason == TIMED_OUT, result.message
    assert elapsed < 1.0 + 1.5
    assert "still blocked" in result.message


@needs_root
def test_directory_with_a_mount_point_is_not_removed(root: Path, state: Path) -> None:
    volume = state / "volumes" / "nfs"
    volume.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "volume", str(volume)], check=True)
    try:
        (volume / "remote-data").write_text("on the volume")

        result = wipe(POD, config(root))

        assert result.reason == FAILED
        assert f"{volume} is a mount point" in result.message
        assert result.refused == [str(state)]
        assert (volume / "remote-data").read_text() == "on the volume"
    finally:
        subprocess.run(["umount", str(volume)], check=True)


def test_dry_run_changes_nothing(tmp_path: Path, root: Path, state: Path, spawn: Spawn) -> None:
    holder = spawn(state)
    marker = tmp_path / "hook-ran"
    hook = f"touch {marker}"

    result = wipe(POD, config(root, hooks=[hook]), dry_run=True)

    assert result.reason == WIPED, result.message
    assert result.removed == [str(state)]
    assert result.stopped == [holder.pid]
    assert result.hooks == [hook]
    assert result.message.startswith("dry run: would stop")
    assert holder.poll() is None
    assert (state / "data").exists() and (state / "cache" / "blob").exists()
    assert not marker.exists()


def test_missing_path_is_wiped(root: Path) -> None:
    result = wipe(POD, config(root, [f"{root}/pods/{{uid}}", f"{root}/nowhere/{{name}}/x"]))

    assert result.reason == WIPED, result.message
    assert result.removed == []
    assert result.message == "nothing to remove"


def test_nothing_configured_is_wiped() -> None:
    result = wipe(POD, RejectionConfig())

    assert result.reason == WIPED
    assert "no state paths or hooks configured" in result.message
    assert result.seconds < 1.0
