"""The replay harness facing user mistakes and faults (issue 8, items 4-7): one-line usage
errors, a bad CSV that does not block other cases, crashed xdist workers, Ctrl-C during the
write, names and symlinks that would lead out of the output directory. All in process."""

from __future__ import annotations

import pytest

from pytest_npuperf.db.table import read_table
from tests.replay_project import (
    BENCH,
    FAST,
    default_tables,
    run_json,
    tree_digest,
    write_db,
)


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    return pytester, write_db(pytester.path / "db", default_tables())


def run(pytester, db, *args):
    return pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                              str(pytester.path / "out"), *FAST, *args)


def one_usage_line(result, *needles: str) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines[-5:]
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1, result.errlines
    assert errors[0].startswith("ERROR: ") and "Traceback" not in result.stdout.str()
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize("where", ["option", "ini"])
@pytest.mark.parametrize("name", ["../../X", "a/b", ".hidden", ".."])
def test_a_device_name_that_would_leave_the_output_directory_is_refused(project, where, name):
    pytester, db = project
    if where == "ini":
        pytester.makeini(f"[pytest]\nnpuperf_device_name = {name}\n")
        result = run(pytester, db)
    else:
        result = run(pytester, db, "--npuperf-device-name", name)
    one_usage_line(result, "npuperf_device_name", "invalid device name")
    assert not (pytester.path / "out").exists()
    assert not any(p.name == "X" for p in pytester.path.parent.rglob("X"))


@pytest.mark.parametrize("make, needle", [
    ("missing", "no such directory"),
    ("file", "a file, not a database directory"),
    ("lfs", "Git LFS pointer"),
])
def test_a_bad_npuperf_db_is_one_line(pytester, make, needle):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    path = pytester.path / "db"
    if make == "file":
        path.write_text("OP State\n")
    elif make == "lfs":
        path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    result = pytester.runpytest("bench", "--npuperf-db", str(path), *FAST)
    one_usage_line(result, "--npuperf-db", needle)


@pytest.mark.parametrize("content", [
    b"\x00" * 4096,
    b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n",
    b"OP State,Input Shapes\n\"unterminated\n" + b"x" * 100,
])
@pytest.mark.slow
def test_one_bad_csv_does_not_block_cases_that_do_not_need_it(project, content):
    pytester, db = project
    (db / "Garbage.csv").write_bytes(content)
    before = tree_digest(db)
    selected = run(pytester, db, "-k", "RmsNorm")
    selected.assert_outcomes(passed=1)
    selected.stdout.fnmatch_lines(["*Garbage.csv could not be read*"])
    assert tree_digest(db) == before
    everything = run(pytester, db)
    everything.assert_outcomes(passed=3, skipped=1, failed=1)  # the bad file's case errors
    everything.stdout.fnmatch_lines(["*Garbage.csv: *", "*FAILED*Garbage-unreadable*"])
    assert tree_digest(db) == before


def test_a_reports_symlink_out_of_the_database_is_refused(pytester, tmp_path_factory):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", default_tables(), device="CPU_TESTBOX")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (db / "reports").symlink_to(elsewhere)
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-device-name",
                                "CPU_TESTBOX", "-k", "RmsNorm", *FAST)
    one_usage_line(result, "reports is a symbolic link")
    assert list(elsewhere.iterdir()) == []


CRASH_CONFTEST = '''
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """What pytest-xdist's controller does when the worker running a case dies
    (xdist.dsession.DSession.handle_crashitem): a failed report with when='???'."""
    if "MatMulV2-16x64" not in item.nodeid:
        return None

    class Scheduler:  # xdist passes its scheduler (and sets report.node to the worker)
        config = item.config

    fspath = item.nodeid.split("::")[0]
    report = pytest.TestReport(nodeid=item.nodeid, location=(fspath, None, fspath),
                               keywords={}, outcome="failed", when="???",
                               longrepr=f"worker 'gw0' crashed while running {item.nodeid!r}")
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    item.config.hook.pytest_handlecrashitem(crashitem=item.nodeid, report=report,
                                            sched=Scheduler())
    item.config.hook.pytest_runtest_logreport(report=report)
    return True
'''


def test_a_case_whose_worker_crashed_is_marked_crashed_and_fails_the_session(project):
    import xdist.newhooks

    assert hasattr(xdist.newhooks, "pytest_handlecrashitem")  # the installed xdist has it
    pytester, db = project
    pytester.makeconftest(CRASH_CONFTEST)
    result = run(pytester, db, "-k", "MatMul")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = pytester.path / "out"
    [target] = list(out.glob("CPU_*/vllm_ascend/*"))
    statuses = read_table(target / "MatMulV2.csv")["MicroBench Status"].tolist()
    assert statuses[0].startswith("crashed: worker 'gw0' crashed while running")
    assert statuses[1].startswith("ok")  # "ok (a note)" on a busy machine
    totals = run_json(out)["totals"]["by_status"]
    assert totals["crashed"] == 1 and totals["ok"] == 1
    result.stdout.fnmatch_lines(["*1 crashed*"])


def test_ctrl_c_during_the_write_leaves_every_database_and_says_so(project, monkeypatch):
    import pytest_npuperf.replay.write as write

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(write, "write_results", interrupted)  # the run is in this process
    pytester, db = project
    before = tree_digest(db)
    result = run(pytester, db, "-k", "RmsNorm")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*interrupted during the database write: the database was left as it was*"])
    assert "Traceback" not in result.stdout.str()
    assert tree_digest(db) == before
    assert not list((pytester.path / "out").glob("CPU_*/vllm_ascend/*/*.csv"))


def test_prune_says_which_rows_it_deleted(project, monkeypatch):
    from pytest_npuperf.replay.runner import CaseRunner

    def always_suspect(self, result):
        result.status, result.error = "suspect", "faster than the device allows (test)"

    monkeypatch.setattr(CaseRunner, "_check_bound", always_suspect)
    pytester, db = project
    result = run(pytester, db, "-k", "RmsNorm", "--npuperf-prune-empty-duration-rows")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*RmsNorm.csv: pruned 1 row(s) measured without any "
                                 "duration*row 1 (4,256;256*"])
