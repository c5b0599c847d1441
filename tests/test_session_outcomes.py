"""How a replay session ends for its user: `-n 2 -v` reports every case, a database path with no
kernel table is an error naming the databases below it, and a case without a trusted value is
not a green PASSED."""

from __future__ import annotations

import html
import re

import pytest

# In-process pytester runs drop the modules first imported inside them when they end, and torch
# cannot be imported twice into one process: it is imported here, before any run replays a case.
import torch  # noqa: F401

from tests.replay_project import BENCH, FAST, default_tables, run_json, write_db

# A host that leaves the RmsNorm case noisy: the runner's own noise check flags it (what a busy
# host's samples make it do), in this run only.
NOISY_RMSNORM = '''
from pytest_npuperf.replay.runner import CaseRunner

_check = CaseRunner._check_noise


def _noisy_rmsnorm(result, samples):
    _check(result, samples)
    if result.kernel_type == "RmsNorm" and result.status == "ok":
        result.status, result.error = "noisy", "interquartile range 50 % of the median"


def pytest_configure(config):
    CaseRunner._check_noise = staticmethod(_noisy_rmsnorm)


def pytest_unconfigure(config):
    CaseRunner._check_noise = staticmethod(_check)
'''


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", default_tables())
    return pytester, db


@pytest.fixture
def noisy_project(project):
    pytester, db = project
    pytester.makeconftest(NOISY_RMSNORM)
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


# -- no value, no green ----------------------------------------------------------------------------
def _summary_line(result) -> str:
    return next(line for line in reversed(result.outlines) if " in " in line and "=" in line)


def test_a_case_without_a_value_is_not_reported_passed(noisy_project):
    pytester, db = noisy_project
    page = pytester.path / "report.html"
    result = run(pytester, db, "-v", "-k", "MatMul or RmsNorm", f"--html={page}")
    assert result.ret == pytest.ExitCode.OK  # a busy night is not a failed build by default
    assert "2 passed" in _summary_line(result) and "1 no value" in _summary_line(result)
    line = next(line for line in result.outlines if "RmsNorm" in line and "test_kernel[" in line)
    assert "NO VALUE" in line and "(noisy)" in line and "PASSED" not in line
    out = "\n".join(result.outlines)
    assert "1 case(s) with no value (noisy 1; not passed" in out
    assert "noisy: interquartile range 50 % of the median" in out
    # in the results table after failed and SLOWER cases, before the measured ones
    table = out[out.index("npuperf results"):out.index("= npuperf =")].splitlines()
    first = table[next(i for i, line in enumerate(table) if line.startswith("case ")) + 1]
    assert first.startswith("RmsNorm-") and " noisy " in first
    # pytest-html: not a green Passed, with its reason in the summary
    text = html.unescape(page.read_text())
    assert re.search(r'col-result\\?">No value<', text)  # the row's cells are JSON in the page
    assert "1 case(s) with no value (noisy 1" in text
    report = run_json(pytester.path / "out")
    assert {c["kernel_type"]: c["status"] for c in report["cases"]} == {
        "MatMulV2": "ok", "RmsNorm": "noisy"}


def test_an_option_makes_a_case_without_a_value_fail(noisy_project):
    pytester, db = noisy_project
    result = run(pytester, db, "-k", "RmsNorm", "--npuperf-no-value", "fail")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "1 failed" in _summary_line(result)
    assert "no value: noisy: interquartile range" in "\n".join(result.outlines)
    assert "(--npuperf-no-value fail)" in "\n".join(result.outlines)


# -- -n 2 -v ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_xdist_with_verbose_ends_normally_and_writes_every_case(noisy_project):
    """execnet sends dictionaries: a worker's `-v` status word must not turn the result its
    report carries into an object (the run was lost to an INTERNALERROR). The controller
    names each outcome, `no value` included."""
    pytester, db = noisy_project
    result = run(pytester, db, "-n", "2", "-v", "-k", "MatMul or RmsNorm")
    output = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in output and "DumpError" not in output
    assert result.ret == pytest.ExitCode.OK
    assert sum(1 for line in result.outlines if "PASSED" in line and " us" in line) == 2
    assert sum(1 for line in result.outlines if "NO VALUE" in line) == 1
    assert "2 passed" in _summary_line(result) and "1 no value" in _summary_line(result)
    report = run_json(pytester.path / "out")
    assert report["totals"]["cases"] == 3 and report["session"]["workers"] == 2
