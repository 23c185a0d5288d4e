"""Wipe a rejected pod's node-local state, bounded in time.

When the kubelet rejects a pod at admission, what the pod left on the node (caches,
sockets, scratch data under a hostPath) has to go before it can start cleanly again.
:func:`wipe` does that in three steps, all inside one deadline
(``rejection.wipe_timeout``):

1. stop the processes that hold files under the pod's paths: SIGTERM, a bounded
   wait, then SIGKILL;
2. run the configured hooks, one after the other, each in its own process group;
3. remove the paths.

It never raises for a failed wipe and never blocks past the deadline plus
:data:`JOIN_GRACE`. The steps run in a daemon thread that is given up on when the
time is out, because a removal stuck on a dead NFS server cannot be interrupted; an
abandoned thread starts no new step, only the one call already stuck in the kernel
may still complete. A hook still running at the deadline is killed with its whole
process group. A failing hook does not stop the wipe: the paths are still removed.

Path safety
-----------
The wipe runs as root, and a pod controls what it writes under its own paths, so
nothing it could plant may redirect the wipe:

* ``{uid}``, ``{namespace}`` and ``{name}`` must be plain names (letters, digits,
  ``.``, ``_`` and ``-``, starting and ending with a letter or digit, no ``..``), as
  the API server guarantees. A value with a ``/`` or ``..``, or an absolute one,
  refuses every path and hook whose template uses it. No other placeholders exist.
* A state root must be an absolute path other than ``/`` without ``.`` or ``..``
  components. It is resolved once: symlinks at or above a root are the
  administrator's and are followed. A root itself is never removed.
* An expanded path must be absolute, have no ``.`` or ``..`` component and lie
  beneath a root, compared component by component with the root as written or as
  resolved.
* Below the root no component may be a symlink, the last one included, whatever it
  points to: outside the roots it is an escape; inside, it may lead to another
  pod's state. A double check: the resolved path (``os.path.realpath``) must still
  lie beneath the resolved root (``Path.is_relative_to``).
* Removal repeats the check without a race: it walks down from the root with
  ``O_NOFOLLOW``, one directory at a time, and removes the last component relative
  to its parent's descriptor (``shutil.rmtree(dir_fd=...)``, which never follows a
  symlink inside the tree either). A directory swapped for a symlink after planning
  makes the removal fail instead of redirecting it.
* A directory with a mount point at or beneath it is not removed: ``rmtree`` would
  delete the mounted volume's contents, and the agent may not unmount.

A refused path is named in the message and makes the result ``WipeFailed``; the
other paths are still wiped. A missing path is not an error: there is nothing to wipe.

Finding the processes
---------------------
A holder is a process whose working directory, root, executable, an open
descriptor or a memory mapping is at or beneath one of the paths. It is matched by
the path the kernel reports and by (device, inode) against what lies beneath the
path, so a containerised process that sees the file under another path in its own
mount namespace is found too. Open files are read from ``/proc/PID/fd`` directly,
not with ``psutil.Process.open_files()``, which leaves out directories. The agent
itself, its ancestors and pid 1 are never stopped.

Limitation: reading another process's ``/proc/PID/{fd,cwd,root,exe,maps}`` needs
ptrace read access, that is the same uid and a superset of its capabilities, or
``CAP_SYS_PTRACE``. Without that capability (as in the hardened systemd unit)
processes of other users, and root processes with capabilities the agent lacks
(container root), cannot be inspected: they are counted in the message and left
running, and their files are removed anyway (an open file does not prevent an
unlink; the process keeps the orphaned inode until it exits). ``ProtectProc=invisible``
hides nothing from a process in group root (hidepid exempts gid 0 by default);
``ProtectProc=ptraceable`` would hide those processes entirely, so they would not even
be counted. Processes are not looked up through the pod's cgroup. In the DaemonSet
form the agent sees only its own pod's processes unless the pod has ``hostPID``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from nodeagent.config import RejectionConfig

if TYPE_CHECKING:
    import subprocess

log = logging.getLogger(__name__)

WIPED = "Wiped"
TIMED_OUT = "WipeTimedOut"
FAILED = "WipeFailed"

#: Longest wait between SIGTERM and SIGKILL; at most half the time left is used.
TERM_GRACE = 5.0
#: How long SIGKILLed processes get to disappear.
KILL_WAIT = 1.0
#: Past the deadline, how long the caller waits for the worker to kill a hook and report.
JOIN_GRACE = 0.5
_POLL = 0.05

FIELDS = ("uid", "namespace", "name")
_PLAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class PodRef:
    """The pod whose state is wiped: what the templates are filled with."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, pod: dict[str, Any]) -> PodRef:
        """The reference of a Pod JSON object.

        Raises ValueError when ``metadata`` lacks the namespace, name or uid.
        """
        meta = pod.get("metadata") or {}
        try:
            return cls(str(meta["namespace"]), str(meta["name"]), str(meta["uid"]))
        except KeyError as exc:
            raise ValueError(f"pod metadata has no {exc.args[0]}") from None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Target:
    """One path a wipe may remove."""

    path: str  # expanded, as configured: what messages name
    root: str  # the resolved state root it lies beneath
    parts: tuple[str, ...]  # its components below that root

    @property
    def real(self) -> str:
        """The path as the kernel sees it: no symlink below the resolved root."""
        return os.path.join(self.root, *self.parts)


@dataclass
class WipePlan:
    """What a wipe would touch, after every unsafe path and hook was refused."""

    pod: PodRef
    targets: list[Target] = field(default_factory=list)
    hooks: list[list[str]] = field(default_factory=list)  # argv, templates expanded
    refused: list[str] = field(default_factory=list)  # the refused paths (or templates)
    problems: list[str] = field(default_factory=list)  # one line each: what and why

    def refuse(self, what: str, why: str) -> None:
        self.refused.append(what)
        self.problems.append(f"refused {what}: {why}")


@dataclass
class WipeResult:
    """The outcome of one wipe; ``reason`` is the StateWiped condition's reason."""

    reason: str  # "Wiped" | "WipeTimedOut" | "WipeFailed"
    message: str  # one line: what was done, what failed, what was refused
    removed: list[str]  # paths removed (dry run: that would be)
    stopped: list[int]  # pids stopped (dry run: that would be)
    refused: list[str]  # paths left alone for safety (see the module docstring)
    hooks: list[str]  # hook commands run (dry run: that would run)
    seconds: float

    @property
    def ok(self) -> bool:
        return self.reason == WIPED


class _Refused(Exception):
    """A path or hook the rules forbid touching; the text says why."""


class _Deadline(Exception):
    """The time is up, or the caller gave up: start nothing new."""


@dataclass(frozen=True)
class _Root:
    written: tuple[str, ...]  # components as configured
    real: str  # resolved


def plan(pod: PodRef, cfg: RejectionConfig) -> WipePlan:
    """What a wipe of ``pod`` would touch, with every unsafe path refused.

    Expands the templates, resolves the roots and checks each path against the rules
    in the module docstring. Reads the file system (lstat, realpath), changes nothing.
    """
    out = WipePlan(pod)
    roots = _roots(cfg.state_roots, out.problems)
    for template in cfg.state_paths:
        path = template
        try:
            path = _expand(template, pod)
            out.targets.append(_target(path, roots))
        except _Refused as exc:
            out.refuse(path, str(exc))
    for template in cfg.hooks:
        try:
            out.hooks.append(_hook_argv(template, pod))
        except _Refused as exc:
            out.problems.append(f"refused hook {template!r}: {exc}")
    return out


def _roots(configured: list[str], problems: list[str]) -> list[_Root]:
    roots = []
    for root in configured:
        parts = tuple(p for p in root.split("/") if p)
        real = os.path.realpath(root)
        if not root.startswith("/") or {".", ".."} & set(parts) or real == "/":
            problems.append(
                f"state root {root!r} ignored: must be absolute, not /, without . or .."
            )
            continue
        roots.append(_Root(parts, real))
    return roots


def _plain(value: str) -> bool:
    return _PLAIN.fullmatch(value) is not None and ".." not in value


def _expand(template: str, pod: PodRef) -> str:
    """Fill in the placeholders; only plain names go in (no str.format: no attribute access)."""

    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in FIELDS:
            raise _Refused(f"unknown placeholder {{{key}}} (use {{uid}}, {{namespace}}, {{name}})")
        text = str(getattr(pod, key))
        if not _plain(text):
            raise _Refused(f"{key} {text!r} is not a plain name")
        return text

    if re.search(r"[{}]", _PLACEHOLDER.sub("", template)):
        raise _Refused("unbalanced brace")
    return _PLACEHOLDER.sub(value, template)


def _hook_argv(template: str, pod: PodRef) -> list[str]:
    # Split before expanding, so a value can never become an extra argument.
    try:
        argv = [_expand(word, pod) for word in shlex.split(template)]
    except ValueError as exc:  # unbalanced quotes
        raise _Refused(str(exc)) from None
    if not argv:
        raise _Refused("empty command")
    return argv


def _target(path: str, roots: list[_Root]) -> Target:
    if not path.startswith("/"):
        raise _Refused("not an absolute path")
    parts = tuple(p for p in path.split("/") if p)
    if {".", ".."} & set(parts):
        raise _Refused("has a . or .. component")
    root = _root_of(parts, roots)
    if root is None:
        raise _Refused("not beneath a state root")
    target = Target(path, root.real, parts[len(root.written) :])
    real = os.path.realpath(target.real)
    if not target.parts or real in {r.real for r in roots}:
        raise _Refused("is a state root (a root is never removed)")
    if not Path(real).is_relative_to(root.real):
        raise _Refused(f"resolves outside the state roots (to {real})")
    link = _first_symlink(target)
    if link:
        raise _Refused(f"{link} is a symlink (never followed below a state root)")
    return target


def _root_of(parts: tuple[str, ...], roots: list[_Root]) -> _Root | None:
    """The deepest root ``parts`` lies beneath, as written or as resolved."""
    best: _Root | None = None
    for root in roots:
        for prefix in (root.written, tuple(p for p in root.real.split("/") if p)):
            if parts[: len(prefix)] == prefix and (best is None or len(prefix) > len(best.written)):
                best = _Root(prefix, root.real)
    return best


def _first_symlink(target: Target) -> str | None:
    current = target.root
    for part in target.parts:
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None  # nothing there, so nothing beneath to be led astray by
        except OSError as exc:
            raise _Refused(f"cannot check {current}: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            return current
    return None


def config_problems(cfg: RejectionConfig) -> list[str]:
    """What is wrong with the [rejection] roots, paths and hooks for any pod at all.

    A plan for a sample pod finds what every wipe would refuse (a relative or unsafe
    root, an unknown placeholder, a path outside the roots), so it is reported when
    the agent starts rather than at the first rejection.
    """
    return plan(PodRef("namespace", "name", "uid"), cfg).problems


def wipe(pod: PodRef, cfg: RejectionConfig, dry_run: bool = False) -> WipeResult:
    """Stop the holders of ``pod``'s state, run the hooks, remove the paths.

    Returns within ``cfg.wipe_timeout`` plus :data:`JOIN_GRACE`; never raises for a
    failed wipe. With ``dry_run`` it reports what it would do: no signal is sent, no
    hook runs, nothing is removed.
    """
    started = time.monotonic()
    job = _Wipe(pod, cfg, dry_run, deadline=started + cfg.wipe_timeout)
    worker = threading.Thread(target=job.run, name=f"wipe {pod}", daemon=True)
    worker.start()
    worker.join(timeout=max(cfg.wipe_timeout, 0.0) + JOIN_GRACE)
    if worker.is_alive():
        job.abandon()
    return job.result(time.monotonic() - started)


@dataclass
class _Wipe:
    """One wipe's steps and progress, shared by the worker and the waiting caller.

    The caller only reads the lists (appends are atomic) and sets ``abandoned``.
    """

    pod: PodRef
    cfg: RejectionConfig
    dry_run: bool
    deadline: float
    removed: list[str] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    denied: int = 0
    step: str = "while starting"
    timed_out: str = ""  # set by the worker when it ran out of time
    finished: bool = False
    abandoned: bool = False
    hook_group: int | None = None  # the running hook's process group, to kill at the deadline
    hook_command: str = ""

    def run(self) -> None:
        try:
            self._steps()
        except _Deadline:
            if not self.timed_out:
                self.timed_out = f"wipe timeout ({self.cfg.wipe_timeout:g}s) reached {self.step}"
        except Exception as exc:  # a bug or an odd file system must not escape a wipe
            log.exception("wipe of %s failed %s", self.pod, self.step)
            self.failures.append(f"failed {self.step}: {exc}")
        finally:
            self.finished = True

    def _steps(self) -> None:
        self.step = "while planning"
        todo = plan(self.pod, self.cfg)
        self.refused.extend(todo.refused)
        self.failures.extend(todo.problems)
        self._stop(self._holders(todo.targets))
        for argv in todo.hooks:
            self._hook(argv)
        for target in todo.targets:
            self._remove(target)

    def _check(self) -> None:
        if self.abandoned or time.monotonic() >= self.deadline:
            raise _Deadline

    def _left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def _holders(self, targets: list[Target]) -> list[Any]:
        self.step = "while looking for processes holding the paths"
        held = _Held()
        for target in targets:
            held.add(target.real, self._check)
        if not held.prefixes:
            return []
        import psutil  # only a wipe with state paths needs it (nodeagent/host/preload.py)

        skip = {1, os.getpid(), *(p.pid for p in psutil.Process().parents())}
        found = []
        for proc in psutil.process_iter():
            self._check()
            if proc.pid in skip:
                continue
            try:
                if held.by(proc.pid):
                    found.append(proc)
            except PermissionError:
                self.denied += 1
        return found

    def _stop(self, procs: list[Any]) -> None:
        if self.dry_run:
            self.stopped.extend(p.pid for p in procs)
            return
        if not procs:
            return
        self._check()
        self.step = f"while stopping pid {', '.join(str(p.pid) for p in procs)}"
        self.failures.extend(_signal(procs, signal.SIGTERM))
        alive = _wait_gone(procs, min(TERM_GRACE, self._left() / 2))
        if alive:
            self.failures.extend(_signal(alive, signal.SIGKILL))
            alive = _wait_gone(alive, min(KILL_WAIT, self._left()))
        left = {p.pid for p in alive}
        self.stopped.extend(p.pid for p in procs if p.pid not in left)
        self.failures.extend(f"pid {pid} still running after SIGKILL" for pid in sorted(left))

    def _hook(self, argv: list[str]) -> None:
        self._check()
        command = shlex.join(argv)
        self.hooks.append(command)
        if self.dry_run:
            return
        self.step = f"while running hook {command!r}"
        import subprocess  # only a wipe with hooks runs commands: 0.4 MB on every other node

        # stderr goes to a file, not a pipe: a grandchild keeping a pipe open would
        # make reading it block past the hook's exit.
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    cwd="/",
                    process_group=0,
                )
            except OSError as exc:
                self.failures.append(f"hook {command!r} could not start: {exc.strerror}")
                return
            self.hook_command, self.hook_group = command, proc.pid
            try:
                code = proc.wait(timeout=self._left())
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                self.timed_out = self._hook_killed(command)
                _reap(proc)
                raise _Deadline from None
            finally:
                self.hook_group = None
            if code != 0:
                self.failures.append(f"hook {command!r} {_exit_text(code)}{_last_line(err)}")

    def _hook_killed(self, command: str) -> str:
        return (
            f"hook {command!r} still running at the {self.cfg.wipe_timeout:g}s "
            "wipe timeout: killed its process group"
        )

    def _remove(self, target: Target) -> None:
        self._check()
        self.step = f"while removing {target.path}"
        try:
            if _remove(target, self.dry_run):
                self.removed.append(target.path)
        except _Refused as exc:
            self.refused.append(target.path)
            self.failures.append(f"refused {target.path}: {exc}")
        except OSError as exc:
            self.failures.append(f"could not remove {target.path}: {exc.strerror or exc}")

    def abandon(self) -> None:
        """Give up on the worker: it starts nothing new, and a running hook is killed."""
        self.abandoned = True
        group = self.hook_group
        if group is not None:
            _kill_group(group)
            # The worker, not yet back from its wait, has not said so itself.
            self.timed_out = self.timed_out or self._hook_killed(self.hook_command)
        log.warning("wipe of %s: gave up at the deadline %s", self.pod, self.step)

    def result(self, seconds: float) -> WipeResult:
        finished = self.finished
        return WipeResult(
            reason=self._reason(finished),
            message=self._message(finished, seconds),
            removed=list(self.removed),
            stopped=list(self.stopped),
            refused=list(self.refused),
            hooks=list(self.hooks),
            seconds=seconds,
        )

    def _reason(self, finished: bool) -> str:
        if self.timed_out or not finished:
            return TIMED_OUT
        return FAILED if self.failures else WIPED

    def _message(self, finished: bool, seconds: float) -> str:
        parts = []
        if self.timed_out:
            parts.append(self.timed_out)
        elif not finished:
            parts.append(f"timed out after {seconds:.1f}s {self.step} (still blocked)")
        parts.extend(self.failures)
        parts.append(self._done())
        if self.denied:
            parts.append(f"{self.denied} processes not inspectable (access denied), not stopped")
        return "; ".join(parts)

    def _done(self) -> str:
        if not self.cfg.state_paths and not self.cfg.hooks:
            return "no state paths or hooks configured: nothing to wipe"
        stop, run, remove = (
            ("would stop", "would run", "would remove")
            if self.dry_run
            else ("stopped", "ran", "removed")
        )
        done = []
        if self.stopped:
            done.append(f"{stop} pid {', '.join(map(str, self.stopped))}")
        if self.hooks:
            done.append(f"{run} {len(self.hooks)} hook(s): {', '.join(self.hooks)}")
        if self.removed:
            done.append(f"{remove} {', '.join(self.removed)}")
        if not done:
            return "nothing to remove"
        return ("dry run: " if self.dry_run else "") + ", ".join(done)


class _Held:
    """What counts as holding the wiped paths: a path at or beneath one, or one of its inodes."""

    def __init__(self) -> None:
        self.prefixes: list[str] = []
        self.inodes: set[tuple[int, int]] = set()

    def add(self, top: str, check: Callable[[], None]) -> None:
        """Record ``top`` and what lies beneath it on the same file system, if it exists."""
        try:
            first = os.lstat(top)
        except OSError:
            return
        self.prefixes.append(top)
        self.inodes.add((first.st_dev, first.st_ino))
        if not stat.S_ISDIR(first.st_mode):
            return
        for dirpath, dirnames, filenames in os.walk(top):
            check()
            for name in [*dirnames, *filenames]:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                self.inodes.add((st.st_dev, st.st_ino))
                if st.st_dev != first.st_dev and name in dirnames:
                    dirnames.remove(name)  # a mount: never removed, so not worth walking

    def by(self, pid: int) -> bool:
        """Whether process ``pid`` holds anything. Raises PermissionError if it can't tell."""
        base = f"/proc/{pid}"
        try:
            links = [f"{base}/cwd", f"{base}/root", f"{base}/exe"]
            links += [f"{base}/fd/{fd}" for fd in os.listdir(f"{base}/fd")]
            return any(self._link(link) for link in links) or self._maps(f"{base}/maps")
        except (FileNotFoundError, ProcessLookupError):
            return False  # it exited meanwhile

    def _path(self, path: str) -> bool:
        path = path.removesuffix(" (deleted)")
        return any(path == p or path.startswith(p + "/") for p in self.prefixes)

    def _link(self, link: str) -> bool:
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            return False  # the descriptor was closed meanwhile, or a kernel thread's exe
        if not target.startswith("/"):
            return False  # socket:[...], pipe:[...], anon_inode:...
        if self._path(target):
            return True
        # A containerised process reports the path in its own mount namespace.
        try:
            st = os.stat(link)
        except PermissionError:
            raise
        except OSError:
            return False
        return (st.st_dev, st.st_ino) in self.inodes

    def _maps(self, maps: str) -> bool:
        with open(maps, encoding="utf-8", errors="surrogateescape") as fh:
            for line in fh:
                fields = line.split(maxsplit=5)
                major, minor = fields[3].split(":")
                inode = (os.makedev(int(major, 16), int(minor, 16)), int(fields[4]))
                if inode in self.inodes or (len(fields) == 6 and self._path(fields[5].rstrip())):
                    return True
        return False


def _signal(procs: list[Any], sig: signal.Signals) -> list[str]:
    """Send ``sig`` to each process; psutil refuses a pid reused since it was found."""
    import psutil

    failures = []
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
        except psutil.AccessDenied:
            failures.append(f"not allowed to send {sig.name} to pid {proc.pid}")
    return failures


def _alive(proc: Any) -> bool:
    # A zombie holds nothing any more; its parent, not the wipe, reaps it.
    import psutil

    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _wait_gone(procs: list[Any], timeout: float) -> list[Any]:
    """Wait up to ``timeout`` for the processes to end; return those still alive."""
    # Polled rather than psutil.wait_procs, which would reap (and so steal) the
    # exit status of the agent's own children.
    until = time.monotonic() + timeout
    alive = procs
    while True:
        alive = [p for p in alive if _alive(p)]
        if not alive or time.monotonic() >= until:
            return alive
        time.sleep(_POLL)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    # A process stuck in the kernel is left for Popen to reap later.
    import subprocess

    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)


def _exit_text(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited {code}"


def _last_line(fh: IO[bytes]) -> str:
    """': <the last non-empty line>' of what the hook wrote to stderr, or ''."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(size - 4096, 0))
    for line in reversed(fh.read().decode(errors="replace").splitlines()):
        if line.strip():
            return f": {line.strip()[:200]}"
    return ""


def _remove(target: Target, dry_run: bool) -> bool:
    """Remove ``target`` without following any symlink below its root.

    Returns False when there is nothing there. Raises _Refused for a symlink or a
    mount point in the way, OSError when the removal fails.
    """
    parent = _open_parent(target)
    if parent is None:
        return False
    try:
        name = target.parts[-1]
        try:
            mode = os.lstat(name, dir_fd=parent).st_mode
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(mode):
            raise _Refused("is a symlink (never followed below a state root)")
        if stat.S_ISDIR(mode):
            mounts = _mounts_beneath(target.real)
            if mounts:
                raise _Refused(f"{mounts[0]} is a mount point (unmount it first)")
            if not dry_run:
                shutil.rmtree(name, dir_fd=parent)
        elif not dry_run:
            os.unlink(name, dir_fd=parent)
        return True
    finally:
        os.close(parent)


def _open_parent(target: Target) -> int | None:
    """A descriptor of the target's parent directory, reached from the root with
    O_NOFOLLOW at every step; None when there is nothing there."""
    try:
        fd = os.open(target.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    for part in target.parts[:-1]:
        try:
            child = os.open(part, _DIR_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:
            os.close(fd)
            return None
        except NotADirectoryError:
            # A file (nothing beneath it to wipe) or a symlink (refused).
            link = stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode)
            os.close(fd)
            if link:
                raise _Refused(f"{part} became a symlink") from None
            return None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        fd = child
    return fd


def _mounts_beneath(path: str) -> list[str]:
    """Mount points at or beneath ``path``, as this process's mount namespace sees them."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        points = [_unescape(line.split()[4]) for line in fh]
    return [m for m in points if m == path or m.startswith(path + "/")]


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
