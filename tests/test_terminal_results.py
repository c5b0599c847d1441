"""What a session shows in the terminal: the results table (value, min, CI, samples, status,
share of the bound, verdict; worst and best N, `--npuperf-table all|N|none`), the value on
each `-v` line, and a progress line with the time left on long sessions."""

from __future__ import annotations

import re

import pytest

# In-process pytester runs drop the modules first imported inside them, and torch cannot be
# imported twice into one process: imported here, before any run replays a case.
import torch  # noqa: F401

from pytest_npuperf.harness.progress import case_progress, clock_text
from pytest_npuperf.measure.result import STATUS_FAILED, STATUS_NOISY, STATUS_SKIPPED
from pytest_npuperf.report.results_table import results_table
from tests.replay_project import BENCH, FAST, MATMUL_ROWS, RMSNORM_ROWS, cells, write_db
from tests.report_data import case, gemm_results


def _names(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines[2:] if not line.startswith("...")]


def _unjudged():
    results = gemm_results()
    for r in results:
        r.regression = None
    return results


def test_without_a_baseline_the_cases_furthest_from_their_bound_are_the_worst():
    results = _unjudged()
    for r in results:
        m = int(r.case_id.split("-")[1].split("x")[0])
        r.bound_us = r.value * {1: 0.9, 16: 0.5}.get(m, 0.2)
    lines = results_table(results, 2)
    assert lines[0].startswith("the 2 worst and the 2 best of") and "roofline bound" in lines[0]
    assert lines[1].split() == ["case", "value", "min", "±CI", "samples", "status", "of",
                                "bound", "vs", "baseline"]
    worst = lines[2:4]
    assert all("20 %" in row for row in worst)
    assert lines[4].startswith("... ") and lines[4].endswith(" more")
    assert all("90 %" in row for row in lines[5:7])
    # every column of a row: value and min in their unit, the CI, samples, status
    assert re.search(r"\d+(\.\d+)? us\s+\d+(\.\d+)? us\s+(±[\d.]+ %|-)\s+\d+\s+ok", lines[2])


def test_with_a_baseline_the_largest_slowdowns_are_the_worst_and_failures_come_first():
    results = gemm_results()
    for i, r in enumerate(results):
        r.regression = {"verdict": "SLOWER" if i == 7 else "SAME", "ratio": 1.0 + i / 100}
    failed = case("MatMulV2", "1,8;8,8", STATUS_FAILED, error="RuntimeError: boom")
    skipped = case("SoftmaxV2", "8,8", STATUS_SKIPPED)
    noisy = case("RmsNorm", "8,64", STATUS_NOISY, error="spread", samples=[4.0, 9.0, 30.0])
    lines = results_table([*results, failed, skipped, noisy], 3)
    assert "change against the baseline" in lines[0]
    assert _names(lines)[0] == failed.case_id and lines[2].split()[1:3] == ["-", "-"]
    assert _names(lines)[1] == results[-1].case_id  # the largest ratio
    assert "SLOWER 1.070x" in lines[3]
    assert lines[-1] == "1 case(s) skipped (no replay for their kernel type here)"
    everything = results_table([*results, failed, skipped, noisy], None)
    assert len(_names(everything[:-1])) == len(results) + 2  # all but the skipped one
    # a noisy case the host left without a value is listed with the failures, not dropped
    empty = case("RmsNorm", "8,128", STATUS_NOISY, error="preempted: every sample")
    listed = results_table([*results, empty], 2)
    assert _names(listed)[0] == empty.case_id and " noisy " in listed[2]
    assert any(" noisy " in line for line in everything)
    assert results_table(results, 0) == []


def test_a_few_cases_are_listed_whole():
    results = _unjudged()[:5]
    for r in results:
        r.bound_us = None
    lines = results_table(results, 2)
    assert lines[0].startswith("5 case(s), worst first by value") and len(lines) == 2 + 5


def test_progress_lines_come_an_interval_apart_with_the_time_left():
    clock = iter([0.0, 5.0, 30.0, 61.0, 62.0, 125.0])
    written: list[str] = []
    line = case_progress(400, written.append, interval_s=60.0, now=lambda: next(clock))
    assert [line.update(n) for n in (10, 60, 120, 121, 250)][:4] == [None, None, written[0], None]
    assert written == ["npuperf: 120/400 cases (30 %), 1:01 elapsed, about 2:22 left "
                       "(0.51 s per case)",
                       "npuperf: 250/400 cases (62 %), 2:05 elapsed, about 1:15 left "
                       "(0.50 s per case)"]
    assert clock_text(3725) == "1:02:05"


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    rows = [*MATMUL_ROWS, cells("32,64;16,64", "DT_FLOAT;DT_FLOAT", "ND;ND", "32,16", "DT_FLOAT")]
    db = write_db(pytester.path / "db", {"MatMulV2": rows, "RmsNorm": RMSNORM_ROWS})
    return pytester, db


def _run(pytester, db, *args):
    return pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                              str(pytester.path / "out"), *FAST, *args)


def test_a_session_ends_with_its_results_and_says_each_value_on_its_v_line(project):
    pytester, db = project
    result = _run(pytester, db, "-v", "--npuperf-progress", "0.0001")
    out = result.stdout.str()
    assert result.ret == 0
    # the CI when the samples give one (a busy host may leave a case a single sample)
    measured = re.findall(r"test_kernel\[(\S+)\] PASSED ([\d.]+ [nmu]?s)(?: ±[\d.]+ %)?", out)
    assert len(measured) == 4
    table = out[out.index("npuperf results"):out.index("= npuperf =")]
    assert "4 case(s), worst first by share of the roofline bound reached" in table
    for case_id, value in measured:
        row = next(line for line in table.splitlines() if line.startswith(case_id + " "))
        assert value in row and " ok " in row
    # not a TTY: plain progress lines, each on a line of its own
    progress = [line for line in out.splitlines() if line.startswith("npuperf: ")
                and "cases (" in line]
    assert progress and all(re.fullmatch(r"npuperf: \d/4 cases \(\d+ %\), \d+:\d\d elapsed, "
                                         r"about \d+:\d\d left \([\d.]+ s per case\)", line)
                            for line in progress)


def test_the_table_can_be_shortened_or_left_out_and_short_sessions_print_no_progress(project):
    pytester, db = project
    out = _run(pytester, db, "--npuperf-table", "1").stdout.str()
    assert "the 1 worst and the 1 best of 4 case(s)" in out and "... 2 more" in out
    assert "cases (" not in out  # auto: a session shorter than a minute in a log
    out = _run(pytester, db, "--npuperf-table", "none").stdout.str()
    assert "npuperf results" not in out and "= npuperf =" in out
    bad = _run(pytester, db, "--npuperf-table", "some")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "npuperf_table: expected all, none or a number of cases" in bad.stderr.str()
