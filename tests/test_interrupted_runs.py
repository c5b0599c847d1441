"""Interrupted runs keep their cases (issue 20): a session stopped by SIGTERM, SIGHUP or Ctrl-C
after N finished cases writes those N rows, records a partial run and says so; a session
killed outright loses at most the case in flight, and --npuperf-resume measures the rest."""

from __future__ import annotations

import signal

import pytest

from pytest_npuperf.db.columns import AVERAGE_DURATION
from pytest_npuperf.history.store import HistoryStore
from tests.conftest import read_rows
from tests.replay_project import BENCH, FAST, cells, write_db

ROWS = [cells(f"{m},64;32,64", "DT_FLOAT;DT_FLOAT", "ND;ND", f"{m},32", "DT_FLOAT")
        for m in (2, 4, 6, 8, 10, 12)]
# Stops the session from inside it, as a CI timeout or a kill does from outside: the signal
# is sent to this very process once `after` replay cases have finished.
STOPPER = """
import os, signal

FINISHED = []

def pytest_runtest_logreport(report):
    if report.when == "call" and "test_kernel[" in report.nodeid:
        FINISHED.append(report.nodeid)
        if len(FINISHED) == {after}:
            os.kill(os.getpid(), signal.{name})
"""


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"MatMulV2": ROWS})
    return pytester, db


def _run(pytester, db, *args):
    return pytester.runpytest_subprocess("bench", "--npuperf-db", str(db), "--npuperf-out",
                                         str(pytester.path / "out"), *FAST, "-p",
                                         "no:randomly", *args)


def _measured(pytester) -> list[dict]:
    [copy] = (pytester.path / "out").glob("CPU_*/vllm_ascend/*")
    return [r for r in read_rows(copy / "MatMulV2.csv") if r[AVERAGE_DURATION]]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stopped_session_writes_its_finished_cases_and_records_a_partial_run(project, name):
    if not hasattr(signal, name):
        pytest.skip(f"no {name} on this platform")
    pytester, db = project
    pytester.makeconftest(STOPPER.format(after=3, name=name))
    result = _run(pytester, db)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    stopped = "interrupted (Ctrl-C)" if name == "SIGINT" else f"stopped by {name}"
    result.stdout.fnmatch_lines([f"*partial run: {stopped} after 3 of 6 case(s)*"])
    assert len(_measured(pytester)) == 3
    with HistoryStore(pytester.path / "out" / "history.sqlite", readonly=True) as store:
        [run] = store.runs()
        assert run.passed is False and run.options["partial"].startswith(stopped)
        assert len(store.run_cases(run.run_id)) == 3
    report = next((pytester.path / "out" / "reports").glob("replay_report_*.md")).read_text()
    assert f"partial run: {stopped} after 3 of 6" in report
    # Its journal stays: the run can be completed.
    assert list((pytester.path / "out" / "runs").glob("*.jsonl"))


@pytest.mark.slow
def test_a_killed_session_loses_at_most_the_case_in_flight_and_resume_completes_it(project):
    pytester, db = project
    pytester.makeconftest(STOPPER.format(after=4, name="SIGKILL"))
    killed = _run(pytester, db)
    assert killed.ret == -signal.SIGKILL
    assert not list((pytester.path / "out").glob("CPU_*/*/*/*.csv"))  # nothing written...
    [journal] = (pytester.path / "out" / "runs").glob("*.jsonl")  # ...but nothing lost
    (pytester.path / "conftest.py").unlink()
    resumed = _run(pytester, db, "--npuperf-resume", "last")
    resumed.assert_outcomes(passed=2, deselected=4)  # at most the case in flight measured again
    resumed.stdout.fnmatch_lines([f"*resumed run {journal.stem}: 4 case(s) taken from its "
                                  f"journal*"])
    assert len(_measured(pytester)) == 6
    assert not journal.exists()  # the run ended written: nothing left to resume
    again = _run(pytester, db, "--npuperf-resume", "last")
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    assert "no unfinished run journal" in again.stderr.str()


@pytest.mark.slow
def test_resume_of_a_run_that_is_not_there_is_one_usage_error(project):
    pytester, db = project
    result = _run(pytester, db, "--npuperf-resume", "20260101_000000-00000000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no journal" in result.stderr.str()
