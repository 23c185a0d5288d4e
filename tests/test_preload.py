"""After preload, no import the agent makes later reads a file of the installed package.

A package upgrade swaps those files under the running daemon (see nodeagent/host/preload.py). The
imports the agent makes inside functions are found in its source; each is run after
``preload()`` in a fresh interpreter, and none may load a module that is not already loaded
(standard library aside: it is not part of the package).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import nodeagent
from nodeagent.config import Config, RejectionConfig
from nodeagent.host.preload import CLI_ONLY, NOT_PRELOADED, own_modules, third_party
from tests.test_plainyaml import KUBEADM

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import importlib, json, sys
from nodeagent.host.preload import preload
preload()
if sys.argv[2] == "library":  # a client built on the client library, at start
    from nodeagent.kube import library
    library.import_modules()
before = set(sys.modules)
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        pass  # `from X import Y` where Y is an attribute, not a module
late = sorted(set(sys.modules) - before)
print(json.dumps([m for m in late if m.split(".")[0] not in sys.stdlib_module_names]))
"""


# Imported only for a kubeconfig the client library must load, when the client is built.
LIBRARY = REPO / "nodeagent" / "kube" / "library.py"
CLI = REPO / "nodeagent" / "cli.py"


def lazy_imports(library: bool = False) -> list[str]:
    """Modules imported inside functions in nodeagent/ (X and X.Y for `from X import Y`),
    outside the client library's module (or only in it)."""
    names: set[str] = set()
    for path in sorted((REPO / "nodeagent").rglob("*.py")):
        if (path == LIBRARY) != library or path == CLI:
            continue  # the CLI's commands are one-shot processes: nothing to preload
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if id(node) in top:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    # The entry point imports the CLI before anything else runs, or never (the tests below).
    return sorted(n for n in names if not any(n == m or n.startswith(f"{m}.") for m in CLI_ONLY))


def test_lazy_imports_are_found() -> None:
    found = lazy_imports()
    assert "nodeagent.agent.daemon" in found and "jeepney" in found, found
    assert "kubernetes.config" in lazy_imports(library=True)


def late_modules(imports: list[str], mode: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(imports), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
    )
    return list(json.loads(out.stdout))


def test_nothing_is_loaded_after_preload() -> None:
    assert late_modules(lazy_imports(), "") == []


def test_the_client_library_is_not_preloaded() -> None:
    """Its memory is spent only by agents whose kubeconfig needs it."""
    assert late_modules(["kubernetes.client"], "") != []


def test_the_client_library_loads_all_it_uses_when_the_client_is_built() -> None:
    """A client built on the library (an exec plugin) imports at start what it uses later;
    tests/test_daemonset_identity.py checks that a refresh of the credential loads nothing."""
    assert late_modules(lazy_imports(library=True), "library") == []


PATHS = {"state_roots": ["/var/lib/app"], "state_paths": ["/var/lib/app/{uid}"]}


@pytest.mark.parametrize(
    ("cfg", "psutil"),
    [
        (None, True),  # no configuration: everything (what the probe above checks)
        (Config(), False),  # the default wipe has no paths, so it looks for no holders
        (Config(rejection=RejectionConfig(**PATHS)), True),
        (Config(rejection=RejectionConfig(enabled=False, **PATHS)), False),
        (Config(rejection=RejectionConfig(hooks=["/bin/true"])), False),
    ],
)
def test_psutil_is_preloaded_only_for_a_wipe_with_state_paths(
    cfg: Config | None, psutil: bool
) -> None:
    assert ("psutil" in third_party(cfg)) == psutil


WIPE_WITHOUT_PATHS = """
import sys
from nodeagent.config import Config
from nodeagent.host.preload import preload
from nodeagent.rejection.wipe import PodRef, wipe
preload(Config())
result = wipe(PodRef("ns", "name", "uid"), Config().rejection)
print(result.reason, "psutil" in sys.modules)
"""


def test_a_wipe_without_state_paths_never_imports_psutil() -> None:
    """What makes leaving it out of the default preload safe."""
    out = subprocess.run(
        [sys.executable, "-c", WIPE_WITHOUT_PATHS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
    )
    assert out.stdout.split() == ["Wiped", "False"], out


ENTRY = """
import sys
sys.argv = ["nodeagent", *sys.argv[1:]]
from nodeagent.agent import launch
params = launch.daemon_params(sys.argv[1:])
from nodeagent.config import Config
from nodeagent.host.preload import preload
preload(Config())
print(params is not None, "click" in sys.modules, "nodeagent.cli" in sys.modules)
"""


@pytest.mark.parametrize(
    ("argv", "cli"),
    [
        (["run", "--config", "/etc/nodeagent/config.toml"], False),  # the units' command line
        (["run", "--help"], True),  # click's: the entry point imports the CLI at once
    ],
)
def test_the_daemon_as_started_never_loads_click(argv: list[str], cli: bool) -> None:
    """The entry point decides before anything else runs whether click parses the command
    line; the daemon's preload never loads it."""
    out = subprocess.run(
        [sys.executable, "-c", ENTRY, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
    )
    assert out.stdout.split() == [str(not cli), "False", "False"], out


def test_own_modules_are_the_packages_modules() -> None:
    found = pkgutil.walk_packages(nodeagent.__path__, "nodeagent.")
    assert own_modules() == sorted(m.name for m in found if m.name not in NOT_PRELOADED)
    assert "nodeagent.agent.daemon" in own_modules()


WIPE_WITH_HOOKS = """
import sys
from nodeagent.config import RejectionConfig
from nodeagent.rejection.wipe import PodRef, wipe
print("subprocess" in sys.modules, end=" ")
result = wipe(PodRef("ns", "name", "uid"), RejectionConfig(hooks=["/bin/true {uid}"]))
print(result.reason, result.hooks)
"""


def test_only_a_wipe_with_hooks_imports_subprocess() -> None:
    out = subprocess.run(
        [sys.executable, "-c", WIPE_WITH_HOOKS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
    )
    assert out.stdout.split() == ["False", "Wiped", "['/bin/true", "uid']"], out


def importers(module: str) -> set[str]:
    """The package's files that import `module`, at the top or inside a function."""
    found = set()
    for path in (REPO / "nodeagent").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            else:
                continue
            if module in names:
                found.add(str(path.relative_to(REPO)))
    return found


@pytest.mark.parametrize("module", CLI_ONLY)
def test_what_is_not_preloaded_only_the_cli_imports(module: str) -> None:
    expected = {"nodeagent/agent/launch.py", "nodeagent/__main__.py"}
    if module != "nodeagent.cli":
        expected = {"nodeagent/cli.py"}
    assert importers(module) and importers(module) <= expected, importers(module)


KUBEADM_STYLE = """
import sys
from nodeagent.config import Config
from nodeagent.host.preload import preload
from nodeagent.kube.kubeconfig import parse_yaml
preload(Config())
doc = parse_yaml(sys.stdin.read())
print(doc["users"][0]["name"], "yaml" in sys.modules)
"""


def test_a_plain_kubeconfig_never_imports_pyyaml() -> None:
    out = subprocess.run(
        [sys.executable, "-c", KUBEADM_STYLE],
        input=KUBEADM,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
    )
    assert out.stdout.split() == ["system:node:worker-1", "False"], out
