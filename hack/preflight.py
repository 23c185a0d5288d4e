"""What each documented command needs from the machine, checked before it starts.

    python3 hack/preflight.py COMMAND [ARGS...]       first line of a bash entry point
    preflight.require("bench/departure.py", argv)     first thing in a Python entry point
    python3 hack/preflight.py --table                 the table, as Markdown

A command whose needs are not all met stops with ONE line naming each missing thing and what
provides it, and exit code 69 (sysexits' EX_UNAVAILABLE), before it builds or boots anything:
a tool found missing twenty minutes into a run ended in a traceback far from its cause
(qemu's console log not found, with no word of qemu).

Only what the command cannot get for itself is a need: a cold cache is not (the build scripts
make what is missing, cached under ~/.cache/nodeagent), but the Go toolchain and root those
builds use are. hack/demo and hack/test run hack/setup, which installs the Debian packages:
their rows hold only what hack/setup cannot provide. No /dev/kvm anywhere: the VM node runs
under TCG (hack/vmnode/config.py). The standard library only: bash entry points run this
with the host's python3, before any venv exists.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

EX_UNAVAILABLE = 69
REPO = Path(__file__).resolve().parent.parent
SETUP = "hack/setup installs the Debian packages"
VENV = "hack/setup installs it in .venv"


@dataclass(frozen=True)
class Env:
    """What the checks read, given explicitly: a test strips PATH or claims another user."""

    path: str
    euid: int
    repo: Path = REPO

    @classmethod
    def current(cls) -> Env:
        return cls(os.environ.get("PATH", os.defpath), os.geteuid())


class Plain:
    """A need whose line is its description: nothing about the machine adds to it."""

    def describe(self) -> str:
        raise NotImplementedError

    def line(self, env: Env) -> str:
        return self.describe()


@dataclass(frozen=True)
class Tool(Plain):
    """A program on PATH, from a Debian package."""

    binary: str
    package: str
    by_setup: bool = True  # hack/setup installs the package

    def met(self, env: Env) -> bool:
        return shutil.which(self.binary, path=env.path) is not None

    def describe(self) -> str:
        return f"{self.binary} (apt-get install {self.package})"


@dataclass(frozen=True)
class Root(Plain):
    why: str

    def met(self, env: Env) -> bool:
        return env.euid == 0

    def describe(self) -> str:
        return f"root ({self.why}: run it as root)"


@dataclass(frozen=True)
class Device(Plain):
    path: str
    provider: str

    def met(self, env: Env) -> bool:
        return os.path.exists(self.path)

    def describe(self) -> str:
        return f"{self.path} ({self.provider})"


@dataclass(frozen=True)
class Module(Plain):
    """A Python module of an optional extra, in this interpreter (a Python entry point's)."""

    name: str
    extra: str

    def met(self, env: Env) -> bool:
        return importlib.util.find_spec(self.name) is not None

    def describe(self) -> str:
        return f"the Python module {self.name} (pip install -e '.[{self.extra}]'; {VENV})"


@dataclass(frozen=True)
class Go:
    """The Go toolchain the builds use (GOTOOLCHAIN=local: no other is fetched), at least
    the newest `go` line of the repo's Go modules."""

    def met(self, env: Env) -> bool:
        found = go_version(env.path)
        return found is not None and found >= go_minimum(env.repo)

    def describe(self) -> str:
        want = ".".join(map(str, go_minimum(REPO)))
        return f"go {want} or newer on PATH (the Go toolchain; Debian 12's golang-go is too old)"

    def line(self, env: Env) -> str:
        want = ".".join(map(str, go_minimum(env.repo)))
        found = go_version(env.path)
        have = "none found" if found is None else "found " + ".".join(map(str, found))
        return f"go {want} or newer on PATH ({have}; Debian 12's golang-go is too old)"


Need = Tool | Root | Device | Module | Go


@dataclass(frozen=True)
class Row:
    """Needs of `command`, applying when each of `when` is among its arguments and none of
    `unless` is."""

    command: str
    needs: tuple[Need, ...]
    when: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()

    def applies(self, args: Sequence[str]) -> bool:
        words = set(args) | {"=".join(p) for p in itertools.pairwise(args)}
        return set(self.when) <= words and not set(self.unless) & words


ROOT_NODES = Root("systemd-nspawn, debootstrap and network namespaces")
GO = Go()
# A real node (hack/realnode): its root by debootstrap, booted by systemd-nspawn, pause
# compiled with gcc, busybox for test pods, its client certificate by openssl.
NODE = (ROOT_NODES, GO, Tool("systemd-nspawn", "systemd-container"),
        Tool("debootstrap", "debootstrap"), Tool("gcc", "gcc"), Tool("busybox", "busybox-static"),
        Tool("openssl", "openssl"))  # fmt: skip
# The benchmark's client namespace (hack/realnode/traffic.py): its links and kube-proxy.
CLIENT = (Tool("ip", "iproute2"), Tool("iptables", "iptables"),
          Tool("iptables-restore", "iptables"))  # fmt: skip
# The VM node (hack/vmnode): qemu, its disk made and read back.
VM = (Tool("qemu-system-x86_64", "qemu-system-x86"), Tool("mke2fs", "e2fsprogs"),
      Tool("debugfs", "e2fsprogs"))  # fmt: skip
APT = Tool("apt-get", "apt", by_setup=False)  # hack/qemu-user fetches Debian 13's emulator
TUN = Device("/dev/net/tun", "the tun module: modprobe tun")
ROOTS = (Root("debootstrap and systemd-nspawn"), Tool("debootstrap", "debootstrap"),
         Tool("systemd-nspawn", "systemd-container"))  # fmt: skip

TABLE = (
    Row("hack/setup", (GO,), unless=("--venv-only",)),
    Row("hack/test", (Root("the system tier boots nspawn machines"), GO), unless=("--fast",)),
    Row("hack/demo", (ROOT_NODES, GO)),
    Row("bench/demo.py", (*NODE, *CLIENT, Module("matplotlib", "demo"))),
    Row("bench/departure.py", (*NODE, *CLIENT)),
    Row("bench/departure.py", (*VM, TUN), when=("--shape=vm",)),
    Row("hack/vm", NODE),
    Row("hack/vm", VM, unless=("build",)),
    Row("hack/real-node", (*NODE, Tool("ip", "iproute2"))),
    Row("hack/matrix", NODE),
    Row("hack/cluster", (GO, Tool("openssl", "openssl"))),
    Row("bench/drain_bench.py", (GO, Tool("openssl", "openssl"))),
    Row("bench/fleet.py", (GO, Tool("openssl", "openssl"))),
    Row("hack/build-deb", (*ROOTS, APT)),
    Row("hack/build-image", (*ROOTS, Tool("buildah", "buildah"), APT)),
    Row("hack/build-ignition", (GO,)),
    Row("hack/release", (*ROOTS, Tool("buildah", "buildah"), APT, GO)),
    Row("hack/render-manifests", (GO,)),
    Row("hack/binfmt", (Root("binfmt_misc registration"), APT)),
    Row("hack/vm-root", ROOTS),
    Row("hack/nspawn-root", ROOTS),
    Row("hack/build-control-plane.sh", (GO,)),
    Row("hack/build-helm.sh", (GO,)),
    Row("hack/build-promtool.sh", (GO,)),
    Row("hack/build-aemm.sh", (GO,)),
    Row("hack/build-crane.sh", (GO,)),
    Row("hack/build-cluster-api.sh", (GO,)),
    # Karpenter: the go on PATH fetches the Go its go.mod names from the module proxy.
    Row("hack/build-karpenter.sh", (GO,)),
)
COMMANDS = tuple(dict.fromkeys(r.command for r in TABLE))


def needs(command: str, args: Sequence[str], table: Sequence[Row] = TABLE) -> list[Need]:
    """The command's needs for these arguments, each once, in the table's order."""
    if command not in {r.command for r in table}:
        raise KeyError(f"no preflight row for {command}")
    found = [n for r in table if r.command == command and r.applies(args) for n in r.needs]
    return list(dict.fromkeys(found))


def missing_line(command: str, args: Sequence[str], env: Env) -> str | None:
    """The one line naming what `command` lacks here, or None when nothing is missing."""
    lacking = [n for n in needs(command, args) if not n.met(env)]
    if not lacking:
        return None
    setup = any(isinstance(n, Tool) and n.by_setup for n in lacking)
    return f"{command}: needs {'; '.join(n.line(env) for n in lacking)}" + (
        f" ({SETUP})" if setup else ""
    )


def require(command: str, argv: Sequence[str] | None = None) -> None:
    """Exit with the one line and EX_UNAVAILABLE when something is missing; `--help` and
    `-h` always pass (a fresh machine may read the usage)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        return
    line = missing_line(command, args, Env.current())
    if line is not None:
        print(line, file=sys.stderr)
        raise SystemExit(EX_UNAVAILABLE)


# ---- the Go toolchain ------------------------------------------------------------------------

Version = tuple[int, ...]


def parse_go(text: str) -> Version | None:
    """`go1.26.8` or a go.mod's `1.26.0` as numbers; None for anything else."""
    m = re.fullmatch(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+))?\S*", text.strip())
    return None if m is None else tuple(int(g or 0) for g in m.groups())


def go_minimum(repo: Path) -> Version:
    """The newest `go` directive of the repo's Go modules (hack/go/*, hack/workload), but for
    a module naming its own `toolchain`: its build script fetches that Go from the module
    proxy (GOTOOLCHAIN), so the Go on PATH need not be as new."""
    found: list[Version] = [(1, 0, 0)]
    for mod in [*repo.glob("hack/go/*/go.mod"), *repo.glob("hack/*/go.mod")]:
        lines = mod.read_text().splitlines()
        if any(line.startswith("toolchain ") for line in lines):
            continue
        for line in lines:
            if line.startswith("go "):
                version = parse_go(line[3:])
                if version is not None:
                    found.append(version)
    return max(found)


def go_version(path: str) -> Version | None:
    go = shutil.which("go", path=path)
    if go is None:
        return None
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                             timeout=30, check=False, env={**os.environ, "PATH": path})  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_go(out.stdout)


# ---- the table, for the docs -----------------------------------------------------------------


def markdown() -> str:
    lines = ["| command | when | needs |", "| --- | --- | --- |"]
    for r in TABLE:
        when = " ".join([*r.when, *(f"not {u}" for u in r.unless)]) or "always"
        what = "; ".join(n.describe() for n in r.needs) or "nothing beyond python3"
        lines.append(f"| `{r.command}` | {when} | {what} |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2].strip())
        return 0 if argv else 2
    if argv[0] == "--table":
        print(markdown())
        return 0
    try:
        require(argv[0], argv[1:])
    except KeyError as exc:
        print(f"hack/preflight.py: {exc.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
