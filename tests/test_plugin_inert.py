"""The plugin costs nothing where it is not used: loading it imports neither torch nor pandas
(nor numpy), and a pytest run without replay cases behaves as if it were not installed."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pytest_npuperf import plugin
from pytest_npuperf.harness import options
from pytest_npuperf.harness.nodeids import CASE_NODEID
from pytest_npuperf.harness.roles import existing_context

# Imported here, not first inside a pytester test: pytester drops the modules a test imported
# when it ends, and numpy (under pandas) cannot be imported twice into one process.
from pytest_npuperf.replay.cases import CaseCatalog
from tests.replay_project import BENCH, FAST, MATMUL_ROWS, default_tables, write_db

# matplotlib: imported only when a report is drawn.
HEAVY = ("torch", "pandas", "numpy", "matplotlib")
UNRELATED_TESTS = """
import sys

import pytest


def test_plugin_is_loaded_unless_disabled(request):
    plugin = sys.modules.get("pytest_npuperf.plugin")
    loaded = plugin is not None and request.config.pluginmanager.is_registered(plugin)
    assert loaded != ("no:npuperf" in request.config.invocation_params.args)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_parametrized(n):
    assert n > 0
"""
# Says, once the run is over, what the pytest process imported.
REPORTING_CONFTEST = f"""
import sys


def pytest_unconfigure(config):
    print("HEAVY", [m for m in {HEAVY!r} if m in sys.modules])
"""
HEAVY_LINE = re.compile(r"^HEAVY (\[.*\])$", re.M)
NO_SECTION = re.compile(r"=+ npuperf =+")


def test_loading_the_plugin_imports_neither_torch_nor_pandas():
    code = ("import sys, pytest_npuperf.plugin, pytest_npuperf.harness.html_hooks; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def heavy_imports(pytester, *args: str) -> list[str]:
    """The heavy modules a pytest run of the unrelated project imported."""
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", *args)
    result.assert_outcomes(passed=4)
    assert not NO_SECTION.search(result.stdout.str())
    return ast.literal_eval(HEAVY_LINE.search(result.stdout.str()).group(1))


def test_an_unrelated_project_with_the_plugin_loaded_imports_nothing_heavy(pytester,
                                                                          monkeypatch):
    pytester.makepyfile(test_unrelated=UNRELATED_TESTS)
    pytester.makeconftest(REPORTING_CONFTEST)
    heavy = heavy_imports(pytester)
    assert not (pytester.path / "npuperf-out").exists()
    if heavy:
        # Another plugin of this environment imports them (numpy, on a host with jaxtyping):
        # without this plugin the run imports the same, and this plugin alone none.
        assert heavy_imports(pytester, "-p", "no:npuperf") == heavy
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        assert heavy_imports(pytester, "-p", "pytest_npuperf.plugin") == []


def test_the_xdist_controller_reads_no_database_for_ids_that_are_not_cases(pytester,
                                                                        monkeypatch):
    """No default database: reading one would be a usage error."""
    monkeypatch.setattr(options, "DEFAULT_DB", pytester.path / "no-db")
    config = pytester.parseconfigure()
    node = SimpleNamespace(config=config)
    plugin.pytest_xdist_node_collection_finished(
        node, ["test_x.py::test_a[1]", "test_x.py::test_b[foo-bar]", "test_x.py::test_c"])
    assert existing_context(config) is None
    with pytest.raises(pytest.UsageError, match="no such directory"):
        plugin.pytest_xdist_node_collection_finished(
            node, ["bench/test_kernels.py::test_kernel[MatMulV2-16x64x32-BF16-0a1b2c3d]"])


def test_an_unrelated_run_creates_no_replay_session(pytester):
    pytester.makepyfile(test_unrelated=UNRELATED_TESTS)
    reprec = pytester.inline_run("-p", "no:cacheprovider")
    reprec.assertoutcome(passed=4)
    config = reprec.getcalls("pytest_sessionfinish")[0].session.config
    assert config.pluginmanager.hasplugin("npuperf")
    assert existing_context(config) is None
    assert not (pytester.path / "npuperf-out").exists()


def test_options_stay_in_help_and_bad_values_are_still_usage_errors(pytester):
    pytester.makepyfile(test_unrelated="def test_one():\n    pass\n")
    help_text = pytester.runpytest("--help").stdout.str()
    for text in ("--npuperf-db", "--npuperf-device", "--npuperf-grid", "npuperf_update_mode",
                 "npuperf_statistic"):
        assert text in help_text
    result = pytester.runpytest("--npuperf-device", "gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npuperf-device*invalid choice*gpu*"])
    assert pytester.runpytest("--npuperf-warmup", "x").ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize("nodeid, is_case", [
    ("bench/test_kernels.py::test_kernel[MatMulV2-16x64x32-BF16-0a1b2c3d]", True),
    ("bench/test_kernels.py::test_kernel[RmsNorm-4x256-BF16-0a1b2c3d-dup2]", True),
    ("bench/test_kernels.py::test_kernel[FusedInferAttentionScore-badrow-NA-99aa00ff]", True),
    ("tests/test_x.py::test_a[1]", False),
    ("tests/test_x.py::test_a[foo-bar]", False),
    ("tests/test_x.py::test_a[name-0A1B2C3D]", False),
    ("tests/test_x.py::test_a", False),
])
def test_only_case_ids_make_the_xdist_controller_read_the_database(nodeid, is_case):
    assert bool(CASE_NODEID.search(nodeid)) is is_case


def test_every_case_id_the_catalog_makes_is_recognised_as_one(tmp_path):
    tables = default_tables()
    tables["MatMulV2"] = [*MATMUL_ROWS, MATMUL_ROWS[0]]  # a duplicate row: its id gets -dup2
    ids = [ref.case_id for ref in CaseCatalog(write_db(tmp_path, tables)).cases()]
    assert any(i.endswith("-dup2") for i in ids)
    assert all(CASE_NODEID.search(f"bench/test_kernels.py::test_kernel[{i}]") for i in ids), ids


def test_collecting_replay_cases_needs_no_torch(pytester):
    """Collection (and so each xdist worker's start) reads the database, not the replays."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    pytester.makeconftest(REPORTING_CONFTEST)
    db = write_db(pytester.path / "db", default_tables())
    result = pytester.runpytest_subprocess("bench", "--npuperf-db", str(db), "--collect-only",
                                           "-q", "-s", *FAST)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*4 tests collected*", "HEAVY ['pandas', 'numpy']"])
