"""Load every module the daemon may import later, before it starts its work.

A package upgrade replaces the installed files under the running daemon before its unit is
restarted. A module imported lazily after that swap (the SIGTERM path imports the D-Bus code,
a drain the Kubernetes client) would come from the new version while the rest of the process
is the old one. Importing everything at start keeps the process on the version it started
with: Python never reads a module's file again once it is in ``sys.modules``.

The standard library is not in the package (it comes with the system's Python), so only the
agent's own modules and the third-party ones it imports inside functions are listed. A
third-party module that only a feature the configuration leaves off would import is not
loaded: the process could never import it later, and its memory would be spent on every node.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import nodeagent
from nodeagent.config import Config

# Third-party modules the agent imports inside functions (tests/test_preload.py keeps this list
# complete), with the submodules they load on first use.
#
# Not the `kubernetes` client library: it costs about 20 MB of memory, and only a kubeconfig
# with an exec credential plugin (or an auth-provider, or a password) needs it. Building the
# client for such a kubeconfig imports everything of it that is used later, at start
# (nodeagent.kube.library.MODULES), which is when this list is loaded as well.
THIRD_PARTY = (
    "urllib3",
    "urllib3.exceptions",
    "jeepney",
    "jeepney.io.blocking",
    "jeepney.io.threading",
    "jeepney.bus_messages",
    "sdnotify",
)
# The rejected-pod wipe looks for processes holding the pod's state with psutil
# (nodeagent/rejection/wipe.py), only when [rejection] names state paths: 1 MB of RSS.
WIPE_HOLDERS = ("psutil",)


# PyYAML reads a kubeconfig outside the plain subset (nodeagent/kube/kubeconfig.py), which
# only connecting does, right after this preload and never on the stop path: it is imported
# then if at all (1.0 MB of RSS the kubeconfigs of kubeadm, k3s and kubectl do not need).
CONNECT_ONLY = ("yaml",)


def third_party(cfg: Config | None) -> tuple[str, ...]:
    """The third-party modules a daemon running with `cfg` may import later (all: no config)."""
    holders = cfg is None or (cfg.rejection.enabled and bool(cfg.rejection.state_paths))
    return THIRD_PARTY + (WIPE_HOLDERS if holders else ()) + (CONNECT_ONLY if cfg is None else ())


# Not ``__main__`` (importing it runs the program), nor the click CLI: the entry point
# (nodeagent/agent/launch.py) imports the CLI first thing or never, and a daemon started
# without it spares the memory of click. Nor what only the CLI's one-shot commands import.
CLI_ONLY = ("nodeagent.cli", "nodeagent.agent.status", "nodeagent.drain.summary")
NOT_PRELOADED = ("nodeagent.__main__", *CLI_ONLY)


def own_modules() -> list[str]:
    """Every module of the nodeagent package the daemon may import (found by its files:
    pkgutil, with what it imports, would cost 0.4 MB of memory for a directory walk)."""
    root = Path(nodeagent.__file__).parent
    names = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names - {nodeagent.__name__, *NOT_PRELOADED})


def preload(cfg: Config | None = None) -> int:
    """Import the agent's modules and the dependencies it imports lazily with `cfg`; how many."""
    names = [*own_modules(), *third_party(cfg)]
    for name in names:
        importlib.import_module(name)
    return len(names)
