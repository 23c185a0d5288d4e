"""The import graph keeps the architecture (docs/architecture.md): engines never import
controllers, controllers never import each other, only the agent wires them together."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nodeagent"

# Engines and plain pieces: they act when called and decide nothing about the node's owner.
ENGINES = {"types", "metrics", "objects", "kube", "fence", "drain", "report", "host", "cloud"}
ENGINES |= {"context", "config"}
# Their order (docs/architecture.md): a part imports only parts before it, or its own. At the
# bottom what every layer uses: the vocabulary, the metrics and the reading of API objects;
# the reporting sinks (conditions as data, Events) just above the API client.
ORDER = [
    {"types", "metrics", "objects"},
    {"context", "config"},
    {"kube"},
    {"report"},
    {"fence"},
    {"drain"},
    {"host"},
    {"cloud"},
]
BOTTOM = ORDER[0]
# Controllers: each runs its own loop over what it watches.
CONTROLLERS = {"departure", "rejection"}
# The wiring: may import anything.
WIRING = {"agent", "cli", "__main__", "__init__"}


def layer_of(module: str) -> str:
    """The top-level part of `nodeagent.x.y` (x), or '' outside the package."""
    parts = module.split(".")
    return parts[1] if parts[0] == "nodeagent" and len(parts) > 1 else ""


def rank(part: str) -> int:
    return next(i for i, parts in enumerate(ORDER) if part in parts)


def module_imports() -> list[tuple[str, str]]:
    """(importing module, imported module) for every import of the package by itself."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges += [(importer, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if node.module.count(".") == 1:  # from nodeagent.x import module
                    edges += [(importer, f"{node.module}.{a.name}") for a in node.names]
                else:
                    edges.append((importer, node.module))
    return [(a, b) for a, b in edges if layer_of(b)]


def imports() -> list[tuple[str, str]]:
    """(importing part, imported part) for every import of the package by itself."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        importer = layer_of(".".join(rel.parts))
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                imported = layer_of(name)
                if imported and imported != importer and imported in ENGINES | CONTROLLERS | WIRING:
                    edges.append((importer, imported))
    return sorted(set(edges))


def test_every_part_has_a_layer() -> None:
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    parts -= {"__pycache__"}
    assert parts <= ENGINES | CONTROLLERS | WIRING, parts - (ENGINES | CONTROLLERS | WIRING)


def test_engines_never_import_controllers_or_the_wiring() -> None:
    bad = [(a, b) for a, b in imports() if a in ENGINES and b in CONTROLLERS | WIRING]
    assert bad == []


def test_controllers_never_import_each_other_or_the_wiring() -> None:
    bad = [(a, b) for a, b in imports() if a in CONTROLLERS and b in CONTROLLERS | WIRING]
    assert bad == []


def test_engines_import_each_other_only_in_order() -> None:
    bad = []
    for importer, imported in module_imports():
        a, b = layer_of(importer), layer_of(imported)
        engines = a in ENGINES and b in ENGINES and a != b
        if engines and rank(b) > rank(a):
            bad.append((importer, imported))
    assert bad == []


def test_the_bottom_imports_nothing_above_it() -> None:
    # Every part imports these: an import of theirs upwards would be a circle in waiting.
    bad = [
        (importer, imported)
        for importer, imported in module_imports()
        if layer_of(importer) in BOTTOM and layer_of(imported) not in BOTTOM
    ]
    assert bad == []


def test_the_graph_is_seen() -> None:
    # The checks above would pass on an empty graph: make sure the walk finds real edges.
    edges = imports()
    assert ("departure", "drain") in edges and ("agent", "departure") in edges
    assert ("nodeagent.drain.engine", "nodeagent.drain.eviction") in module_imports()


# -- one writer of the fence ----------------------------------------------------------------

# fence/marker.py's writes: the cordon, the uncordon and every record on the Node.
MARKER_WRITES = {
    "cordon",
    "uncordon",
    "record_drain",
    "record_result",
    "record_boot",
    "forget_departed",
    "refence",
    "untaint",
    "hold_deletion",
}
# The daemon's one writer (docs/architecture.md, "Who owns the node's fence"), and the CLI's
# `nodeagent uncordon`, a person's own command in a process of its own.
FENCE_WRITERS = {"nodeagent/departure/executor.py", "nodeagent/cli.py"}


def marker_writes(path: Path) -> set[str]:
    """The marker's writes a file calls or imports (marker.cordon(...), from ... import),
    and "patch" for a patch of the Node object itself (its status is the conditions')."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            first = node.args[0] if node.args else None
            on_node = isinstance(first, ast.Call) and getattr(first.func, "id", "") == "node_path"
            if node.func.attr.endswith("patch") and on_node:
                found.add("patch")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "marker" and node.attr in MARKER_WRITES:
                found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == "nodeagent.fence.marker":
            found.update(a.name for a in node.names if a.name in MARKER_WRITES)
    return found


def test_only_the_executor_writes_the_fence() -> None:
    writers = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE.parent))
        if rel != "nodeagent/fence/marker.py" and marker_writes(path):
            writers[rel] = marker_writes(path)
    assert "record_boot" in writers["nodeagent/departure/executor.py"]  # the walk sees them
    assert set(writers) <= FENCE_WRITERS, writers


# -- inside nodeagent.kube ------------------------------------------------------------------

KUBE = PACKAGE / "kube"


def kube_imports() -> dict[str, set[str]]:
    """module -> the other modules of nodeagent.kube it imports, wherever the import is
    (at the top, in a function, under TYPE_CHECKING: each one runs some time)."""
    modules = {p.stem for p in KUBE.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for module in sorted(modules):
        graph[module] = set()
        for node in ast.walk(ast.parse((KUBE / f"{module}.py").read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[:2] == ["nodeagent", "kube"] and parts[2:3] and parts[2] in modules:
                    graph[module].add(parts[2])
        graph[module].discard(module)
    return graph


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle in `graph`, as the modules along it back to the first; [] if none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for imported in sorted(graph.get(module, ())):
            found = visit(imported, [*path, module])
            if found:
                return found
        done.add(module)
        return []

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return []


def test_the_kube_modules_form_no_import_circle() -> None:
    # The errors have a module of their own so that the client, which builds the transport
    # and reads kubeconfigs, is imported by none of what it imports (docs/architecture.md).
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    graph = kube_imports()
    assert {"client", "errors"} <= graph["credentials"], graph  # the walk sees real edges
    assert circle(graph) == []


# -- the whole package ----------------------------------------------------------------------


def imported_names(path: Path) -> set[str]:
    """What a file imports, wherever the import is (X and X.Y for `from X import Y`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def package_imports() -> dict[str, set[str]]:
    """module -> the package's other modules it imports (a package's own name for its
    __init__), wherever the import is."""
    paths = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {
        module: (imported_names(path) & set(paths)) - {module} for module, path in paths.items()
    }


def test_the_package_forms_no_import_circle() -> None:
    # The entry point imports the click CLI (inside main) and the CLI builds its commands on
    # what the entry point runs the daemon with: that lives in agent/command, below both.
    graph = package_imports()
    assert "nodeagent.cli" in graph["nodeagent.agent.launch"], graph  # lazy imports count
    assert "nodeagent.agent.command" in graph["nodeagent.cli"], graph
    assert circle(graph) == []


# -- the harness ----------------------------------------------------------------------------

REPO = PACKAGE.parent


def harness_imports() -> dict[str, set[str]]:
    """bench/, hack/ and tests/ file (relative path) -> the modules it imports."""
    paths = [path for top in HARNESS for path in sorted((REPO / top).rglob("*.py"))]
    return {str(path.relative_to(REPO)): imported_names(path) for path in paths}


# hack/ is the one library for clusters and real nodes; bench/, the demo and tests/ import it,
# never each other (docs/architecture.md): the benchmarks and the demo run without pytest,
# tests/ may use pytest anywhere, and a benchmark's entry point is no library.
HARNESS = ("bench", "hack", "tests")
NEVER = {"bench": {"tests"}, "hack": {"bench", "tests"}, "tests": {"bench"}}


def crossings(found: dict[str, set[str]]) -> dict[str, list[str]]:
    """file -> what it imports of a top-level directory NEVER forbids it."""
    bad: dict[str, list[str]] = {}
    for path, names in found.items():
        forbidden = NEVER[path.split("/")[0]]
        names_bad = sorted(n for n in names if n.split(".")[0] in forbidden)
        if names_bad:
            bad[path] = names_bad
    return bad


def test_crossings_are_seen() -> None:
    found = {
        "tests/test_x.py": {"bench", "bench.fleet", "hack.kubeutil", "tests.nspawn"},
        "hack/x.py": {"bench.fleet", "tests.nspawn", "hack.deb", "benchmark"},
        "bench/x.py": {"tests", "hack.deb"},
    }
    assert crossings(found) == {
        "tests/test_x.py": ["bench", "bench.fleet"],
        "hack/x.py": ["bench.fleet", "tests.nspawn"],
        "bench/x.py": ["tests"],
    }


def test_bench_and_tests_share_only_hack() -> None:
    found = harness_imports()
    # The walk sees real edges, each way the library is used.
    assert "hack.kubeutil" in found["bench/fleet.py"], found["bench/fleet.py"]
    assert "hack.departure.scene" in found["tests/test_departure_traffic.py"]
    assert "hack.fleet.scene" in found["tests/test_fleet.py"]
    assert "hack/localcluster/cluster.py" in found
    assert crossings(found) == {}
