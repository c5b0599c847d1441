"""Hostile rows and crashed writers in replay sessions (issue 20): a row too large for the host
is skipped before anything is allocated, a row with tensors its kernel does not take fails, a
failing duplicate of a passing row is never written as `ok`, and a crashed writer's journal is
rolled back even when its pid went to another process.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.db.lock import process_start
from pytest_npuperf.db.table import read_table, write_text
from pytest_npuperf.db.transaction import (
    JOURNAL_PREFIX,
    pending_journals,
    recover,
    recover_if_free,
)
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.kernels.spec import ReplaySkipped
from pytest_npuperf.measure.policy import SamplingPolicy, case_timeout
from pytest_npuperf.measure.result import CaseResult
from pytest_npuperf.profiling.handoff import HANDOFF_NAME, write_handoff
from pytest_npuperf.replay.cases import CaseCatalog

from .conftest import tree_digest
from .kernel_rows import prepare, row
from .profile_data import Range, calls, prof_dir, summaries
from .replay_project import BENCH, FAST, RMSNORM_ROWS, cells, write_db
from .test_db_transaction import _killed_child, files  # noqa: F401 (a fixture)

GIB = 1 << 30


class _SmallHost(CpuBackend):
    def available_memory(self) -> int | None:
        return 24 * GIB


def _three_10gb_tensors() -> dict[str, str]:
    shape = (GIB * 10 // 4,)  # float32: 10 GiB each
    return row([(shape, "FLOAT"), (shape, "FLOAT")], [(shape, "FLOAT")])


def test_a_row_beyond_the_hosts_memory_is_skipped_before_anything_is_allocated(monkeypatch):
    def allocation(*args, **kwargs):
        raise AssertionError("a tensor was allocated")

    for name in ("randn", "randint", "empty", "zeros"):
        monkeypatch.setattr(torch, name, allocation)
    with pytest.raises(ReplaySkipped, match=r"Add: its tensors need 40\.0 GiB and cpu has "
                                            r"24\.0 GiB available; nothing was allocated"):
        prepare("Add", _three_10gb_tensors(), backend=_SmallHost())


def test_a_replay_session_skips_a_row_larger_than_this_host(pytester):
    """The real host's memory: three 4 TB tensors fit on no test machine."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    huge = "1000000,1000000"
    db = write_db(pytester.path / "db", {"Add": [
        cells(f"{huge};{huge}", "FLOAT;FLOAT", "ND;ND", huge, "FLOAT"),
        cells("8,16;8,16", "FLOAT;FLOAT", "ND;ND", "8,16", "FLOAT")]})
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*Add: its tensors need 14,901.2 GiB and cpu has * GiB "
                                 "available; nothing was allocated*"])
    # Issue 29: and the database says so (the status was left empty).
    [target] = list((pytester.path / "out").glob("CPU_*/vllm_ascend/*"))
    status = read_table(target / "Add.csv")["MicroBench Status"][0]
    assert status.startswith("skipped: Add: its tensors need 14,901.2 GiB"), status


def test_a_row_with_tensors_its_kernel_does_not_take_fails(monkeypatch):
    many = row([((8, 16), "FLOAT")] * 100_000, [((8, 16), "FLOAT")])
    with pytest.raises(CellError, match="Add: 100,000 input slots, 99,998 of them with a shape "
                                        "beyond the 2 this kernel takes"):
        prepare("Add", many)
    trailing_empty = row([((8, 16), "FLOAT"), ((8, 16), "FLOAT"), None], [((8, 16), "FLOAT")])
    prepare("Add", trailing_empty)  # an absent optional slot past the layout is no tensor


def test_a_failing_duplicate_of_a_passing_row_keeps_its_own_failure(pytester):
    """Same signature (the extra dtype entry is blanked): the second row's case fails, and
    it used to get the first row's duration with status ok, the failure recorded nowhere."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"MatMulV2": [
        cells("16,64;32,64", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16"),
        cells("16,64;32,64", "DT_BF16;DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16")]})
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST)
    result.assert_outcomes(passed=1, failed=1)
    [target] = list((pytester.path / "out").glob("CPU_*/vllm_ascend/*"))
    table = read_table(target / "MatMulV2.csv")
    assert table["MicroBench Status"][0].startswith("ok")
    assert table["Average Duration(us)"][0] != ""
    assert table["MicroBench Status"][1].startswith("error: ") and \
        "3 entries for 2 shape slot(s)" in table["MicroBench Status"][1]
    assert table["Average Duration(us)"][1] == ""


@pytest.mark.skipif(not hasattr(os, "fork") or process_start(os.getpid()) is None,
                    reason="needs fork and /proc")
def test_a_crashed_writers_journal_is_rolled_back_when_its_pid_was_reused(files):  # noqa: F811
    """The journal names a pid that a live process has now: that process started at another
    time than the one the writer recorded, so it is not the writer."""
    before = tree_digest(files)
    _killed_child(files, 2)
    [journal] = pending_journals(files)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = json.loads(journal.read_text())
        record["pid"] = other.pid  # the dead writer's pid, given to another process
        journal.write_text(json.dumps(record))
        notes = recover(files)
    finally:
        other.kill()
        other.wait()
    assert any("rolled back an interrupted write" in n for n in notes), notes
    assert not pending_journals(files)
    assert tree_digest(files) == before | {".npuperf.lock": tree_digest(files)[".npuperf.lock"]}


@pytest.mark.skipif(process_start(os.getpid()) is None, reason="needs /proc")
def test_a_journal_of_a_live_writer_that_recorded_its_start_is_left_alone(files):  # noqa: F811
    journal = files / f"{JOURNAL_PREFIX}{os.getppid()}-abcd1234"
    journal.write_text(json.dumps({"txid": f"{os.getppid()}-abcd1234", "pid": os.getppid(),
                                   "pid_started": process_start(os.getppid()),
                                   "host": os.uname().nodename, "entries": []}))
    assert recover(files) == []
    assert journal.exists()


# -- sampling options that mean nothing ----------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("budget_s", math.nan), ("budget_s", -1.0), ("budget_s", math.inf),
    ("precision", math.nan), ("precision", -0.02), ("min_time_s", math.nan),
    ("warmup_time_s", math.inf),
])
def test_a_nan_negative_or_infinite_sampling_setting_is_refused(field, value):
    with pytest.raises(ValueError, match="must be a finite number"):
        SamplingPolicy(**{field: value})


@pytest.mark.parametrize("value", [math.nan, -5.0, math.inf])
def test_a_nan_negative_or_infinite_case_timeout_is_refused(value):
    with pytest.raises(ValueError, match="case timeout must be a finite number"):
        case_timeout(value)
    assert case_timeout(0.0) is None and case_timeout(2.5) == 2.5


def test_pytest_refuses_a_nan_budget_before_any_case(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"Add": [cells("8,16;8,16", "FLOAT;FLOAT", "ND;ND",
                                                       "8,16", "FLOAT")]})
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST, "--npuperf-budget", "nan")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*budget must be a finite number > 0, got nan*"])


# -- a hand-off of the wrong JSON types ----------------------------------------------------------

T0 = 1_780_676_244_000_000.0


@pytest.mark.parametrize("change, needle", [
    (lambda head, block: head.update(session=[1, 2]), "line 1: the session is not a JSON object"),
    (lambda head, block: block["columns"].update(status=[5]), "column 'status' holds 5"),
    (lambda head, block: block["columns"].update(row=["one"]), "column 'row' holds \"one\""),
    (lambda head, block: block["columns"].update(case_id=[None]), "column 'case_id' holds null"),
    (lambda head, block: block["columns"].update({"stats.median": ["x"]}),
     "column 'stats.median' holds \"x\""),
    (lambda head, block: block.update(count="1"), "a block needs a whole count"),
])
def test_a_hand_off_of_the_wrong_json_types_is_one_line(tmp_path, npuperf, monkeypatch, change,
                                                        needle):
    monkeypatch.chdir(tmp_path)
    db = write_db(tmp_path / "db", {"RmsNorm": RMSNORM_ROWS})
    [ref] = CaseCatalog(db).cases()
    summaries(prof_dir(tmp_path / "run"), calls("RmsNorm", T0 + 10, 3),
              [Range(ref.case_id, T0, T0 + 100)])
    result = CaseResult(case_id=ref.case_id, nodeid="n", kernel_type="RmsNorm", file=ref.file,
                        signature=ref.signature, row=ref.row_number)
    result.set_samples([1.0, 2.0, 3.0])
    path = tmp_path / "run" / HANDOFF_NAME
    write_handoff(path, {"native": True}, [result])
    head, block = map(json.loads, path.read_text().splitlines())
    change(head, block)
    path.write_text(json.dumps(head) + "\n" + json.dumps(block) + "\n")
    before = tree_digest(db)
    code, _, err = npuperf("backfill", "--profile", tmp_path / "run", "--db", db,
                           "--history", "none")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert needle in err and "the hand-off is damaged" in err
    assert tree_digest(db) == before


def test_backfill_with_an_unreadable_baseline_is_a_usage_error(tmp_path, npuperf, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = write_db(tmp_path / "db", {"RmsNorm": RMSNORM_ROWS})
    summaries(prof_dir(tmp_path / "run"), calls("RmsNorm", T0 + 10, 3), [])
    (tmp_path / "garbage.json").write_text("garbage")
    for baseline, needle in (("garbage.json", "not a run JSON file"),
                             ("missing/run.json", "no such file"), ("nosuchrun", "no history")):
        code, _, err = npuperf("backfill", "--profile", tmp_path / "run", "--db",
                               db, "--baseline", baseline)
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith("npuperf backfill: error: --baseline: ") and needle in err, err
    assert not (db / "reports").exists()


# -- crash windows: what a killed writer left is cleaned by the next reader ---------------------

@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_killed_peak_cache_write_is_cleaned_by_the_next_session(tmp_path, monkeypatch):
    from pytest_npuperf.devices import cpu_peak as peaks
    from pytest_npuperf.devices.base import Peak

    cache = peaks.cache_file(tmp_path / "peaks")
    monkeypatch.setattr(peaks, "measure_cpu_peak", lambda: Peak(2e9, 2e9))
    peaks.cpu_peak("a CPU", tmp_path / "peaks")  # the cache, written whole
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: killed between its journal and its rename
        def dying(src, dst):
            if JOURNAL_PREFIX not in str(dst) and not str(dst).endswith(".tmp"):
                os._exit(9)
            return real(src, dst)
        real, os.replace = os.replace, dying
        write_text(cache, "{}\n")
        os._exit(3)
    os.waitpid(pid, 0)
    assert pending_journals(cache.parent)
    # A slower measurement than the cache's: nothing is written, yet the leftovers go.
    monkeypatch.setattr(peaks, "measure_cpu_peak", lambda: Peak(1e9, 1e9))
    assert peaks.cpu_peak("a CPU", tmp_path / "peaks").flops == 2e9
    assert sorted(p.name for p in cache.parent.iterdir()) == [cache.name]


def test_temporary_files_of_a_writer_killed_before_its_journal_are_removed_by_a_reader(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    staged = tmp_path / f".Add.csv.npuperf-{int(dead.stdout)}-abcd1234.new"
    staged.write_text("half a table")
    notes = recover_if_free(tmp_path)
    assert not staged.exists() and any("removed 1 temporary file(s)" in n for n in notes)


def test_a_kernel_child_directory_of_a_reused_pid_is_removed(tmp_path, monkeypatch):
    from pytest_npuperf.db import lock
    from pytest_npuperf.ingest.kernel_child import remove_stale_workdirs

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        workdir = tmp_path / f"npuperf_kernels_{other.pid}_abc123"
        workdir.mkdir()
        assert remove_stale_workdirs() == []  # a live process that may be its parent
        monkeypatch.setattr(lock, "process_start", lambda pid: workdir.stat().st_ctime + 60)
        assert remove_stale_workdirs() == [workdir]  # started after the directory was made
    finally:
        other.kill()
        other.wait()


# A worker killed right after it reported its collection: xdist's send of its first cases fails.
KILL_GW1 = """
import os, signal

def pytest_collection_finish(session):
    worker = getattr(session.config, "workerinput", None)
    if worker and worker["workerid"] == "gw1":
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_an_xdist_worker_killed_at_start_up_is_one_line_not_an_internal_error(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    pytester.makeconftest(KILL_GW1)
    db = write_db(pytester.path / "db", {"Add": [
        cells(f"{m},16;{m},16", "FLOAT;FLOAT", "ND;ND", f"{m},16", "FLOAT") for m in (2, 4)]})
    result = pytester.runpytest_subprocess("bench", "-n", "2", "--npuperf-db", str(db),
                                           "--npuperf-out", str(pytester.path / "out"), *FAST)
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    if "node down" not in output:  # xdist saw the worker die before it sent it cases
        assert "an xdist worker died as its first cases were sent to it" in output
        assert result.ret == pytest.ExitCode.INTERNAL_ERROR


SLEEPER = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32",
                    reason="needs POSIX signals")
def test_npuperf_profile_stopped_by_sigterm_takes_its_workload_along(tmp_path):
    """Before: npuperf ended and the workload it profiled ran on, orphaned."""
    script, pid_file = tmp_path / "sleeper.py", tmp_path / "workload.pid"
    script.write_text(SLEEPER)
    npuperf = subprocess.Popen([sys.executable, "-c", "import sys; from pytest_npuperf.cli "
                                "import main; sys.exit(main())", "profile", "--out",
                                str(tmp_path / "t.json"), "--device", "cpu", "--", sys.executable,
                                str(script), str(pid_file)], stderr=subprocess.PIPE, text=True)
    workload = None
    try:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text():
                workload = int(pid_file.read_text())
                break
            time.sleep(0.1)
        assert workload is not None, "the workload never started"
        npuperf.send_signal(signal.SIGTERM)
        _, err = npuperf.communicate(timeout=60)
        assert npuperf.returncode != 0 and "interrupted; nothing was written" in err
        assert not _alive(workload)
    finally:
        if npuperf.poll() is None:
            npuperf.kill()
        if workload is not None and _alive(workload):
            os.kill(workload, signal.SIGKILL)
