"""Run ids: minted in one place (measure/clock.py), `<stamp>-<8 hex>`, and a child process
measures under the run id its parent gave it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest_npuperf
from pytest_npuperf.measure.clock import RUN_ID_ENV, inherited_run, mint_run

PACKAGE = Path(pytest_npuperf.__file__).parent


def test_a_run_id_is_its_stamp_and_eight_hex_digits():
    run = mint_run(1_700_000_000.0)
    assert re.fullmatch(r"\d{8}_\d{6}-[0-9a-f]{8}", run.run_id)
    assert run.run_id.startswith(run.stamp + "-") and run.started == 1_700_000_000.0
    assert mint_run(1_700_000_000.0).run_id != run.run_id
    assert mint_run(prefix="import-").run_id.startswith("import-")


def test_a_child_measures_the_run_its_parent_named():
    assert inherited_run(5.0, {RUN_ID_ENV: "20260101_000000-0123abcd"}).run_id == \
        "20260101_000000-0123abcd"
    assert inherited_run(5.0, {}).run_id != inherited_run(5.0, {}).run_id


def test_no_other_module_makes_run_ids():
    """Random ids come from `uuid` in measure/clock.py only."""
    makers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "uuid" in names:
                makers.append(path.relative_to(PACKAGE).as_posix())
    assert makers == ["measure/clock.py"]
