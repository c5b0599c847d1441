"""Import order: no module imports one that imports it back, the packages are layers (nothing
below the harness reaches it, nothing reaches the plugin or the cli), the report modules
import each other one way, and the packages below them keep the layers of docs/development.md (db imports
nothing of the project; ingest may read measure's statistics record, so measure never imports
ingest). Every import counts, also those inside functions and under TYPE_CHECKING: a cycle
hidden there is still a cycle."""

from __future__ import annotations

import ast
import functools
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest_npuperf

PACKAGE = Path(pytest_npuperf.__file__).parent


def _imports(path: Path) -> set[str]:
    """The `pytest_npuperf` modules a file imports, as dotted names below the package."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    here = parts[:-1]  # the package the file is in (an __init__ is its own package's)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[:len(here) - node.level + 1]
            target = (*base, *node.module.split(".")) if node.module else base
            found.add(".".join(target))
            if not node.module:  # `from . import summary`: each name is a module
                found.update(".".join((*base, alias.name)) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytest_npuperf."):
            found.add(node.module.removeprefix("pytest_npuperf."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("pytest_npuperf.") for a in node.names
                         if a.name.startswith("pytest_npuperf."))
    return found


def _package_imports(package: str) -> dict[str, set[str]]:
    return {f"{package}.{path.stem}": _imports(path)
            for path in sorted((PACKAGE / package).glob("*.py"))}


def test_report_modules_import_each_other_one_way():
    graph = {module: {m for m in found if m.startswith("report.") and m != "report"}
             for module, found in _package_imports("report").items()
             if not module.endswith("__init__")}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"report modules import each other in a circle: {exc.args[1]}") \
            from None
    assert order.index("report.names") < order.index("report.html") < order.index("report.page") \
        < order.index("report.writer")


def test_db_imports_nothing_of_the_project_and_measure_nothing_of_ingest():
    for module, found in _package_imports("db").items():
        assert {m for m in found if not m.startswith("db")} == set(), module
    for module, found in _package_imports("measure").items():
        assert not {m for m in found if m == "ingest" or m.startswith("ingest.")}, module


@functools.cache  # parsed once for the tests below, which only read it
def _all_modules() -> dict[str, set[str]]:
    """Every module of the package (dotted below it) and the modules it imports (a name
    imported from a package counts as that package)."""
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"
        graph[name] = _imports(path)
    known = set(graph)

    def ancestors(name: str) -> set[str]:  # a package is imported before its modules anyway
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}
    return {name: ({m if m in known else m.rsplit(".", 1)[0] for m in found} & known)
            - {name} - ancestors(name) for name, found in graph.items()}


def _room(module: str) -> str:
    return module.split(".")[0]


def test_no_module_imports_another_that_imports_it_back():
    """Module by module, the imports of the whole package form no circle."""
    try:
        TopologicalSorter(_all_modules()).prepare()
    except CycleError as exc:
        raise AssertionError(f"an import circle: {' -> '.join(exc.args[1])}") from None


def test_the_packages_are_layers():
    """Package by package (the root's modules each their own): no two packages import each
    other, even through others, and the root's plugin and cli sit on top (docs/development.md)."""
    graph: dict[str, set[str]] = {}
    for module, found in _all_modules().items():
        graph.setdefault(_room(module), set()).update(_room(m) for m in found)
    graph = {room: found - {room} for room, found in graph.items()}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"packages import each other: {' -> '.join(exc.args[1])}") \
            from None
    for low in ("run", "replay", "profiling", "report", "history", "measure", "db"):
        assert "harness" not in _reachable(graph, low), f"{low} reaches harness"
    for room in graph:
        if room not in ("plugin", "cli"):
            assert not {"plugin", "cli"} & _reachable(graph, room), f"{room} reaches the top"
    assert graph["db"] <= {"__init__"} and order.index("db") < order.index("harness")


def _documented_layers() -> dict[str, int]:
    """Package -> layer, from the table under "## Layers" in docs/development.md."""
    page = (PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8")
    section = page.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for level, packages in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, re.M):
        for package in re.findall(r"`([\w.]+)`", packages):
            assert package not in layers, f"{package} listed twice in docs/development.md"
            layers[package] = int(level)
    return layers


def test_the_packages_keep_the_layers_docs_development_lists():
    """Each package imports only packages of a lower layer of the documented table, and the
    table lists every package (so the page and the code cannot drift apart)."""
    layers = _documented_layers()
    graph: dict[str, set[str]] = {}
    for module, found in _all_modules().items():
        graph.setdefault(_room(module), set()).update(_room(m) for m in found)
    rooms = set(graph) - {"__init__"}
    assert rooms == set(layers), f"not listed: {rooms - set(layers)}, gone: {set(layers) - rooms}"
    upward = sorted(f"{room} (layer {layers[room]}) imports {other} (layer {layers[other]})"
                    for room, found in graph.items() if room != "__init__"
                    for other in found - {room, "__init__"} if layers[other] >= layers[room])
    assert upward == []


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_root_package_holds_only_the_entry_points():
    """Everything else has its room (issue 17): the plugin, the command line and the hook
    specifications are the doors, the rest lives in packages."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules <= {"__init__", "plugin", "cli", "hookspecs"}, modules
