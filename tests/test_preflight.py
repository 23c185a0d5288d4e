"""Every documented command stops with one line naming what it lacks (hack/preflight.py).

The table's decisions are checked as tables; then each command in the table is run for real
from a fresh clone of the checkout (no .venv, no dist/, nothing built in it) with PATH
stripped of one tool it needs: it must exit 69 with one line on stderr naming that tool,
before doing anything. A command the README or docs/ shows must have a row, and its entry
point must call the preflight.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hack import preflight
from hack.preflight import EX_UNAVAILABLE, Env, Go, Root, Tool

REPO = Path(__file__).resolve().parents[1]
# How each command is started: a bash or Python script by path (its #! line), or a module.
MODULES = {"bench/demo.py": "bench.demo"}
# The arguments each command is run with (the row that names qemu needs the vm shape).
ARGS = {"bench/departure.py": ["--shape", "vm"], "hack/vm": ["smoke"]}
# The tool taken away where it is not the row's first: the case, qemu.
TAKE = {"bench/departure.py": "qemu-system-x86_64", "hack/vm": "qemu-system-x86_64"}


def names(command: str, args: list[str]) -> list[str]:
    out = []
    for n in preflight.needs(command, args):
        out.append(n.binary if isinstance(n, Tool) else type(n).__name__.lower())
    return out


@pytest.mark.parametrize(
    ("command", "args", "has", "lacks"),
    [
        ("bench/departure.py", [], ["systemd-nspawn", "iptables", "go", "root"], ["debugfs"]),
        ("bench/departure.py", ["--shape", "vm"], ["qemu-system-x86_64", "mke2fs", "debugfs"], []),
        ("bench/departure.py", ["--shape=vm"], ["qemu-system-x86_64"], []),
        ("bench/departure.py", ["--shape", "nspawn"], ["ip"], ["qemu-system-x86_64"]),
        ("hack/vm", ["build"], ["debootstrap", "go"], ["qemu-system-x86_64"]),
        ("hack/vm", ["smoke"], ["qemu-system-x86_64", "systemd-nspawn"], []),
        ("hack/setup", [], ["go"], ["root"]),
        ("hack/demo", [], ["root", "go"], ["systemd-nspawn"]),  # hack/setup installs it
        ("hack/build-image", [], ["buildah", "debootstrap", "root"], ["go"]),
    ],
)
def test_needs_table(command: str, args: list[str], has: list[str], lacks: list[str]) -> None:
    got = names(command, args)
    assert set(has) <= set(got), got
    assert not set(lacks) & set(got), got
    assert len(got) == len(set(got))  # each need once, though two rows name it


@pytest.mark.parametrize(("command", "args"), [("hack/setup", ["--venv-only"]),
                                               ("hack/test", ["--fast"])])  # fmt: skip
def test_venv_only_needs_nothing(command: str, args: list[str]) -> None:
    assert preflight.needs(command, args) == []
    assert preflight.missing_line(command, args, Env("", 1000)) is None


def test_unknown_command() -> None:
    with pytest.raises(KeyError):
        preflight.needs("hack/nothing", [])
    out = subprocess.run([sys.executable, str(REPO / "hack/preflight.py"), "hack/nothing"],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert (out.returncode, out.stderr) == (
        2,
        "hack/preflight.py: no preflight row for hack/nothing\n",
    )


@pytest.mark.parametrize(
    ("text", "version"),
    [("go1.26.8", (1, 26, 8)), ("1.26.0", (1, 26, 0)), ("go1.24", (1, 24, 0)),
     ("go1.27rc1", (1, 27, 0)), ("devel", None), ("", None)],
)  # fmt: skip
def test_parse_go(text: str, version: tuple[int, ...] | None) -> None:
    assert preflight.parse_go(text) == version


def test_go_minimum_is_the_newest_module(tmp_path: Path) -> None:
    for name, line in (("a", "go 1.24.0"), ("b", "go 1.26.7"), ("c", "go 1.25")):
        (tmp_path / "hack/go" / name).mkdir(parents=True)
        (tmp_path / "hack/go" / name / "go.mod").write_text(f"module x\n\n{line}\n")
    assert preflight.go_minimum(tmp_path) == (1, 26, 7)
    # A module naming its own toolchain is built with that Go, fetched by its build script.
    (tmp_path / "hack/go/d").mkdir()
    (tmp_path / "hack/go/d/go.mod").write_text("module x\n\ngo 1.26.9\n\ntoolchain go1.27.3\n")
    assert preflight.go_minimum(tmp_path) == (1, 26, 7)


def test_one_line_for_everything_missing() -> None:
    line = preflight.missing_line("bench/departure.py", ["--shape", "vm"], Env("", 1000))
    assert line is not None and "\n" not in line
    assert line.startswith("bench/departure.py: needs root (")
    for what in ("go ", "qemu-system-x86_64 (apt-get install qemu-system-x86)", "e2fsprogs"):
        assert what in line
    assert line.endswith("(hack/setup installs the Debian packages)")


def test_help_always_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    preflight.require("bench/departure.py", ["--shape", "vm", "--help"])
    with pytest.raises(SystemExit) as exited:
        preflight.require("bench/departure.py", ["--shape", "vm"])
    assert exited.value.code == EX_UNAVAILABLE


# ---- the documented commands ------------------------------------------------------------------


def documented() -> set[str]:
    """Commands the README and docs/ show: `python bench/X.py`, `python -m bench.X`, and
    hack/X where that is an executable file (not a module or a directory)."""
    found = set()
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]:
        text = doc.read_text()
        found |= set(re.findall(r"python3? (bench/\w+\.py)", text))
        found |= {f"bench/{m}.py" for m in re.findall(r"python3? -m bench\.(\w+)", text)}
        found |= {p.rstrip(".") for p in re.findall(r"(?<![\w/.])(hack/[\w.-]+)", text)}
    return {p for p in found if is_command(p)}


def is_command(path: str) -> bool:
    """A file there, executable unless a bench script (run by python): not a placeholder
    (bench/X.py), a module or a directory."""
    file = REPO / path
    return file.is_file() and (path.startswith("bench/") or os.access(file, os.X_OK))


def test_every_documented_command_has_a_row() -> None:
    shown = documented()
    assert {"hack/demo", "hack/test", "bench/departure.py", "hack/vm"} <= shown
    lacking = sorted(shown - set(preflight.COMMANDS))
    assert not lacking, (
        f"no Row in hack/preflight.py's TABLE (and no call at the start) for {lacking}"
    )


@pytest.mark.parametrize("command", preflight.COMMANDS)
def test_entry_point_calls_the_preflight(command: str) -> None:
    text = (REPO / command).read_text()
    if command.endswith(".py"):
        assert f'preflight.require("{command}", ' in text
    elif python_script(command):
        assert f'require("{command}")' in text
    else:
        assert f'python3 "$(dirname "$0")/preflight.py" {command} "$@"' in text


# ---- from a fresh clone, with a tool taken away ---------------------------------------------


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the repository with the working tree's files over it (what is committed,
    plus what is being changed), and nothing the .gitignore hides: no .venv, no dist/."""
    dst = tmp_path_factory.mktemp("fresh") / "nodeagent"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(dst)], check=True, timeout=120)
    git = ["git", "-C", str(REPO), "ls-files", "-z"]
    files = subprocess.run([*git, "-co", "--exclude-standard"], capture_output=True, check=True,
                           timeout=60).stdout.decode().split("\0")  # fmt: skip
    gone = subprocess.run([*git, "-d"], capture_output=True, check=True, timeout=60).stdout
    for name in filter(None, files):
        if (REPO / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dst / name)
    for name in filter(None, gone.decode().split("\0")):
        (dst / name).unlink(missing_ok=True)
    return dst


def path_without(binary: str, farm: Path) -> str:
    """A PATH of one directory holding every program this PATH has, but `binary`."""
    farm.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            target = farm / entry.name
            if entry.name != binary and not target.exists() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    return str(farm)


def taken(command: str) -> str:
    """The tool taken away for `command`: its first Tool, else go."""
    needs = preflight.needs(command, ARGS.get(command, []))
    tools = [n.binary for n in needs if isinstance(n, Tool)]
    if command in TAKE:
        assert TAKE[command] in tools
        return TAKE[command]
    assert tools or any(isinstance(n, Go) for n in needs), f"{command}: nothing to take away"
    return tools[0] if tools else "go"


def python_script(command: str) -> bool:
    return "python" in (REPO / command).read_text().split("\n", 1)[0]


def argv(command: str, clone: Path) -> list[str]:
    if command in MODULES:
        return [sys.executable, "-m", MODULES[command]]
    if command.endswith(".py") or python_script(command):
        return [sys.executable, str(clone / command)]
    return ["bash", str(clone / command)]


RUNNABLE = [c for c in preflight.COMMANDS if preflight.needs(c, ARGS.get(c, []))]


@pytest.mark.parametrize("command", RUNNABLE)
def test_fresh_checkout_says_what_is_missing(command: str, clone: Path, tmp_path: Path) -> None:
    tool = taken(command)
    env = {**os.environ, "PATH": path_without(tool, tmp_path / "bin")}
    env.pop("VIRTUAL_ENV", None)
    before = sorted(p.name for p in clone.iterdir())
    out = subprocess.run([*argv(command, clone), *ARGS.get(command, [])], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert out.returncode == EX_UNAVAILABLE, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"{command}: needs "), lines[0]
    assert f"{tool} " in lines[0] + " "
    assert out.stdout == ""
    assert sorted(p.name for p in clone.iterdir()) == before  # nothing made: no .venv, no dist


def test_root_is_named_for_another_user() -> None:
    line = preflight.missing_line("hack/demo", [], Env(os.environ["PATH"], 1000))
    assert line is not None and line.startswith("hack/demo: needs root (")
    assert isinstance(preflight.needs("hack/demo", [])[0], Root)


def test_a_missing_python_module_is_named() -> None:
    need = preflight.Module("no_such_module_here", "demo")
    assert not need.met(Env("", 0))
    assert need.line(Env("", 0)) == (
        "the Python module no_such_module_here (pip install -e '.[demo]'; "
        "hack/setup installs it in .venv)"
    )
    assert preflight.Module("json", "demo").met(Env("", 0))
    assert "matplotlib" in [getattr(n, "name", "") for n in preflight.needs("bench/demo.py", [])]
