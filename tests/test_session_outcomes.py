"""How a replay session ends for its user: `-n 2 -v` reports every case, a database path with no
kernel table is an error naming the databases below it, and a case without a trusted value is
not a green PASSED."""

from __future__ import annotations

import pytest

# In-process pytester runs drop the modules first imported inside them when they end, and torch
# cannot be imported twice into one process: it is imported here, before any run replays a case.
import torch  # noqa: F401

from tests.replay_project import BENCH, FAST, default_tables, run_json, write_db


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", default_tables())
    return pytester, db


def run(pytester, db, *args):
    return pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                              str(pytester.path / "out"), *FAST, *args)


# -- a database path that holds no kernel table ----------------------------------------------------
@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_database_path_one_level_too_high_is_an_error_naming_the_databases_below(project,
                                                                                     xdist):
    pytester, db = project
    root = db.parents[2]  # <root>: the device and version directories are below it
    result = pytester.runpytest_inprocess("bench", "--npuperf-db", str(root), "--npuperf-out",
                                          str(pytester.path / "out"), *FAST, *xdist)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    error = "\n".join(result.errlines)
    assert "no kernel tables here" in error and "<KernelType>.csv" in error
    assert f"databases found below it: {db}" in error
    assert "INTERNALERROR" not in error + "\n".join(result.outlines)


def test_an_empty_database_directory_is_an_error_not_a_green_run(project):
    pytester, _ = project
    empty = pytester.path / "empty"
    empty.mkdir()
    (empty / "reports").mkdir()
    (empty / "reports" / "duration_gap_20260101_000000.csv").write_text("Operator\n")
    result = pytester.runpytest_inprocess("bench", "--npuperf-db", str(empty), "--npuperf-out",
                                          str(pytester.path / "out"), *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no database found below it either" in "\n".join(result.errlines)
    assert not (pytester.path / "out").exists()


# -- -n 2 -v ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_xdist_with_verbose_ends_normally_and_writes_every_case(project):
    """execnet sends dictionaries: a worker's `-v` status word must not turn the result its
    report carries into an object (the run was lost to an INTERNALERROR)."""
    pytester, db = project
    result = run(pytester, db, "-n", "2", "-v", "-k", "MatMul or RmsNorm")
    output = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in output and "DumpError" not in output
    assert result.ret == pytest.ExitCode.OK
    assert sum(1 for line in result.outlines if "PASSED" in line and " us" in line) == 3
    report = run_json(pytester.path / "out")
    assert report["totals"]["cases"] == 3 and report["session"]["workers"] == 2
