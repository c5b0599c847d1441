"""Import order: the report modules import each other one way, and the packages below them keep
DESIGN.md's layers (db imports nothing of the project; ingest may read measure's statistics
record, so measure never imports ingest). Every import counts, also those inside functions and
under TYPE_CHECKING: a cycle hidden there is still a cycle."""

from __future__ import annotations

import ast
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
